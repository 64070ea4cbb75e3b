"""Kill containers at their deadline while this process lives, even if nobody polls.

``poll`` enforces deadlines from the containers' labels (so a fresh process does too); the
watchdog adds enforcement between polls. It is best effort: a failed kill is left to the next
poll, which classifies the task from its finish time either way.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable

__all__ = ["Watchdog"]


class Watchdog:
    """One daemon thread that calls ``kill(container_id)`` when a deadline (our clock) passes."""

    def __init__(self, kill: Callable[[str], None]) -> None:
        self._kill = kill
        self._heap: list[tuple[float, str]] = []
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def watch(self, container_id: str, deadline: float) -> None:
        with self._wake:
            heapq.heappush(self._heap, (deadline, container_id))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="altar-local-watchdog", daemon=True
                )
                self._thread.start()
            self._wake.notify()

    def pending(self) -> int:
        with self._wake:
            return len(self._heap)

    def stop(self) -> None:
        with self._wake:
            self._stopped = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._stopped and (not self._heap or self._heap[0][0] > time.time()):
                    wait = self._heap[0][0] - time.time() if self._heap else None
                    self._wake.wait(wait)
                if self._stopped:
                    return
                _, container_id = heapq.heappop(self._heap)
            try:
                self._kill(container_id)
            except Exception:  # noqa: S112 - best effort; poll enforces the deadline too
                continue
