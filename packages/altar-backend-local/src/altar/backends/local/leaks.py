"""What the docker SDK leaks when the engine is down, closed when its error is seen.

Outside the common anatomy because it works around the SDK, not the engine: the real runtime
calls it on every error it turns into ``BackendUnavailableError``.
"""

from __future__ import annotations

import socket

__all__ = ["close_unconnected"]


def close_unconnected(error: BaseException) -> None:
    """Close the socket the SDK leaks when a unix connect fails (a dead engine).

    ``docker/transport/unixconn.py`` opens the socket in ``connect`` and drops it when the
    connect raises: left to the garbage collector, each refused request of an outage holds a
    descriptor until then and ends in a ResourceWarning. The failed ``connect`` frame is in the
    error's traceback chain; its ``sock`` is closed here.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        trace = current.__traceback__
        while trace is not None:
            frame = trace.tb_frame
            sock = frame.f_locals.get("sock") if frame.f_code.co_name == "connect" else None
            if isinstance(sock, socket.socket) and sock.family == socket.AF_UNIX:
                sock.close()
            trace = trace.tb_next
        current = current.__cause__ or current.__context__
