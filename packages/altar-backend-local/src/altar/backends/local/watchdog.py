"""Kill containers at their deadline while this process lives, even if nobody polls.

``poll`` enforces deadlines from the containers' labels (so a fresh process does too); the
watchdog adds enforcement between polls. It is best effort: a failed kill is left to the next
poll, which classifies the task from its finish time either way.

Outside the common anatomy: only a local engine has no server-side deadline (Kubernetes has
``activeDeadlineSeconds``, Modal a sandbox timeout), so this process enforces one itself.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable, Iterable

__all__ = ["Watchdog"]


class Watchdog:
    """A daemon thread that calls ``kill(container_id)`` when a deadline (our clock) passes.

    The thread runs only while something is watched: it ends once every deadline has passed or
    been forgotten (a task that finished or was cancelled), and :meth:`watch` starts a new one.
    Nothing has to call :meth:`stop` for the thread, and the engine client it holds, to go.
    """

    def __init__(self, kill: Callable[[str], None]) -> None:
        self._kill = kill
        self._deadlines: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []  # may hold forgotten entries; _deadlines rules
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def watch(self, container_id: str, deadline: float) -> None:
        with self._wake:
            if self._stopped:
                return
            self._deadlines[container_id] = deadline
            heapq.heappush(self._heap, (deadline, container_id))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="altar-local-watchdog", daemon=True
                )
                self._thread.start()
            self._wake.notify()

    def forget(self, container_ids: Iterable[str]) -> None:
        """Stop watching these containers (they ended, or were cancelled)."""
        with self._wake:
            for container_id in container_ids:
                self._deadlines.pop(container_id, None)
            if not self._deadlines:
                self._heap.clear()
            self._wake.notify()

    def pending(self) -> int:
        with self._wake:
            return len(self._deadlines)

    def stop(self) -> None:
        with self._wake:
            self._stopped = True
            self._deadlines.clear()
            self._heap.clear()
            thread = self._thread
            self._wake.notify()
        if thread is not None:
            thread.join(timeout=5)

    def _next_due(self) -> str | None:
        """Under the lock: wait for the next deadline; None once there is nothing to watch."""
        while True:
            while self._heap and self._deadlines.get(self._heap[0][1]) != self._heap[0][0]:
                heapq.heappop(self._heap)  # forgotten, or watched again with a new deadline
            if self._stopped or not self._heap:
                return None
            deadline, container_id = self._heap[0]
            wait = deadline - time.time()
            if wait <= 0:
                heapq.heappop(self._heap)
                del self._deadlines[container_id]
                return container_id
            self._wake.wait(wait)

    def _run(self) -> None:
        while True:
            with self._wake:
                container_id = self._next_due()
                if container_id is None:
                    self._thread = None
                    return
            try:
                self._kill(container_id)
            except Exception:  # noqa: S112 - best effort; poll enforces the deadline too
                continue
