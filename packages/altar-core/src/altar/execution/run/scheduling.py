"""Which tasks a run starts next: pure functions over the journal's records, no event loop.

- :func:`ready`: queued tasks whose dependencies all succeeded and had their outputs collected;
- :func:`blocked`: queued tasks with a dependency that failed, was skipped or cancelled (the
  runner skips them);
- :func:`choose`: of the ready tasks, those that ``max_parallel`` and the backend's capacity
  report leave room for.

The runner keeps ``ready`` and ``blocked`` as the run changes (:mod:`.frontier`: a tick looks
at what changed, not at every task); these are the same rules over all tasks at once, the
reference the frontier is tested against.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping

from altar.execution.state.journal import (
    CANCELLED,
    FAILED,
    PENDING,
    QUEUED,
    RUNNING,
    SKIPPED,
    SUBMITTING,
    SUCCEEDED,
    TaskRecord,
)

__all__ = ["blocked", "choose", "in_flight", "ready", "room_for"]

Dependencies = Mapping[str, Iterable[str]]


def in_flight(records: Iterable[TaskRecord]) -> list[TaskRecord]:
    """Tasks submitted (or being submitted) and not yet finished."""
    return [r for r in records if r.state in (SUBMITTING, PENDING, RUNNING)]


def ready(records: Mapping[str, TaskRecord], dependencies: Dependencies) -> list[TaskRecord]:
    """Queued tasks whose dependencies all succeeded with their outputs collected, in order."""
    return [
        record
        for record in records.values()
        if record.state == QUEUED
        and all(
            records[d].state == SUCCEEDED and records[d].outputs_collected
            for d in dependencies.get(record.id, ())
        )
    ]


def blocked(
    records: Mapping[str, TaskRecord], dependencies: Dependencies
) -> list[tuple[TaskRecord, str]]:
    """Queued tasks that can never run, each with why (``dependency <id> <state>``)."""
    found = []
    for record in records.values():
        if record.state != QUEUED:
            continue
        for dep in dependencies.get(record.id, ()):
            state = records[dep].state
            if state in (FAILED, SKIPPED, CANCELLED):
                found.append((record, f"dependency {dep} {state}"))
                break
    return found


def choose(
    ready: list[TaskRecord],
    *,
    records: Iterable[TaskRecord],
    max_parallel: int | None,
    free: Mapping[str, int] | None,
    pool: Callable[[TaskRecord], str],
    waiting: Collection[TaskRecord] = (),
) -> list[TaskRecord]:
    """The ready tasks to submit now, in order.

    ``max_parallel`` bounds the tasks in flight among ``records``. ``free`` is the capacity
    report (free slots per pool; None or empty: no report, submit all that ``max_parallel``
    allows). A submit still in flight may not show in the report yet, so it counts as taken;
    a pool the report does not name is left for the backend to decide at submit. ``waiting``:
    tasks chosen earlier whose submits wait for room in the submit window (still ``queued``
    in the journal); they count as in flight.
    """
    records = list(records)
    if max_parallel is not None:
        taken = len(in_flight(records)) + len(waiting)
        ready = ready[: max(0, max_parallel - taken)]
    if not ready or not free:
        return ready
    slots = dict(free)
    for record in records:
        if record.state == SUBMITTING and pool(record) in slots:
            slots[pool(record)] -= 1
    for record in waiting:
        if pool(record) in slots:
            slots[pool(record)] -= 1
    chosen = []
    for record in ready:
        name = pool(record)
        if name not in slots:
            chosen.append(record)
        elif slots[name] > 0:
            slots[name] -= 1
            chosen.append(record)
    return chosen


def room_for(ready_count: int, *, in_flight_count: int, max_parallel: int | None) -> bool:
    """A task is ready and ``max_parallel`` leaves a slot for it (capacity is asked later)."""
    if max_parallel is not None and in_flight_count >= max_parallel:
        return False
    return ready_count > 0
