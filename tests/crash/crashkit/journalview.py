"""Following a run's journal from outside, as it is written: what changed, task by task.

The journal is a snapshot (``journal.json``) plus a log of changes (``journal.log``, one JSON
line per changed task, fsync-ed before the run goes on); the runner folds the log into a new
snapshot now and then. :class:`JournalView` reads both incrementally and reports every task
whose record changed since the last look, so the harness can act on the moment a submit's
intent, a state or a collection became durable. A log line of journal version 3 holds only
what changed: the view applies it with altar's own reader (:mod:`altar.execution.state.changes`)
and reports the whole record, as the runner would read it back.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from altar.execution.state.changes import apply_changes
from altar.execution.state.journal import Journal
from altar.execution.state.records import Context, TaskRecord

__all__ = ["Change", "JournalView"]


@dataclass(frozen=True)
class Change:
    """One task's record before (None if unseen) and after a change."""

    task: str
    before: dict[str, Any] | None
    after: dict[str, Any]
    #: the moments any line between ``before`` and ``after`` made durable (``submitting``,
    #: ``running``, ``awaiting_collection``): a tick may write several of one task's lines
    #: between two looks, and the last alone would hide them
    passed: frozenset[str] = field(default=frozenset())

    @property
    def state(self) -> str:
        return str(self.after.get("state"))

    def became(self, state: str) -> bool:
        return self.state == state and (self.before is None or self.before.get("state") != state)

    @property
    def submitting(self) -> bool:
        """The intent of a submit was journaled: the runner is about to call (or is in) submit."""
        attempts = self.after.get("attempts") or []
        if self.state != "submitting" or not attempts or attempts[-1].get("handle") is not None:
            return False
        old = (self.before or {}).get("attempts") or []
        was = (self.before or {}).get("state")
        return was != "submitting" or len(old) != len(attempts)

    @property
    def awaiting_collection(self) -> bool:
        return self.state == "succeeded" and not self.after.get("outputs_collected")


class JournalView:
    """The journal of ``run_dir`` as last read, and what changed since."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.records: dict[str, dict[str, Any]] = {}
        self.snapshot: dict[str, Any] = {}
        self._snapshot_key: tuple[int, int] | None = None
        self._offset = 0
        self._line_seq: int | None = None  # the seq of the log's last line read
        self._seq = 0  # the last change applied (the snapshot's seq covers the log below it)
        self._task_seq: dict[str, int] = {}  # the seq of each task's record as applied
        self._read: dict[str, TaskRecord] = {}  # the records as altar reads them back

    @property
    def _context(self) -> Context:
        backend = (self.snapshot.get("backend") or {}).get("type", "")
        derived = int(self.snapshot.get("version") or 0) >= 4  # keys the run derives left out
        return Context(str(self.snapshot.get("run_id") or ""), str(backend), derived)

    def _record(self, task: str, entry: dict[str, Any]) -> dict[str, Any]:
        """The whole record after a snapshot's record or a log line (version 3: what changed)."""
        earlier = self._read.get(task)
        if "record" in entry:
            try:  # read as altar does, for the changes to come; the record is shown as written
                self._read[task] = TaskRecord.from_dict(
                    task, entry["record"], earlier, self._context
                )
            except (KeyError, TypeError, ValueError):
                self._read.pop(task, None)  # a partial record (the harness's own tests)
            return dict(entry["record"])
        try:
            if earlier is None:
                raise ValueError(f"a change to {task} before its whole record")
            record = apply_changes(earlier, entry, self._context)
        except (KeyError, TypeError, ValueError):
            # the snapshot this view read was replaced between its reads (a fold of the log):
            # read the task as altar does, from the whole journal as it now is
            record = Journal.load(self.run_dir).tasks[task]
        self._read[task] = record
        return record.to_dict(self._context)

    @property
    def snapshot_path(self) -> Path:
        return self.run_dir / "journal.json"

    @property
    def log_path(self) -> Path:
        return self.run_dir / "journal.log"

    def _read_snapshot(self, changes: dict[str, Change]) -> bool:
        try:
            st = os.stat(self.snapshot_path)
        except FileNotFoundError:
            return False
        key = (st.st_ino, st.st_mtime_ns)
        if key == self._snapshot_key:
            return False
        try:
            data = json.loads(self.snapshot_path.read_bytes())
        except (OSError, ValueError):
            return False  # replaced under us: read it next time
        self._snapshot_key = key
        self.snapshot = data
        seq = int(data.get("seq", 0))
        self._seq = max(self._seq, seq)
        for task, record in (data.get("tasks") or {}).items():
            if self._task_seq.get(task, -1) <= seq:  # not newer from a log line read earlier
                self._task_seq[task] = seq
                self._apply(task, self._record(task, {"record": record}), changes)
        return True

    def _apply(self, task: str, record: dict[str, Any], changes: dict[str, Change]) -> None:
        before = self.records.get(task)
        if before == record:
            return
        step = Change(task, before, record)
        moments = {
            name
            for name, happened in (
                ("submitting", step.submitting),
                ("running", step.became("running")),
                ("awaiting_collection", step.became("succeeded") and step.awaiting_collection),
            )
            if happened
        }
        earlier = changes.get(task)
        first = earlier.before if earlier is not None else before
        passed = (earlier.passed if earlier is not None else frozenset()) | moments
        changes[task] = Change(task, first, record, frozenset(passed))
        self.records[task] = record

    def poll(self) -> list[Change]:
        """Read what was written since the last call; the tasks that changed, in order."""
        changes: dict[str, Change] = {}
        if self._read_snapshot(changes):
            self._offset = 0  # a new snapshot empties the log; seq numbers skip what it holds
        try:
            st = os.stat(self.log_path)
        except FileNotFoundError:
            return list(changes.values())
        if st.st_size < self._offset:
            self._offset = 0  # emptied: the runner folded the log into a new snapshot
            self._line_seq = None
        if st.st_size > self._offset:
            with open(self.log_path, "rb") as log:
                log.seek(self._offset)
                data = log.read(st.st_size - self._offset)
            complete = data[: data.rfind(b"\n") + 1]
            self._offset += len(complete)
            for line in complete.splitlines():
                try:
                    entry = json.loads(line)
                    # version 4: a line after the first of an append follows its previous one
                    seq = int(entry["seq"]) if "seq" in entry else (self._line_seq or 0) + 1
                except (ValueError, KeyError, TypeError):
                    continue  # a torn line (the writer was killed): the runner ignores it too
                self._line_seq = seq
                if seq <= self._seq:
                    continue  # already in the snapshot
                self._seq = seq
                self._task_seq[entry["task"]] = seq
                self._apply(entry["task"], self._record(entry["task"], entry), changes)
        return list(changes.values())

    def pids(self) -> list[int]:
        self.poll()
        return [int(pid) for pid in self.snapshot.get("pids", [])]

    @property
    def run_id(self) -> str | None:
        value = self.snapshot.get("run_id")
        return str(value) if value else None

    def all_settled(self) -> bool:
        """Every task final, and every success collected (what remains is clean-up)."""
        if not self.records:
            return False
        final = {"succeeded", "failed", "skipped", "cancelled"}
        return all(
            r.get("state") in final
            and (r.get("state") != "succeeded" or r.get("outputs_collected"))
            for r in self.records.values()
        )
