"""Following the engine's event stream, so outcomes are known the moment containers end.

Issue 16: the engine keeps only a window of past events (256 on Docker 20.10), so after a large
batch finished, a poll that asked for ``die`` events found only the last ~85 containers' and
inspected the rest one by one. An :class:`EventFollower` instead holds one streaming events
request open from the backend's first use, filtered on the backend's label, and records each
container's ``start`` time, ``die`` (exit code, time) and ``oom`` as they happen. A poll then
learns the outcome of every container that ended since with no request beyond its list, and
:meth:`EventFollower.wait_for_exit` wakes a waiter within milliseconds of an exit.

A record is never assumed: a container without one is left to the poller's other paths (the
engine's window, then an inspect). A broken stream is reopened from the last event seen, so the
engine replays the gap as far as its window reaches.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from altar.backends.local.runtime import ContainerEvent, DockerRuntime, EventStream

__all__ = ["EventFollower", "ExitRecord"]

_RETRY_MIN_S = 0.2
_RETRY_MAX_S = 5.0


@dataclass(frozen=True)
class ExitRecord:
    exit_code: int
    time: float  # engine seconds of the die event


class EventFollower:
    """A daemon thread reading ``start``/``die``/``oom`` events of containers with ``label``."""

    def __init__(self, runtime: DockerRuntime, label: str, engine_now: Callable[[], float]) -> None:
        self._runtime = runtime
        self._label = label
        self._engine_now = engine_now
        self._cond = threading.Condition()
        self._exits: dict[str, ExitRecord] = {}
        self._starts: dict[str, float] = {}
        self._oom: set[str] = set()
        self._covered_since: float | None = None
        self._last_event = 0.0  # engine time of the newest event seen (a reopen's ``since``)
        self._stream: EventStream | None = None
        self._thread: threading.Thread | None = None
        self._stopped = False

    # -- lifecycle ------------------------------------------------------------------------

    def ensure_started(self, *, wait: bool = True) -> None:
        """Have the stream open before returning (blocking: an events request if it is not).

        Raises whatever opening raises (BackendUnavailableError for an engine that cannot be
        reached); the thread keeps retrying a stream that broke by itself. ``wait=False``
        leaves the opening to the thread and returns at once.
        """
        with self._cond:
            if self._stopped:
                return
            if self._stream is None and wait:
                self._open()
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="altar-local-events", daemon=True
                )
                self._thread.start()

    def _open(self) -> None:
        """Under the lock: open the stream. The first from the engine's now (coverage starts
        there); a reopened one from the last event seen, so the engine replays the gap from its
        window (what fell out of it is found by the poller's other paths)."""
        if self._covered_since is None:
            since = self._engine_now()
            self._stream = self._runtime.watch_events(self._label, since)
            self._covered_since = self._last_event = since
        else:
            self._stream = self._runtime.watch_events(self._label, self._last_event)
        self._cond.notify_all()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            stream, thread = self._stream, self._thread
            self._stream = None
            self._cond.notify_all()
        if stream is not None:
            stream.close()
        if thread is not None:
            thread.join(timeout=5)

    def _run(self) -> None:
        pause = _RETRY_MIN_S
        while True:
            with self._cond:
                if self._stopped:
                    return
                if self._stream is None:
                    try:
                        self._open()
                    except Exception:
                        self._cond.wait(pause)  # stop() wakes it
                        pause = min(_RETRY_MAX_S, pause * 2)
                        continue
                stream = self._stream
                assert stream is not None
            heard = False
            try:
                for event in stream:
                    self._record(event)
                    heard = True
            except Exception:  # noqa: S110 - a broken stream is reopened on the next turn
                pass
            with self._cond:
                if self._stream is stream:
                    self._stream = None
                    self._cond.notify_all()  # waiters stop waiting for pushes
                if heard:
                    pause = _RETRY_MIN_S  # it worked for a while: reopen at once
                elif not self._stopped:
                    # It ended before saying anything: don't spin on an engine that ends every
                    # stream at once (the reopen replays what this pause misses).
                    self._cond.wait(pause)
                    pause = min(_RETRY_MAX_S, pause * 2)

    def _record(self, event: ContainerEvent) -> None:
        with self._cond:
            cid = event.container_id
            self._last_event = max(self._last_event, event.time)
            if event.action == "start":
                self._starts[cid] = event.time  # the latest start is the one that counts
            elif event.action == "oom":
                self._oom.add(cid)
            elif event.action == "die" and event.exit_code is not None:
                self._exits[cid] = ExitRecord(event.exit_code, event.time)
                self._cond.notify_all()

    # -- what it knows --------------------------------------------------------------------

    @property
    def following(self) -> bool:
        """The stream is open now (exits are pushed as they happen)."""
        with self._cond:
            return self._stream is not None and not self._stopped

    def covers(self, created: float) -> bool:
        """The events of a container created at engine time ``created`` are expected here (the
        stream was opened before it was created). Only a hint to wait a moment for a ``die``
        event in flight: a reopened stream may have lost events the engine's window dropped."""
        with self._cond:
            return (
                not self._stopped
                and self._covered_since is not None
                and created >= self._covered_since
            )

    def exit(self, container_id: str) -> ExitRecord | None:
        with self._cond:
            return self._exits.get(container_id)

    def oom(self, container_id: str) -> bool:
        with self._cond:
            return container_id in self._oom

    def started(self, container_id: str) -> float | None:
        with self._cond:
            return self._starts.get(container_id)

    def forget(self, container_ids: Iterable[str]) -> None:
        """Drop what is known of removed containers (their outcomes are cached elsewhere)."""
        with self._cond:
            for cid in container_ids:
                self._exits.pop(cid, None)
                self._starts.pop(cid, None)
                self._oom.discard(cid)

    def wait_for_exits(self, container_ids: Iterable[str], timeout_s: float) -> bool:
        """Block until every one of ``container_ids`` has a ``die`` record, or the timeout;
        True if all have one. Returns at once while the stream is not open."""
        wanted = list(container_ids)
        end = time.monotonic() + timeout_s
        with self._cond:
            while True:
                if all(cid in self._exits for cid in wanted):
                    return True
                left = end - time.monotonic()
                if left <= 0 or self._stream is None or self._stopped:
                    return False
                self._cond.wait(left)

    def wait_for_exit(self, container_ids: Iterable[str], timeout_s: float) -> bool:
        """Block until any of ``container_ids`` has a ``die`` record (or already has one), or
        the timeout; True if one has. Returns at once while the stream is not open."""
        wanted = list(container_ids)
        end = time.monotonic() + timeout_s
        with self._cond:
            while True:
                if any(cid in self._exits for cid in wanted):
                    return True
                left = end - time.monotonic()
                if left <= 0 or self._stream is None or self._stopped:
                    return False
                self._cond.wait(left)
