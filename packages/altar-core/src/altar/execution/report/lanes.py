"""A lane per backend in the report of a routed run (pure functions).

A routed run's handles carry ``altar.route``, the named backend each attempt went to. A lane
gathers what ran on one backend: the tasks whose last attempt went there, their outcomes, the
attempts it ran (a fallback moves a task's later attempts to another lane) and its own slot
usage. A run on one backend has no lanes: its report stays as it was.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from altar.execution.report.model import TaskRow, slot_usage
from altar.execution.run.routed import LABEL_ROUTE
from altar.execution.state.journal import Attempt, TaskRecord

__all__ = ["Lane", "attempt_route", "build_lanes", "lane_order"]


@dataclass(frozen=True)
class Lane:
    name: str
    counts: Mapping[str, int]  # status of the tasks whose last attempt ran here
    attempts: int  # every attempt submitted here, whichever task's last it was
    provider_endings: int  # attempts here the provider ended (preempted, evicted, ...)
    slots: tuple[tuple[float, int], ...]

    @property
    def tasks(self) -> int:
        return sum(self.counts.values())

    @property
    def peak(self) -> int:
        return max((count for _, count in self.slots), default=0)


def attempt_route(attempt: Attempt) -> str | None:
    """The named backend ``attempt`` was submitted to, if its handle says (a routed run)."""
    handle = attempt.handle
    return handle.labels.get(LABEL_ROUTE) if handle is not None else None


def _task_route(record: TaskRecord) -> str | None:
    for attempt in reversed(record.attempts):
        route = attempt_route(attempt)
        if route is not None:
            return route
    return None


def build_lanes(
    records: Sequence[TaskRecord], rows: Sequence[TaskRow], now: float
) -> tuple[Lane, ...]:
    """One lane per backend the run's attempts went to, in name order; none for one backend."""
    counts: dict[str, dict[str, int]] = {}
    attempts: dict[str, int] = {}
    endings: dict[str, int] = {}
    intervals: dict[str, list[tuple[float, float]]] = {}
    for record, row in zip(records, rows, strict=True):
        for attempt in record.attempts:
            route = attempt_route(attempt)
            if route is None or attempt.submitted_at is None:
                continue
            attempts[route] = attempts.get(route, 0) + 1
            failure = attempt.failure
            if failure is not None and failure.provider_ending:
                endings[route] = endings.get(route, 0) + 1
            end = attempt.finished_at if attempt.finished_at is not None else now
            intervals.setdefault(route, []).append((attempt.submitted_at, end))
        route = _task_route(record)
        if route is not None:
            lane = counts.setdefault(route, {})
            lane[row.status] = lane.get(row.status, 0) + 1
    return tuple(
        Lane(
            name=name,
            counts=counts.get(name, {}),
            attempts=attempts.get(name, 0),
            provider_endings=endings.get(name, 0),
            slots=slot_usage(intervals.get(name, ())),
        )
        for name in sorted(set(attempts) | set(counts))
    )


def lane_order(rows: Sequence[TaskRow]) -> list[tuple[str | None, list[TaskRow]]]:
    """``rows`` split by the backend of each one's last routed attempt, in first-seen order
    (rows keep their order within a lane; a task never submitted leads, under None)."""
    lanes: dict[str | None, list[TaskRow]] = {}
    for row in rows:
        route = next((bar.backend for bar in reversed(row.attempts) if bar.backend), None)
        lanes.setdefault(route, []).append(row)
    return list(lanes.items())
