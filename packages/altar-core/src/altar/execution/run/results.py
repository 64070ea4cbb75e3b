"""What a run reports: its events as they happen, and each task's outcome at the end."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from altar.execution.state.journal import (
    CANCELLED,
    FAILED,
    PENDING,
    QUEUED,
    RUNNING,
    SKIPPED,
    SUBMITTING,
    SUCCEEDED,
    Attempt,
    Journal,
    TaskRecord,
)

__all__ = [
    "CACHED",
    "TASK_STATES",
    "RunEvent",
    "RunResult",
    "TaskResult",
    "one_line",
    "results_of",
]

#: A task's outcome when the task cache served it (its journal state is ``succeeded``).
CACHED = "cached"
TASK_STATES = (
    QUEUED,
    SUBMITTING,
    PENDING,
    RUNNING,
    SUCCEEDED,
    CACHED,
    FAILED,
    SKIPPED,
    CANCELLED,
)


def one_line(error: BaseException) -> str:
    """``Type: message`` on one line (how run events and journal details name an error)."""
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


@dataclass(frozen=True)
class RunEvent:
    """Something that happened during a run, for progress displays.

    ``kind`` is one of ``staging``, ``staging_progress`` (bytes of the inputs in place so far,
    in ``bytes_done`` and ``bytes_total``; see :mod:`altar.execution.run.staging_progress`),
    ``staged``, ``edited`` (tasks changed in the plan before they were submitted run as it now
    says), ``resumed``, ``submitted``, ``in_doubt``, ``adopted`` (the provider held the
    task of an in-doubt submit: the run follows it), ``removed`` (a provider object of this run
    the journal does not own was cancelled and cleaned up), ``litter_removed`` (temporary files
    that killed processes of this run left), ``state`` (a task changed state), ``retry``,
    ``succeeded``, ``cached`` (served from the task cache), ``cache_miss`` (a stored entry
    was dropped, or could not be served), ``cache_wait`` (another run computes the task),
    ``cache_store_failed``, ``failed``, ``skipped``, ``cancelled``, ``cancel_failed``,
    ``backend_unavailable``, ``held`` (a provider limit holds submits back), ``paused`` (the
    provider ended many attempts at once: submits wait for it), ``hold_lifted``,
    ``cleanup_failed``, ``stopping`` (the run is ending early and waits
    for its submits in flight), ``done``.
    """

    kind: str
    message: str
    task_id: str | None = None
    attempt: int | None = None
    state: str | None = None
    counts: Mapping[str, int] = field(default_factory=dict)
    elapsed_s: float = 0.0
    bytes_done: int | None = None  # staging_progress only
    bytes_total: int | None = None  # staging_progress only; None while a size is unknown


@dataclass(frozen=True, slots=True)
class TaskResult:
    """The outcome of one task (or its current state, from ``run_status``).

    ``attempts`` counts executions: every attempt, plus each time an attempt was submitted
    again after an in-doubt submit without any way to know the first had not started
    (``reexecuted``, marked in the results table). ``in_doubt`` counts the submits whose answer
    never arrived, whether or not they were then adopted.
    """

    id: str
    kind: str
    status: str
    attempts: int
    reason: str | None = None
    detail: str | None = None
    exit_code: int | None = None
    duration_s: float | None = None
    external_id: str | None = None
    in_doubt: int = 0  # submits interrupted before their handle was recorded
    reexecuted: int = 0  # executions started again after an in-doubt submit (maybe twice)
    #: attempts the provider ended (preempted, node lost, ...), by ending; they use no retry
    provider_endings: Mapping[str, int] = field(default_factory=dict)

    @property
    def attempts_text(self) -> str:
        """ATTEMPTS as tables show it: ``3``, ``2*`` (re-executed), ``3 (2 preempted)``."""
        text = f"{self.attempts}*" if self.reexecuted else str(self.attempts)
        if self.provider_endings:
            ended = ", ".join(
                f"{n} {code.replace('_', ' ')}" for code, n in sorted(self.provider_endings.items())
            )
            text += f" ({ended})"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "status": self.status,
            "attempts": self.attempts,
            "reason": self.reason,
            "detail": self.detail,
            "exit_code": self.exit_code,
            "duration_s": self.duration_s,
            "external_id": self.external_id,
            "in_doubt": self.in_doubt,
            "reexecuted": self.reexecuted,
            "provider_endings": dict(self.provider_endings),
        }


@dataclass(frozen=True)
class RunResult:
    """Per-task outcomes of a run."""

    run_dir: Path
    backend: str
    tasks: list[TaskResult]
    elapsed_s: float = 0.0
    run_id: str = ""

    @property
    def ok(self) -> bool:
        return all(task.status in (SUCCEEDED, CACHED) for task in self.tasks)

    def counts(self) -> dict[str, int]:
        counts = {state: 0 for state in TASK_STATES}
        for task in self.tasks:
            counts[task.status] = counts.get(task.status, 0) + 1
        return {state: n for state, n in counts.items() if n}

    def to_dict(self) -> dict[str, Any]:
        return {**self.head_dict(), "tasks": [task.to_dict() for task in self.tasks]}

    def head_dict(self) -> dict[str, Any]:
        """:meth:`to_dict` without its tasks."""
        return {
            "run_dir": str(self.run_dir),
            "backend": self.backend,
            "run_id": self.run_id,
            "ok": self.ok,
            "elapsed_s": self.elapsed_s,
            "counts": self.counts(),
        }


def task_result(record: TaskRecord) -> TaskResult:
    """One task's outcome, as the journal has it."""
    last = record.last
    failure = last.failure if last else None
    if record.cached and record.state == SUCCEEDED:
        return cached_result(record)
    if record.state in (SKIPPED, CANCELLED):
        # a cancelled task's last failure may be an earlier attempt's, awaiting its retry
        reason, detail, exit_code = record.state, record.detail, None
    elif failure is not None:
        reason, detail, exit_code = (
            failure.reason,
            record.detail or failure.detail,
            failure.exit_code,
        )
    else:
        reason, detail, exit_code = None, None, None
    return TaskResult(
        id=record.id,
        kind=record.kind,
        status=record.state,
        attempts=sum(attempt.executions for attempt in record.attempts),
        reason=reason,
        detail=detail,
        exit_code=exit_code,
        duration_s=last.duration_s if last else None,
        external_id=last.external_id if last else None,
        in_doubt=record.in_doubt,
        reexecuted=sum(attempt.reexecuted for attempt in record.attempts),
        provider_endings=ended_counts(record.attempts) or _NO_ENDINGS,
    )


#: The endings of a task none of whose attempts the provider ended: one mapping shared by every
#: such result (a ``Mapping``, read-only by contract: 64 B of each of 100,000 results).
_NO_ENDINGS: Mapping[str, int] = {}


def cached_result(record: TaskRecord) -> TaskResult:
    """A task the cache served: 0 executions, the entry's origin as its detail."""
    origin = record.cached or {}
    where = f"{origin.get('task_id', '?')} of run {origin.get('run_id', '?')}"
    return TaskResult(
        id=record.id,
        kind=record.kind,
        status=CACHED,
        attempts=sum(attempt.executions for attempt in record.attempts),
        detail=f"cached: from {where}",
    )


def ended_counts(attempts: Sequence[Attempt]) -> dict[str, int]:
    """How many of ``attempts`` the provider ended, by ending (what ``provider_endings`` holds)."""
    counts: dict[str, int] = {}
    for attempt in attempts:
        ending = attempt.failure.provider_ending if attempt.failure is not None else None
        if ending is not None:
            counts[ending] = counts.get(ending, 0) + 1
    return counts


def results_of(journal: Journal, elapsed_s: float = 0.0) -> RunResult:
    """Every task's outcome, in plan order."""
    tasks = [task_result(record) for record in journal.tasks.values()]
    return RunResult(journal.run_dir, journal.backend_type, tasks, elapsed_s, journal.run_id)
