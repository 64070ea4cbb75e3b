"""What the run report shows, computed from the journal and the event log (pure functions).

Per task, every attempt as phases on one time axis:

- ``queued``: waiting for a slot or its dependencies (from the run's start to the submit);
- ``retry-wait``: from a failed attempt's end to its retry's submit (a backoff, or a stop and
  resume);
- ``pending``: submitted, not started (the provider queues it, pulls its image);
- ``running``: from the start to the end the provider reported (or the runner observed);
- ``collecting``: a success's outputs being copied back (until the ``succeeded`` event).

The run's input staging is one band of its own, with its throughput; the slot usage is the
number of attempts submitted and not finished at each moment.

Interruptions are the times no altar process drove the run: from the last sign of life of a
process (the last event it logged, or a later submit it journaled) to the next process's
``process`` line (or, in a log from before those lines, its
``resumed`` event). An attempt that was in flight then, or whose submit the stop cut short
(found again by its key, or submitted again), says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from altar.execution.labels import RESERVED_LABEL_PREFIX
from altar.execution.report.events import PROCESS, LoggedEvent
from altar.execution.run.routed import LABEL_ROUTE
from altar.execution.state.journal import IN_DOUBT, Attempt, Journal, TaskRecord
from altar.execution.state.views import user_labels
from altar.execution.types import TaskFailure

if TYPE_CHECKING:
    from altar.execution.report.lanes import Lane

__all__ = [
    "AttemptBar",
    "Interruption",
    "Phase",
    "Report",
    "Staging",
    "TaskRow",
    "build_report",
    "last_line",
    "log_tail",
    "slot_usage",
    "thin_steps",
]

#: Lines of a failure's log kept in the report, and characters per line.
TAIL_LINES = 20
TAIL_LINE_CHARS = 240


@dataclass(frozen=True)
class Phase:
    kind: str  # queued, retry-wait, pending, running, collecting
    start: float
    end: float


@dataclass(frozen=True)
class AttemptBar:
    number: int
    outcome: str  # succeeded, failed, cancelled, open
    phases: tuple[Phase, ...]
    reason: str | None = None
    retried: bool = False  # a later attempt followed this failed one
    detail: str | None = None  # the last line of its failure's detail
    interrupted: str | None = None  # how a stop of the runner touched it, if one did
    backend: str | None = None  # the named backend it went to, in a routed run


@dataclass(frozen=True)
class Interruption:
    """A time no altar process drove the run."""

    start: float  # the last sign of life of the stopped process (an event, a submit)
    end: float  # the next process's first
    finished: bool  # the stopped process had ended the run: a rerun (--retry-failed), no crash
    in_flight: tuple[str, ...] = ()  # tasks with an attempt submitted and not finished then


@dataclass(frozen=True)
class TaskRow:
    id: str
    kind: str
    status: str
    attempts: tuple[AttemptBar, ...]
    duration_s: float | None
    reason: str | None
    log_tail: str
    in_doubt: int = 0
    detail: str | None = None  # the last line of the last failure's detail
    exit_code: int | None = None
    #: the plan's labels, as its last submitted attempt carried them (what groups it)
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Staging:
    start: float
    end: float | None
    bytes_total: int | None
    samples: tuple[tuple[float, int], ...]  # (time, bytes in place)

    @property
    def measured(self) -> bool:
        """Whether the backend reported staged bytes (Slurm's stager, for one, does not)."""
        return self.bytes_total is not None or len(self.samples) > 1

    @property
    def throughput_bps(self) -> float | None:
        """Bytes per second over the whole staging (None without a size or an end)."""
        if not self.samples or self.end is None:
            return None
        moved = self.samples[-1][1]
        seconds = self.end - self.start
        return moved / seconds if seconds > 0 and moved > 0 else None


@dataclass(frozen=True)
class Report:
    run_dir: str
    plan: str
    backend: str
    start: float
    end: float
    tasks: tuple[TaskRow, ...]
    staging: Staging | None
    slots: tuple[tuple[float, int], ...]
    counts: Mapping[str, int] = field(default_factory=dict)
    finished: bool = False
    interruptions: tuple[Interruption, ...] = ()
    staging_error: str | None = None
    lanes: tuple[Lane, ...] = ()  # one per backend of a routed run (report/lanes.py)


def log_tail(text: str | None) -> str:
    """The last :data:`TAIL_LINES` lines of ``text``, each cut to :data:`TAIL_LINE_CHARS`."""
    if not text:
        return ""
    lines = text.rstrip().splitlines()[-TAIL_LINES:]
    return "\n".join(
        line if len(line) <= TAIL_LINE_CHARS else line[: TAIL_LINE_CHARS - 3] + "..."
        for line in lines
    )


def _attempt_end(attempt: Attempt, now: float) -> float:
    return attempt.finished_at if attempt.finished_at is not None else now


def last_line(text: str | None) -> str | None:
    """The last non-blank line of ``text`` (a log tail ends with the error, a traceback with its
    exception), cut to :data:`TAIL_LINE_CHARS`; None if there is none."""
    for line in reversed((text or "").splitlines()):
        if line.strip():
            line = line.strip()
            return line if len(line) <= TAIL_LINE_CHARS else line[: TAIL_LINE_CHARS - 3] + "..."
    return None


def _in_flight(attempt: Attempt, at: float) -> bool:
    submitted = attempt.submitted_at
    return (
        submitted is not None
        and submitted <= at
        and (attempt.finished_at is None or attempt.finished_at > at)
    )


def _interruptions(
    events: Sequence[LoggedEvent], records: Sequence[TaskRecord]
) -> tuple[Interruption, ...]:
    starts = [i for i, e in enumerate(events) if e.kind == PROCESS]
    if not starts:  # a log from before the process lines: a resume with open tasks says so
        starts = [i for i, e in enumerate(events) if e.kind == "resumed"]
    found = []
    for index in starts:
        if index == 0:
            continue
        last, restart = events[index - 1], events[index].at
        # the stopped process was alive at its last event, and at each submit it journaled
        # after it (a submit's time is the runner's clock, never the provider's)
        stop = max(
            [last.at]
            + [
                a.submitted_at
                for r in records
                for a in r.attempts
                if a.submitted_at is not None and last.at < a.submitted_at < restart
            ]
        )
        flying = tuple(r.id for r in records if any(_in_flight(a, stop) for a in r.attempts))
        found.append(Interruption(stop, restart, last.kind == "done", flying))
    return tuple(found)


def _interrupted(attempt: Attempt, gaps: Sequence[Interruption]) -> str | None:
    """How a stop of the runner touched ``attempt``, in words (None if none did)."""
    if attempt.reexecuted:
        return (
            f"its submit was cut short by a stop of the runner and it was submitted again "
            f"({attempt.reexecuted} time(s)): it may have run twice"
        )
    if attempt.adopted:
        return "its submit was cut short by a stop of the runner; the resumed run found it"
    if attempt.state == IN_DOUBT:
        return "its submit was cut short by a stop of the runner"
    for gap in gaps:
        if not gap.finished and _in_flight(attempt, gap.start):
            return f"in flight while the runner was down ({gap.end - gap.start:.1f}s)"
    return None


def _bars(
    record: TaskRecord,
    run_start: float,
    collected: Mapping[str, float],
    now: float,
    gaps: Sequence[Interruption] = (),
) -> tuple[AttemptBar, ...]:
    bars = []
    queued_from = run_start
    for index, attempt in enumerate(record.attempts):
        phases = []
        submitted = attempt.submitted_at
        end = _attempt_end(attempt, now)
        if submitted is not None:
            if submitted > queued_from:
                # after a failed attempt the wait is the retry's (its backoff, or the run
                # stopped and resumed), not a queue for a slot
                wait = "retry-wait" if index > 0 else "queued"
                phases.append(Phase(wait, queued_from, submitted))
            started = attempt.started_at
            if started is not None and started >= submitted:
                phases.append(Phase("pending", submitted, min(started, end)))
                phases.append(Phase("running", min(started, end), end))
            elif started is not None:  # a provider clock a little behind ours
                phases.append(Phase("running", submitted, end))
            else:
                phases.append(Phase("pending", submitted, end))
        last = index == len(record.attempts) - 1
        failure = attempt.failure
        if attempt.finished_at is None:
            outcome = "open"
        elif failure is None:
            outcome = "succeeded"
            done = collected.get(record.id)
            if last and done is not None and done > end:
                phases.append(Phase("collecting", end, done))
        elif failure.reason == "cancelled":
            outcome = "cancelled"
        else:
            outcome = "failed"
        bars.append(
            AttemptBar(
                number=attempt.number,
                outcome=outcome,
                phases=tuple(phases),
                reason=_why(failure) if failure else None,
                retried=outcome == "failed" and not last,
                detail=last_line(failure.detail) if failure else None,
                interrupted=_interrupted(attempt, gaps),
                backend=(
                    attempt.handle.labels.get(LABEL_ROUTE) if attempt.handle is not None else None
                ),
            )
        )
        queued_from = end
    return tuple(bars)


def _why(failure: TaskFailure) -> str:
    """A failure's reason, led by the provider's ending when the provider ended it."""
    ending = failure.provider_ending
    return f"{ending.replace('_', ' ')} ({failure.reason})" if ending else failure.reason


def _row(
    record: TaskRecord,
    run_start: float,
    collected: Mapping[str, float],
    now: float,
    gaps: Sequence[Interruption] = (),
) -> TaskRow:
    last = record.last
    failure = last.failure if last else None
    status = record.state
    if status == "succeeded" and not record.outputs_collected:
        status = "collecting"
    reason = None
    if status == "succeeded" and record.cached:
        status = "cached"
        origin = record.cached
        reason = f"from {origin.get('task_id', '?')} of run {origin.get('run_id', '?')}"
    elif status in ("skipped", "cancelled"):
        reason = record.detail
    elif failure is not None and status in ("failed", "queued"):
        reason = _why(failure)
    else:  # a success after retries: what the earlier attempts failed of is not hidden
        earlier = [f"attempt {a.number}: {_why(a.failure)}" for a in record.attempts if a.failure]
        reason = "; ".join(earlier) + " (retried)" if earlier else None
    tail = ""
    if status not in ("succeeded", "collecting", "cached"):
        tail = log_tail(record.detail or (failure.detail if failure else None))
    return TaskRow(
        id=record.id,
        kind=record.kind,
        status=status,
        attempts=_bars(record, run_start, collected, now, gaps),
        duration_s=last.duration_s if last else None,
        reason=reason,
        log_tail=tail,
        in_doubt=record.in_doubt,
        detail=last_line(failure.detail) if failure and status in ("failed", "queued") else None,
        exit_code=failure.exit_code if failure and status in ("failed", "queued") else None,
        labels={
            k: v for k, v in user_labels(record).items() if not k.startswith(RESERVED_LABEL_PREFIX)
        },
    )


def _staging(events: Sequence[LoggedEvent]) -> Staging | None:
    start = end = None
    total: int | None = None
    samples: list[tuple[float, int]] = []
    for event in events:
        if event.kind == "staging" and start is None:
            start = event.at
            samples.append((event.at, 0))
        elif (
            event.kind == "staging_progress" and start is not None and event.bytes_done is not None
        ):
            samples.append((event.at, event.bytes_done))
            total = event.bytes_total if event.bytes_total is not None else total
        elif event.kind == "staged" and start is not None and end is None:
            end = event.at
    if start is None:
        return None
    if end is not None and total is not None:
        samples.append((end, total))
    return Staging(start, end, total, tuple(samples))


def slot_usage(intervals: Iterable[tuple[float, float]]) -> tuple[tuple[float, int], ...]:
    """The number of intervals open at each change, as (time, count) steps in time order."""
    changes: list[tuple[float, int]] = []
    for start, end in intervals:
        changes.append((start, 1))
        changes.append((max(start, end), -1))
    changes.sort(key=lambda change: (change[0], change[1]))  # an end before a start at a tie
    steps: list[tuple[float, int]] = []
    count = 0
    for at, delta in changes:
        count += delta
        if steps and steps[-1][0] == at:
            steps[-1] = (at, count)
        else:
            steps.append((at, count))
    return tuple(steps)


def thin_steps(
    steps: Sequence[tuple[float, int]], at_most: int = 2000
) -> tuple[tuple[float, int], ...]:
    """At most about ``at_most`` of ``steps``: in each of as many equal spans of time, the
    highest count (so the peak survives), then the last step. A plot is ~1,000 px wide."""
    if len(steps) <= at_most:
        return tuple(steps)
    start, end = steps[0][0], steps[-1][0]
    width = (end - start) / at_most or 1.0
    thinned: list[tuple[float, int]] = []
    bucket = -1
    for at, count in steps:
        index = int((at - start) / width)
        if index != bucket:
            thinned.append((at, count))
            bucket = index
        elif count > thinned[-1][1]:
            thinned[-1] = (thinned[-1][0], count)
    if thinned[-1] != steps[-1]:
        thinned.append(steps[-1])
    return tuple(thinned)


def build_report(
    journal: Journal, events: Sequence[LoggedEvent] = (), *, now: float | None = None
) -> Report:
    """The report of ``journal`` (and its event log); ``now`` ends the attempts still open."""
    from altar.execution.report.lanes import build_lanes  # it builds on this module

    records = list(journal.tasks.values())
    times = [journal.created_at] if journal.created_at else []
    times += [e.at for e in events]
    for record in records:
        for attempt in record.attempts:
            times += [
                t for t in (attempt.submitted_at, attempt.started_at, attempt.finished_at) if t
            ]
    start = min(times) if times else 0.0
    end = max(times) if times else start
    now = max(end, now if now is not None else end)
    collected = {e.task_id: e.at for e in events if e.kind == "succeeded" and e.task_id}
    gaps = _interruptions(events, records)
    rows = tuple(_row(record, start, collected, now, gaps) for record in records)
    intervals = [
        (attempt.submitted_at, _attempt_end(attempt, now))
        for record in records
        for attempt in record.attempts
        if attempt.submitted_at is not None
    ]
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.status] = counts.get(row.status, 0) + 1
    return Report(
        run_dir=str(journal.run_dir),
        plan=journal.plan_source,
        backend=journal.backend_type,
        start=start,
        end=now,
        tasks=rows,
        staging=_staging(events),
        slots=slot_usage(intervals),
        counts=counts,
        finished=journal.finished,
        interruptions=gaps,
        staging_error=journal.staging_error,
        lanes=build_lanes(records, rows, now),
    )
