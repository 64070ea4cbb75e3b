"""Staging progress for the plan runner: a backend's byte reports become throttled events.

The runner installs :meth:`StagingProgress.report` as the
:mod:`~altar.execution.transfer_progress` callback around ``stage_inputs`` and gets one
``staging_progress`` event at most every :data:`STAGING_PROGRESS_INTERVAL_S`, on its own thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat as stat_module
import threading
from collections.abc import Callable

from altar.execution.transfer_progress import TransferProgress, format_bytes
from altar.execution.types import Transfer
from altar.execution.uris import local_path_or_none

__all__ = ["STAGING_PROGRESS_INTERVAL_S", "EmitProgress", "StagingProgress", "local_sizes"]

# at most one event per this many seconds, plus one when a file shown in progress completes
STAGING_PROGRESS_INTERVAL_S = 0.5

#: Called on the loop's thread with (message, bytes done, bytes in total or None).
EmitProgress = Callable[[str, int, "int | None"], None]


def local_sizes(transfers: list[Transfer]) -> dict[str, int | None]:
    """Sizes of the inputs whose uri is a local regular file (None for any other), by logical path.

    Only local paths are looked at: a stat is cheap, and knowing every size up front gives a
    total (and a percentage) from the first report. Other sizes come from the backend's reports.
    """
    sizes: dict[str, int | None] = {}
    for transfer in transfers:
        size = None
        with contextlib.suppress(OSError, ValueError):  # a malformed uri is the backend's to judge
            path = local_path_or_none(transfer.uri)
            if path is not None:
                st = os.stat(path)
                size = st.st_size if stat_module.S_ISREG(st.st_mode) else None
        sizes[transfer.logical_path] = size
    return sizes


class StagingProgress:
    """Turns a backend's transfer reports into throttled ``staging_progress`` events.

    Reports arrive on any thread. Each is stored under a lock and at most one hand-over to the
    event loop is pending at a time (``call_soon_threadsafe``), so a backend reporting often
    costs the loop little; events are emitted on the loop's thread only. An event goes out at
    most every ``STAGING_PROGRESS_INTERVAL_S`` (a report held back is emitted when the interval
    ends), and at once when a file that had reported partial progress completes.

    ``bytes_done`` sums the latest report of every input; ``bytes_total`` sums their sizes,
    known from a local stat (:func:`local_sizes`) or a report, and is None while any is
    unknown. Bytes count once in place, copied or found already staged, as the backend reports.
    """

    def __init__(
        self, emit: EmitProgress, loop: asyncio.AbstractEventLoop, sizes: dict[str, int | None]
    ) -> None:
        self.emit = emit
        self.loop = loop
        self.totals = dict(sizes)
        self.done: dict[str, int] = {}
        self._lock = threading.Lock()
        self._latest: dict[str, TransferProgress] = {}  # guarded by _lock
        self._scheduled = False  # guarded by _lock
        self._closed = False  # guarded by _lock
        self._changed = False
        self._last_emit = -float("inf")  # loop time
        self._timer: asyncio.TimerHandle | None = None

    def report(self, progress: TransferProgress) -> None:
        """The installed callback: any thread."""
        with self._lock:
            if self._closed:
                return
            self._latest[progress.label] = progress
            if self._scheduled:
                return
            self._scheduled = True
        # a thread outliving a run that ended early may find the loop closed
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self._drain)

    def _take(self) -> dict[str, TransferProgress]:
        with self._lock:
            latest, self._latest = self._latest, {}
            self._scheduled = False
            return latest

    def _apply(self, latest: dict[str, TransferProgress]) -> bool:
        """Fold reports in; True if one completes a file that was shown incomplete."""
        completed = False
        for label, progress in latest.items():
            if progress.total is not None:
                self.totals[label] = progress.total
            total = self.totals.get(label)
            before = self.done.get(label)
            if total is not None and progress.done >= total and before is not None:
                completed = completed or before < total
            self.done[label] = max(progress.done, self.done.get(label, 0))
            self._changed = True
        return completed

    def _drain(self) -> None:
        latest = self._take()
        if self._closed:  # read on the loop thread, which is the only writer after open
            return
        completed = self._apply(latest)
        wait = self._last_emit + STAGING_PROGRESS_INTERVAL_S - self.loop.time()
        if completed or wait <= 0:
            self._emit()
        elif self._timer is None:
            self._timer = self.loop.call_later(wait, self._emit)

    def _emit(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._changed:
            return
        self._changed = False
        self._last_emit = self.loop.time()
        done = sum(self.done.values())
        sizes = list(self.totals.values())
        total = None if None in sizes else sum(size or 0 for size in sizes)
        if total is not None:
            percent = min(100, done * 100 // total) if total else 100
            message = f"staging {format_bytes(done)} of {format_bytes(total)} ({percent}%)"
        else:
            message = f"staging {format_bytes(done)} so far"
        self.emit(message, done, total)

    def close(self) -> None:
        """Stop listening (on the loop thread, when ``stage_inputs`` returned or failed).

        Reports from a thread that outlives the call are dropped.
        """
        with self._lock:
            self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def flush(self) -> None:
        """After a successful ``stage_inputs``: emit what the last reports left unsaid."""
        self._apply(self._take())
        self._emit()
