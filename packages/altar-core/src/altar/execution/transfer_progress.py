"""Byte-level progress of transfers, from a backend to whoever drives it (standard library only).

A backend calls :func:`report` as bytes move; a driver (the runner) installs a callback with
:func:`reporting_to` around the backend call. The callback travels in a
:class:`contextvars.ContextVar`, so it reaches backend code in threads started with
:func:`asyncio.to_thread` (which copies the context) and in tasks the backend creates, without
changing any method of :class:`~altar.execution.backend.ExecutionBackend`. A thread started
with :class:`threading.Thread` or an executor does not inherit the context: start it with
``contextvars.copy_context().run`` as its target, or capture :func:`current_callback` first.

Without a callback, :func:`report` is one context-variable lookup and returns.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from dataclasses import dataclass

__all__ = [
    "ProgressCallback",
    "TransferProgress",
    "current_callback",
    "format_bytes",
    "report",
    "reporting_to",
]


@dataclass(frozen=True)
class TransferProgress:
    """One report: ``done`` of ``total`` bytes of one transfer are in place.

    ``label`` is the transfer's logical path (what the driver knows it by); ``total`` is None
    when the backend does not know the size. ``done`` counts bytes in place, whether copied now
    or found already staged, and never decreases for one label within one call.
    """

    label: str
    done: int
    total: int | None = None


ProgressCallback = Callable[[TransferProgress], None]

_CALLBACK: contextvars.ContextVar[ProgressCallback | None] = contextvars.ContextVar(
    "altar_transfer_progress", default=None
)


def report(label: str, done: int, total: int | None = None) -> None:
    """Tell the installed callback, if any, that ``done`` of ``total`` bytes of ``label`` moved.

    Call it from any thread, as often as is convenient: the callback throttles. An exception
    raised by the callback propagates to the caller.
    """
    callback = _CALLBACK.get()
    if callback is not None:
        callback(TransferProgress(label, done, total))


def current_callback() -> ProgressCallback | None:
    """The callback installed in this context, to hand to a thread that does not inherit it."""
    return _CALLBACK.get()


@contextlib.contextmanager
def reporting_to(callback: ProgressCallback | None) -> Iterator[None]:
    """Send the :func:`report` calls made within the block (and its threads) to ``callback``.

    Reports arrive on whatever thread the backend moves bytes on, possibly several at once:
    ``callback`` must be thread-safe and quick (hand the report over, do not render it there).
    ``None`` silences reports within the block.
    """
    token = _CALLBACK.set(callback)
    try:
        yield
    finally:
        _CALLBACK.reset(token)


def format_bytes(count: float) -> str:
    """``512 B``, ``3.2 KiB``, ... ``10.0 GiB``: binary units, one decimal above bytes."""
    if count < 1024:
        return f"{int(count)} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        count /= 1024
        if count < 1024 or unit == "TiB":
            break
    return f"{count:.1f} {unit}"
