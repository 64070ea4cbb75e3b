"""The run's event log, ``events.jsonl``: what the journal does not keep, for the report.

The journal records each attempt's submit, start and finish; it does not record when inputs
were staged (nor how fast), when a success's outputs were collected or when a retry was
decided. ``altar run`` appends those events here, one JSON line each, as they happen, after
a ``process`` line marking each process that drives the run (a resume, a ``--retry-failed``):
the report tells from them when the runner was down.

The log is for display only: it is appended without fsync, a line torn by a crash is skipped,
and a missing log just leaves those parts of the report empty. Nothing resumes from it.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from altar.execution.run.results import RunEvent

__all__ = ["EVENTS_NAME", "PROCESS", "EventRecorder", "LoggedEvent", "read_events"]

EVENTS_NAME = "events.jsonl"
#: The first line each process driving the run writes.
PROCESS = "process"
#: Kinds worth keeping (``state`` changes and each attempt's ``submitted`` time are in the
#: journal: a line each was 70 bytes a task of a 100,000-task run; the final counts are not news).
KEPT = frozenset(
    {
        "staging",
        "staging_progress",
        "staged",
        "resumed",
        "in_doubt",
        "retry",
        "succeeded",
        "failed",
        "skipped",
        "cancelled",
        "backend_unavailable",
        "stopping",
        "done",
    }
)
#: At most one ``staging_progress`` line per this many seconds (a terminal redraws more often).
PROGRESS_EVERY_S = 0.5


@dataclass(frozen=True)
class LoggedEvent:
    """One line of the log: a wall-clock time and what happened."""

    at: float
    kind: str
    task_id: str | None = None
    attempt: int | None = None
    bytes_done: int | None = None
    bytes_total: int | None = None
    message: str = ""


class EventRecorder:
    """Appends run events to ``run_dir/events.jsonl``; wraps another event callback."""

    def __init__(
        self,
        run_dir: Path,
        forward: Callable[[RunEvent], None] | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(run_dir) / EVENTS_NAME
        self.forward = forward
        self.clock = clock
        self._last_progress = -float("inf")
        self._broken = False  # a full disk must not stop the run: the log is for display
        self._marked = False  # the ``process`` line, written with the first event once the
        # run directory exists

    def __call__(self, event: RunEvent) -> None:
        if self.forward is not None:
            self.forward(event)
        if not self._marked and not self._broken and self.path.parent.is_dir():
            self._marked = True
            self._append({"at": round(self.clock(), 3), "kind": PROCESS, "pid": os.getpid()})
        if event.kind not in KEPT or self._broken:
            return
        now = self.clock()
        if event.kind == "staging_progress":
            if now - self._last_progress < PROGRESS_EVERY_S:
                return
            self._last_progress = now
        entry: dict[str, Any] = {"at": round(now, 3), "kind": event.kind}
        if event.task_id is not None:
            entry["task"] = event.task_id
        if event.attempt is not None:
            entry["attempt"] = event.attempt
        if event.bytes_done is not None:
            entry["bytes_done"] = event.bytes_done
            entry["bytes_total"] = event.bytes_total
        if event.kind in ("retry", "failed", "in_doubt", "backend_unavailable", "skipped"):
            entry["message"] = event.message[:500]
        self._append(entry)

    def _append(self, entry: dict[str, Any]) -> None:
        line = json.dumps(entry, separators=(",", ":")) + "\n"
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)
        except OSError:
            self._broken = True


def read_events(run_dir: Path) -> list[LoggedEvent]:
    """The events of ``run_dir`` in the order written (empty if there is no log)."""
    try:
        raw = (Path(run_dir) / EVENTS_NAME).read_text(errors="replace")
    except OSError:
        return []
    events = []
    for line in raw.splitlines():
        with contextlib.suppress(ValueError, TypeError, KeyError, AttributeError):
            data = json.loads(line)
            events.append(
                LoggedEvent(
                    at=float(data["at"]),
                    kind=str(data["kind"]),
                    task_id=data.get("task"),
                    attempt=data.get("attempt"),
                    bytes_done=data.get("bytes_done"),
                    bytes_total=data.get("bytes_total"),
                    message=str(data.get("message", "")),
                )
            )
    return events
