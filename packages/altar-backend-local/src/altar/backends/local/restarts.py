"""When the Docker engine behind a unix socket started: the process that answers on it.

Docker without live-restore stops every container when it starts (a restart, or a new start
after ``dockerd`` was killed): each one it finds running is sent its stop signal and killed,
and one that ended while the engine was down keeps the exit status it ended with. So a
container that started before the engine's start and ended after it was ended by the engine,
whatever its exit code says (137, SIGKILL, after the 10 s stop timeout). The engine reports
no start time of its own; the kernel does, for the process on the other end of its socket
(``SO_PEERCRED``), when that process is ``dockerd`` on this host. Anything else (a TCP or
SSH engine, a socket proxy, Podman, another PID namespace) is "not known".

Linux only; elsewhere every answer is None.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from pathlib import Path

__all__ = ["ENGINE_PROCESS", "engine_pid", "process_runs", "process_started_at", "socket_path"]

#: The only process whose start is taken for the engine's (a proxy's start says nothing).
ENGINE_PROCESS = "dockerd"
_UNIX_SCHEMES = ("unix://", "http+unix://")


def socket_path(base_url: str) -> str | None:
    """The socket file of a ``unix://`` engine URL, None for any other URL."""
    for scheme in _UNIX_SCHEMES:
        if base_url.startswith(scheme):
            return base_url[len(scheme) :] or None
    return None


def engine_pid(path: str, timeout_s: float = 5.0) -> int | None:
    """The pid of the ``dockerd`` listening on unix socket ``path``, or None."""
    peercred = getattr(socket, "SO_PEERCRED", None)
    if peercred is None:
        return None
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(timeout_s)
            probe.connect(path)
            raw = probe.getsockopt(socket.SOL_SOCKET, peercred, struct.calcsize("3i"))
    except OSError:
        return None
    pid = struct.unpack("3i", raw)[0]
    if pid <= 0:  # the peer is in a PID namespace this process cannot see
        return None
    try:
        name = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None
    return pid if name == ENGINE_PROCESS else None


def process_started_at(pid: int) -> float | None:
    """When process ``pid`` started, epoch seconds (to the kernel's clock tick), or None.

    ``/proc/<pid>/stat`` counts from boot in clock ticks; the boot-time clock read now turns
    that into an epoch time without the whole-second rounding of ``/proc/stat``'s ``btime``.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        since_boot = int(stat.rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
        boottime = time.clock_gettime(time.CLOCK_BOOTTIME)
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return time.time() - (boottime - since_boot)


def process_runs(pid: int) -> bool:
    """Whether process ``pid`` exists on this host and has not finished (a zombie has)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
