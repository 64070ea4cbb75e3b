"""What ``altar status`` and ``altar runs`` show: a run's tasks as the next resume will see them.

The journal records what the run that owns it saw. ``altar status`` adds one poll of the open
tasks, and must then say what that means for the run rather than echo the provider:

- an attempt that failed in a way the runner retries (``timeout``, ``oom_killed``, ...) and has
  retries left is ``queued``: resuming the run submits it again (after Ctrl-C such a task is
  not ``failed``);
- a task that succeeded but whose outputs are not collected yet (its run stopped on a full
  disk, or no run has seen it finish) is ``collecting``, not ``succeeded``: the outputs are not
  where the plan says until a resume collects them.

Everything here is a pure function of the journal and the poll results, so it is tested without
a provider.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from altar.execution.backend import ExecutionBackend
from altar.execution.errors import AltarError, JournalError
from altar.execution.plans.plan_cache import cached_plan
from altar.execution.run.budget import DEFAULT_MAX_RETRIES, RetryBudget, plan_budget
from altar.execution.run.results import (
    CACHED,
    RunResult,
    TaskResult,
    cached_result,
    ended_counts,
    results_of,
)
from altar.execution.state.journal import (
    CANCELLED,
    FAILED,
    JOURNAL_NAME,
    LOG_NAME,
    PENDING,
    QUEUED,
    RUNNING,
    SKIPPED,
    SUBMITTING,
    SUCCEEDED,
    Attempt,
    Journal,
    TaskRecord,
    lock_is_held,
)
from altar.execution.state.summary import read_summary
from altar.execution.types import TaskState, TaskStatus

__all__ = [
    "COLLECTING",
    "STATUS_ORDER",
    "RunSummary",
    "list_runs",
    "needs_plan",
    "open_handles",
    "ordered_counts",
    "plan_facts",
    "plan_max_retries",
    "row_state",
    "status_result",
    "summarize_run",
    "task_row",
    "task_row_dict",
]

#: Succeeded on the provider; its outputs are not collected yet (a resume collects them).
COLLECTING = "collecting"
#: The order states are counted in: the way a task moves through them.
STATUS_ORDER = (
    QUEUED,
    SUBMITTING,
    PENDING,
    RUNNING,
    COLLECTING,
    SUCCEEDED,
    FAILED,
    SKIPPED,
    CANCELLED,
)


def plan_max_retries(journal: Journal) -> int:
    """The retries a resume of this run allows: its plan's, else altar's default."""
    return plan_facts(journal)[0].max_retries


def plan_facts(journal: Journal) -> tuple[RetryBudget, frozenset[str] | None]:
    """From the run's plan file, if it can still be read: (its budget, ids of tasks with outputs).

    The second is None when the plan cannot be read (every success then awaits collection).
    """
    with contextlib.suppress(AltarError, OSError, ValueError):
        plan = cached_plan(journal.plan_source)
        return plan_budget(plan), frozenset(task.id for task in plan.tasks if task.spec.outputs)
    return RetryBudget(), None


def needs_plan(journal: Journal, polled: Mapping[str, TaskStatus]) -> bool:
    """Whether :func:`status_result` of these rows reads what :func:`plan_facts` gives.

    The budget decides only a polled failure's row, the tasks with outputs only a success whose
    outputs are not collected; a finished run has neither, so ``altar status`` of it need not
    parse a plan of 100,000 tasks (issue 24).
    """
    if any(status.state is TaskState.FAILED for status in polled.values()):
        return True
    for record in journal.tasks.values():
        if record.outputs_collected or (record.cached and record.state == SUCCEEDED):
            continue
        status = polled.get(record.id)
        if record.state == SUCCEEDED or (
            status is not None and status.state is TaskState.SUCCEEDED
        ):
            return True
    return False


def open_handles(journal: Journal) -> list[TaskRecord]:
    """The records whose last attempt a poll can ask about (submitted, not final)."""
    return [
        record
        for record in journal.tasks.values()
        if record.state in (PENDING, RUNNING)
        and record.last is not None
        and record.last.handle is not None
    ]


def _duration(attempt: Attempt | None, status: TaskStatus | None) -> float | None:
    """Provider times when the backend reports them, else the journal's."""
    if status is not None and status.started_at is not None and status.finished_at is not None:
        return max(0.0, status.finished_at - status.started_at)
    return attempt.duration_s if attempt is not None else None


def row_state(
    record: TaskRecord,
    status: TaskStatus | None,
    budget: RetryBudget,
    with_outputs: frozenset[str] | None = None,
) -> str:
    """The STATUS of ``record``'s row, without building the row (what grouped views count)."""
    if record.cached and record.state == SUCCEEDED:
        return CACHED
    state = record.state
    if status is not None:
        state = status.state.value
        failure = status.failure
        if state == FAILED and failure is not None and budget.allows(record, failure):
            return QUEUED  # the runner retries it: resuming the run submits it again
    collects = with_outputs is None or record.id in with_outputs
    return COLLECTING if state == SUCCEEDED and not record.outputs_collected and collects else state


def task_row(
    record: TaskRecord,
    status: TaskStatus | None,
    budget: RetryBudget,
    with_outputs: frozenset[str] | None = None,
) -> TaskResult:
    """One row of ``altar status``: ``record`` as a resume will find it, ``status`` polled."""
    if record.cached and record.state == SUCCEEDED:
        return cached_result(record)
    last = record.last
    state = row_state(record, status, budget, with_outputs)
    if state == SUCCEEDED and status is None and len(record.attempts) == 1 and last is not None:
        # most rows of a large run: the general path below costs twice as much
        return TaskResult(
            id=record.id,
            kind=record.kind,
            status=state,
            attempts=last.executions,
            duration_s=last.duration_s,
            external_id=last.external_id,
            in_doubt=record.in_doubt,
            reexecuted=last.reexecuted,
            provider_endings=ended_counts(record.attempts),
        )
    failure = last.failure if last is not None else None
    detail = record.detail
    if status is not None:
        failure = status.failure
        if status.state is TaskState.FAILED:
            detail = failure.detail if failure is not None else None
    exit_code = failure.exit_code if failure is not None else None
    reason = failure.reason if failure is not None else None
    if state == QUEUED and status is not None and status.state is TaskState.FAILED:
        detail = f"attempt {len(record.attempts)} failed ({reason}); resuming the run retries it"
    if state == COLLECTING:
        reason, exit_code = None, None
        detail = "succeeded; its outputs are not collected yet: resume the run to collect them"
    elif state == SUCCEEDED:
        reason, detail, exit_code = None, None, None
    elif state in (SKIPPED, CANCELLED):
        reason, detail, exit_code = state, record.detail, None
    elif state in (PENDING, RUNNING, SUBMITTING):
        reason, detail, exit_code = None, None, None
    if last is None:
        endings: dict[str, int] = {}
    elif last.failure is failure:  # nothing polled changed it (replace() is costly at 100k)
        endings = ended_counts(record.attempts)
    else:
        endings = ended_counts([*record.attempts[:-1], replace(last, failure=failure)])
    return TaskResult(
        id=record.id,
        kind=record.kind,
        status=state,
        attempts=sum(attempt.executions for attempt in record.attempts),
        reason=reason,
        detail=detail,
        exit_code=exit_code,
        duration_s=_duration(last, status),
        external_id=last.external_id if last else None,
        in_doubt=record.in_doubt,
        reexecuted=sum(attempt.reexecuted for attempt in record.attempts),
        provider_endings=endings,
    )


def task_row_dict(
    record: TaskRecord,
    status: TaskStatus | None,
    budget: RetryBudget,
    with_outputs: frozenset[str] | None = None,
) -> dict[str, Any]:
    """``task_row(...).to_dict()``; a first-attempt success without building the row (most of
    ``altar status --json`` at 100,000 tasks)."""
    attempts = record.attempts
    if status is None and len(attempts) == 1 and not record.cached:
        last = attempts[0]
        if row_state(record, None, budget, with_outputs) == SUCCEEDED and last.failure is None:
            return {
                "id": record.id,
                "kind": record.kind,
                "status": SUCCEEDED,
                "attempts": last.executions,
                "reason": None,
                "detail": None,
                "exit_code": None,
                "duration_s": last.duration_s,
                "external_id": last.external_id,
                "in_doubt": record.in_doubt,
                "reexecuted": last.reexecuted,
                "provider_endings": {},
            }
    return task_row(record, status, budget, with_outputs).to_dict()


_row = task_row  # the name before issue 24


def status_result(
    journal: Journal,
    polled: Mapping[str, TaskStatus] | None = None,
    *,
    max_retries: int = DEFAULT_MAX_RETRIES,
    with_outputs: frozenset[str] | None = None,
    budget: RetryBudget | None = None,
) -> RunResult:
    """The run's tasks as a resume will find them: the journal plus ``polled`` (by task id).

    ``with_outputs`` names the tasks that declare outputs (None: unknown, assume all do); a
    success of another task has nothing to collect and shows ``succeeded`` at once.
    """
    polled = polled or {}
    budget = budget if budget is not None else RetryBudget(max_retries)
    rows = [task_row(r, polled.get(r.id), budget, with_outputs) for r in journal.tasks.values()]
    return RunResult(journal.run_dir, journal.backend_type, rows, run_id=journal.run_id)


def counts(tasks: Sequence[TaskResult]) -> dict[str, int]:
    return ordered_counts(task.status for task in tasks)


def ordered_counts(states: Iterable[str]) -> dict[str, int]:
    """How many of ``states`` are each state, in :data:`STATUS_ORDER`."""
    found: dict[str, int] = {}
    for state in states:
        found[state] = found.get(state, 0) + 1
    ordered = {state: found[state] for state in STATUS_ORDER if state in found}
    ordered.update({state: n for state, n in found.items() if state not in ordered})
    return ordered


@dataclass(frozen=True)
class RunSummary:
    """One line of ``altar runs``."""

    run_dir: Path
    plan: str
    backend: str
    state: str  # running (a process drives it), finished, stopped, unreadable
    counts: dict[str, int]
    started_at: float | None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_dir": str(self.run_dir),
            "plan": self.plan,
            "backend": self.backend,
            "state": self.state,
            "counts": self.counts,
            "started_at": self.started_at,
            "error": self.error,
        }


def summarize_run(run_dir: Path) -> RunSummary:
    """The journal's view of one run directory (no backend is asked).

    Read from the run's summary where that is exact (:mod:`altar.execution.state.summary`), so a
    run of any size costs a small read; else from the journal.
    """
    summary = read_summary(run_dir, journal_name=JOURNAL_NAME, log_name=LOG_NAME)
    if summary is not None:
        driven = lock_is_held(run_dir)
        finished = bool(summary.get("finished"))
        return RunSummary(
            run_dir,
            str(summary.get("plan") or ""),
            str(summary.get("backend") or ""),
            "running" if driven else "finished" if finished else "stopped",
            {str(k): int(v) for k, v in summary["counts"].items()},
            float(summary.get("created_at") or 0) or None,
        )
    try:
        journal = Journal.load(run_dir)
        driven = lock_is_held(run_dir)
    except JournalError as error:
        return RunSummary(run_dir, "", "", "unreadable", {}, None, str(error))
    tasks = status_result(journal).tasks
    if driven:
        state = "running"
    elif journal.finished:
        state = "finished"
    else:
        state = "stopped"
    return RunSummary(
        run_dir,
        journal.plan_source,
        journal.backend_type,
        state,
        counts(tasks),
        journal.created_at or None,
    )


def list_runs(root: Path) -> list[RunSummary]:
    """Every run directory under ``root`` (those holding a journal), newest first."""
    if not root.is_dir():
        return []
    found = [path for path in root.iterdir() if Journal.exists(path)]
    summaries = [summarize_run(path) for path in found]
    return sorted(summaries, key=lambda s: (s.started_at or 0.0, str(s.run_dir)), reverse=True)


def format_started(started_at: float | None) -> str:
    if not started_at:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started_at))


async def run_status(run_dir: str | Path, backend: ExecutionBackend | None = None) -> RunResult:
    """The journal's view of a run, with open tasks polled once on ``backend`` if given.

    Read-only: the journal is not changed (the run that owns it records what it sees).
    """
    journal = Journal.load(Path(run_dir))
    if backend is not None:
        open_records = [
            r
            for r in journal.tasks.values()
            if r.state in (PENDING, RUNNING) and r.last is not None and r.last.handle is not None
        ]
        if open_records:
            handles = [r.attempts[-1].handle for r in open_records]
            statuses = await backend.poll(handles)  # type: ignore[arg-type]
            for record, status in zip(open_records, statuses, strict=True):
                record.state = status.state.value
                record.last.state = status.state.value  # type: ignore[union-attr]
                record.last.failure = status.failure  # type: ignore[union-attr]
    return results_of(journal)
