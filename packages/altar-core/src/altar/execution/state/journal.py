"""The run journal: what a run submitted, durably, so a restarted run resumes instead of re-running.

The journal holds, per task, the hash of its spec, every attempt with its durable handle
(backend, external_id, labels), the last observed state and failure. It is two files:

- ``journal.json``, a snapshot with a ``format`` and ``version``, replaced whole through a
  temporary file, ``fsync`` and ``rename`` (written in chunks, never whole in memory);
- ``journal.log`` (:mod:`.log`), the changes since that snapshot, one JSON line per changed
  task with a sequence number, holding only the fields that changed (:mod:`.changes`),
  appended and ``fsync``-ed before the runner goes on. The runner folds the log into a new
  snapshot once it outgrew it (:meth:`Journal.compact_due`).

Appending one line per change keeps the cost of a change independent of the plan's size (a
snapshot per change would make a run of n tasks cost O(n^2)).

Submitting is journaled in two steps: the attempt is written as ``submitting`` (no handle) with
its submission key (:mod:`altar.execution.labels`) before ``submit`` is called, and the handle is
appended and fsync-ed as soon as ``submit`` returns (submits that return in the same event-loop
turn share one fsync; a run that is cancelled meanwhile lets its submits in flight return first,
within a grace period, and writes their handles on its way out). A run that finds an attempt
still ``submitting`` cannot know whether the provider accepted it (the process died inside
``submit``): the attempt becomes ``in_doubt``. If the backend can list the run's objects, the
runner adopts the one carrying that key, or learns that there is none; otherwise it submits the
attempt again with the same key, which a backend with ``adopts_submissions`` answers with the
task it already holds. Only a backend that can do neither may then run the task twice; the
attempt counts that possible execution (``reexecuted``) and the results table marks it.

The snapshot also keeps the run id (``altar.run`` on every provider object), the pids of the
processes that drove the run (so a resume removes only their leftover temporary files), and the
provider objects removed because no journal entry owned them.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

from altar.execution.atomic import atomic_write
from altar.execution.errors import JournalError
from altar.execution.state.bulk import collector_paused
from altar.execution.state.changes import Print, changes_since, print_of
from altar.execution.state.lock import LOCK_NAME, lock_is_held, run_lock
from altar.execution.state.log import append_durably, replay
from altar.execution.state.records import (
    CANCELLED,
    FAILED,
    FINAL_STATES,
    IN_DOUBT,
    JOURNAL_JSON,
    PENDING,
    QUEUED,
    RUNNING,
    SKIPPED,
    SUBMITTING,
    SUCCEEDED,
    Attempt,
    Context,
    TaskRecord,
    spec_digest,
)
from altar.execution.state.summary import write_summary

if TYPE_CHECKING:
    from altar.execution.plans.plan import Plan

__all__ = [
    "CANCELLED",
    "FAILED",
    "FINAL_STATES",
    "IN_DOUBT",
    "JOURNAL_FORMAT",
    "JOURNAL_NAME",
    "JOURNAL_VERSION",
    "LOCK_NAME",
    "PENDING",
    "QUEUED",
    "RUNNING",
    "SKIPPED",
    "SUBMITTING",
    "SUCCEEDED",
    "Attempt",
    "Journal",
    "TaskRecord",
    "accept_unsubmitted_edits",
    "append_durably",
    "atomic_write",
    "lock_is_held",
    "open_journal",
    "run_lock",
    "spec_digest",
]

JOURNAL_FORMAT = "altar-run-journal"
#: 2 (issue 24): compact records, log lines without what a run never changes; 3: log lines
#: of only what changed (:mod:`.changes`), handles without the labels the run implies; 4:
#: without the submission keys the run derives (:class:`.records.Context`). Older versions
#: read too; an altar that reads only 1 to 3 refuses a version 4 journal with its reason.
JOURNAL_VERSION = 4
READ_VERSIONS = (1, 2, 3, 4)
#: The log is folded into a snapshot once it holds this many times the snapshot's bytes.
COMPACT_RATIO = 4
#: ... and holds this many bytes per task: a run's own lines (about 0.5 KB per task) are then
#: folded once, by its last snapshot, instead of by one more snapshot of every task midway.
COMPACT_FLOOR = 256
JOURNAL_NAME = "journal.json"
LOG_NAME = "journal.log"
#: Tasks encoded at a time by a snapshot, so a snapshot is never whole in memory.
SNAPSHOT_CHUNK = 2000


@dataclass
class Journal:
    """The journal of one run directory."""

    run_dir: Path
    backend_type: str
    backend_options: dict[str, Any]
    plan_source: str
    tasks: dict[str, TaskRecord]
    #: Set once a start staged everything it needed; kept for older altar, which skips staging
    #: when it is set. This altar decides from :attr:`inputs`.
    staged: bool = False
    finished: bool = False
    #: What staging put in place, per logical path: the uri, digest and source file facts it
    #: staged (:mod:`altar.execution.run.staging`); a resume stages again what no longer matches.
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Why the last staging failed, with the fix (None once staging succeeds).
    staging_error: str | None = None
    #: The run's ``--max-parallel`` / ``--max-retries`` as given (by name), so the resume
    #: command repeats them; a journal before altar-core 0.6 has none.
    flags: dict[str, int] = field(default_factory=dict)
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    seq: int = 0
    log_lines: int = 0
    #: bytes of the log and of the last snapshot, for when to fold the log (``compact_due``)
    log_bytes: int = field(default=0, repr=False)
    snapshot_bytes: int = field(default=0, repr=False)
    #: The run id (``altar.run``): 32 hex characters, fixed when the run directory is made.
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    #: The processes that drove this run, so a resume can tell their leftover temporary files.
    pids: list[int] = field(default_factory=list)
    #: Provider objects of this run the journal did not own, cancelled and cleaned up.
    removed: list[dict[str, Any]] = field(default_factory=list)
    #: Keys the run derives are left out (version 4); False for a journal of an older
    #: version until its next snapshot, so lines appended to its log read back as written.
    derived_keys: bool = True
    #: Tasks that changed in the plan before they were ever submitted (not saved: the run's
    #: start announces them, and their new spec digest is saved with the journal).
    edited: list[str] = field(default_factory=list, repr=False)
    _changed: dict[str, None] = field(default_factory=dict, repr=False)
    #: what the journal on disk holds of each task still changing (see :mod:`.changes`)
    _prints: dict[str, Print] = field(default_factory=dict, repr=False)
    # (length to cut the log back to, newline needed) when replay found a torn last line
    _log_repair: tuple[int, bool] | None = field(default=None, repr=False)

    @property
    def path(self) -> Path:
        return self.run_dir / JOURNAL_NAME

    @property
    def log_path(self) -> Path:
        return self.run_dir / LOG_NAME

    @property
    def context(self) -> Context:
        return Context(self.run_id, self.backend_type, self.derived_keys)

    def _track(self) -> None:
        """Print every task that may still change (a settled one is written whole if it does)."""
        self._prints = {
            task_id: print_of(record)
            for task_id, record in self.tasks.items()
            if not _settled(record)
        }

    def mark(self, record: TaskRecord) -> None:
        """Note that ``record`` changed; :meth:`flush` makes the change durable."""
        self._changed[record.id] = None

    def flush(self) -> None:
        """Append every marked task to the log and fsync it (JournalError if that fails)."""
        if not self._changed:
            return
        lines: list[str] = []
        seq = self.seq
        context = self.context
        for task_id in self._changed:
            record = self.tasks[task_id]
            old = self._prints.get(task_id)
            body = (
                {"record": record.to_dict(context, log=True)}
                if old is None
                else changes_since(record, old, context)
            )
            if body is None:
                continue  # marked, but nothing changed since its last line
            seq += 1
            # version 4: a line after the first of an append has the seq after its previous
            # line's, and says none (about 12 bytes of each of a task's four lines)
            entry = {"task": task_id, **body} if lines else {"seq": seq, "task": task_id, **body}
            lines.append(JOURNAL_JSON.encode(entry))
        if not lines:
            self._changed.clear()
            return
        data = ("\n".join(lines) + "\n").encode()
        try:
            if self._log_repair is not None:
                # cut off the torn line a crash left, so ours do not get glued onto it
                length, newline = self._log_repair
                os.truncate(self.log_path, length)
                data = b"\n" + data if newline else data
            append_durably(self.log_path, data)
        except OSError as error:
            raise self._write_error(error) from error
        self._log_repair = None
        self.seq = seq
        self.log_lines += len(lines)
        self.log_bytes += len(data)
        for task_id in self._changed:
            record = self.tasks[task_id]
            if _settled(record):
                self._prints.pop(task_id, None)
            else:
                self._prints[task_id] = print_of(record)
        self._changed.clear()

    def compact_due(self) -> bool:
        """The log outgrew the snapshot ``COMPACT_RATIO`` times (by bytes: a snapshot rewrites
        every task, so snapshots write under ``1 / COMPACT_RATIO`` of what the log writes)."""
        least = max(self.snapshot_bytes, COMPACT_FLOOR * len(self.tasks))
        return self.log_lines > 256 and self.log_bytes > COMPACT_RATIO * least

    def to_dict(self) -> dict[str, Any]:
        return {
            **self._head(),
            "tasks": {task_id: r.to_dict(self.context) for task_id, r in self.tasks.items()},
        }

    def _head(self) -> dict[str, Any]:
        return {
            "format": JOURNAL_FORMAT,
            "version": JOURNAL_VERSION,
            "seq": self.seq,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "plan": self.plan_source,
            "backend": {"type": self.backend_type, "options": self.backend_options},
            "staged": self.staged,
            "inputs": self.inputs,
            "staging_error": self.staging_error,
            "flags": dict(self.flags),
            "finished": self.finished,
            "run_id": self.run_id,
            "pids": list(self.pids),
            "removed": list(self.removed),
        }

    def _snapshot_chunks(self) -> Iterator[bytes]:
        """:meth:`to_dict` as JSON, ``SNAPSHOT_CHUNK`` tasks at a time (same bytes as whole)."""
        head = JOURNAL_JSON.encode(self._head())
        yield head[:-1].encode() + b',"tasks":{'
        records = iter(self.tasks.items())
        comma = b""
        context = self.context
        while part := {k: r.to_dict(context) for k, r in islice(records, SNAPSHOT_CHUNK)}:
            yield comma + JOURNAL_JSON.encode(part)[1:-1].encode()
            comma = b","
        yield b"}}"

    def _write_error(self, error: OSError) -> JournalError:
        reason = error.strerror or str(error)
        return JournalError(
            f"cannot write the run journal in {self.run_dir}: {reason}; "
            "the previous journal is intact, free space and resume the run"
        )

    def save(self) -> None:
        """Write a snapshot of everything and empty the log (JournalError if that fails)."""
        self.updated_at = time.time()
        # the snapshot is of this version, and so is the log after it; a snapshot that was
        # not written leaves the older one, whose log must go on as it was written
        older, self.derived_keys = self.derived_keys, True
        try:
            # the log is made before the snapshot, so the directory fsync that makes the
            # snapshot's name durable makes the log's durable too: a fsync'd append to a log
            # whose directory entry a power cut then loses would lose the handles in it
            os.close(os.open(self.log_path, os.O_WRONLY | os.O_CREAT, 0o600))
            with collector_paused():  # the chunks' dicts are no garbage to hunt for
                size = atomic_write(self.path, self._snapshot_chunks())
        except OSError as error:
            self.derived_keys = older
            raise self._write_error(error) from error
        with contextlib.suppress(OSError):
            write_summary(self)  # before the log is emptied: a kill between leaves it inexact
        # the log's lines are all in the snapshot now (their seq is not above its seq)
        with contextlib.suppress(OSError):
            os.truncate(self.log_path, 0)
            self._log_repair = None
        self.log_lines = 0
        self.log_bytes, self.snapshot_bytes = 0, size
        self._track()
        self._changed.clear()

    @classmethod
    def exists(cls, run_dir: Path) -> bool:
        return (Path(run_dir) / JOURNAL_NAME).is_file()

    @classmethod
    def load(cls, run_dir: Path) -> Journal:
        """Read ``run_dir``'s journal; JournalError if missing, corrupt or of another version."""
        with collector_paused():
            return cls._load(run_dir)

    @classmethod
    def _load(cls, run_dir: Path) -> Journal:
        path = Path(run_dir) / JOURNAL_NAME
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raise JournalError(f"{run_dir} has no run journal ({JOURNAL_NAME})") from None
        except OSError as error:
            raise JournalError(f"cannot read {path}: {error.strerror or error}") from error
        try:
            data = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise JournalError(
                f"{path} is not valid JSON ({error}); it was not written by altar"
            ) from None
        if not isinstance(data, dict) or data.get("format") != JOURNAL_FORMAT:
            raise JournalError(f"{path} is not an altar run journal (no format {JOURNAL_FORMAT!r})")
        version = data.get("version")
        if version not in READ_VERSIONS:
            raise JournalError(
                f"{path} is journal version {version!r}, but this altar reads versions "
                f"{', '.join(map(str, READ_VERSIONS[:-1]))} and {READ_VERSIONS[-1]}; "
                "finish that run with the altar "
                "that started it, or use a new run directory"
            )
        try:
            backend = data["backend"]
            # a journal of altar-core 0.4 has none: it gets one now, kept from its next save
            run_id = str(data.get("run_id") or uuid.uuid4().hex)
            derived = version >= 4
            context = Context(run_id, backend["type"], derived)
            tasks = data["tasks"]
            journal = cls(
                run_dir=Path(run_dir),
                backend_type=backend["type"],
                backend_options=dict(backend.get("options") or {}),
                plan_source=data.get("plan", ""),
                tasks={k: TaskRecord.from_dict(k, v, None, context) for k, v in tasks.items()},
                staged=bool(data.get("staged")),
                # journals before altar-core 0.6 have none: every input is staged again
                inputs={str(k): dict(v) for k, v in (data.get("inputs") or {}).items()},
                staging_error=data.get("staging_error"),
                flags={str(k): int(v) for k, v in (data.get("flags") or {}).items()},
                finished=bool(data.get("finished")),
                created_at=data.get("created_at", 0.0),
                updated_at=data.get("updated_at", 0.0),
                seq=int(data.get("seq", 0)),
                run_id=run_id,
                pids=[int(pid) for pid in data.get("pids") or []],
                removed=list(data.get("removed") or []),
                derived_keys=derived,
            )
            journal.snapshot_bytes = len(raw)
            journal._replay()
            journal._track()
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise JournalError(f"{path} is damaged: {type(error).__name__}: {error}") from None
        return journal

    def _replay(self) -> None:
        replayed = replay(self.log_path, self.tasks, self.seq, self.context)
        if replayed is not None:
            self.seq, self.log_bytes, self._log_repair, lines = replayed
            self.log_lines += lines


def _as_stored(options: Mapping[str, Any]) -> Any:
    """Options as the journal keeps them (JSON), so a tuple equals the list it was saved as."""
    return json.loads(json.dumps(dict(options), sort_keys=True, default=str))


def _options_text(options: Mapping[str, Any]) -> str:
    if not options:
        return "(none)"
    return ", ".join(
        f"{key}={json.dumps(value, default=str)}" for key, value in sorted(options.items())
    )


def _settled(record: TaskRecord) -> bool:
    """Whether ``record`` is done changing in this run: its print is let go (about 200 B a
    task, 20 MB of a 100,000-task run), and a change after all is written whole.

    Final and cleaned up, or succeeded with its outputs collected (cleanup then only sets
    ``cleaned``, which the run's closing snapshot saves: no log line).
    """
    if not record.final:
        return False
    return record.cleaned or (record.state == SUCCEEDED and record.outputs_collected)


def accept_unsubmitted_edits(journal: Journal, plan: Plan, digests: Mapping[str, str]) -> None:
    """Take the plan's new version of tasks not submitted since they were (re)opened.

    Nothing ran under a task's old spec until it was submitted, so an edit (a corrected digest
    after a staging failure, say) is safe to take; a submitted task's spec is what ran.
    """
    kinds = {task.id: task.spec.kind for task in plan.tasks}
    for task_id, digest in digests.items():
        record = journal.tasks[task_id]
        if record.spec_sha256 == digest:
            continue
        if not record.editable:
            raise JournalError(
                f"{journal.run_dir}: task {task_id!r} changed since this run started, and it "
                "was submitted; use a new run directory for the changed plan (or, if it "
                "failed, altar run --retry-failed)"
            )
        record.spec_sha256 = digest
        record.kind = kinds[task_id]
        journal.edited.append(task_id)


def open_journal(
    plan: Plan,
    backend_name: str,
    run_dir: Path,
    options: dict[str, Any],
    flags: Mapping[str, int] | None = None,
    *,
    save: bool = True,
) -> Journal:
    """The journal of ``plan`` on ``backend_name`` in ``run_dir``: resumed if there, else new.

    ``flags`` (the run's ``max_parallel``/``max_retries`` as given) replace those recorded,
    by name; the others stay, so a resume that repeats none keeps the run's.

    A journal of another backend, other tasks, a changed task or other backend options is
    refused with a JournalError saying to use a new run directory (or the same options).
    ``save=False`` leaves a new journal's first snapshot to the caller (the runner's, which
    adds its pid at once: one snapshot of every task fewer).
    """
    digests = {task.id: spec_digest(task.spec) for task in plan.tasks}
    if Journal.exists(run_dir):
        journal = Journal.load(run_dir)
        if journal.backend_type != backend_name:
            raise JournalError(
                f"{run_dir} is a run on backend {journal.backend_type!r}, not {backend_name!r}; "
                "use a new run directory"
            )
        if list(journal.tasks) != list(digests):
            raise JournalError(
                f"{run_dir} holds a run of other tasks ({', '.join(journal.tasks)}); "
                "use a new run directory for this plan"
            )
        accept_unsubmitted_edits(journal, plan, digests)
        if _as_stored(options) != _as_stored(journal.backend_options):
            # Another engine, namespace or data root would not find the tasks already
            # submitted (they would be reported missing and run again).
            started = _options_text(journal.backend_options)
            raise JournalError(
                f"{run_dir} was started with backend options {started}, not "
                f"{_options_text(options)}; resume it with the same options (altar run "
                "--option KEY=VALUE) or use a new run directory"
            )
        if flags and {**journal.flags, **flags} != journal.flags:
            journal.flags.update(flags)
            journal.save()
        return journal
    journal = Journal(
        run_dir=run_dir,
        backend_type=backend_name,
        backend_options=options,
        flags=dict(flags or {}),
        plan_source=plan.source,
        tasks={
            task.id: TaskRecord(task.id, task.spec.kind, digests[task.id]) for task in plan.tasks
        },
    )
    if save:
        journal.save()
    return journal
