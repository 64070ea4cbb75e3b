"""The run's frontier: which queued tasks are ready or blocked, kept as the run changes.

:mod:`~altar.execution.run.scheduling` says it of all tasks at once; a run of 100,000 tasks
cannot ask that every tick. The frontier learns which tasks were touched (their state or
outputs changed: :attr:`Ledger.touched <altar.execution.run.ledger.Ledger.touched>`) and looks
again at those and at their dependants only, so a tick costs what changed, not the plan.

Ready tasks come out in plan order (a sorted list of plan positions, its stale entries dropped
as they are passed); a task handed to the submits is taken out, and comes back when touched
again (withdrawn, or queued for a retry).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping

from altar.execution.state.journal import CANCELLED, FAILED, QUEUED, SKIPPED, SUCCEEDED, TaskRecord

__all__ = ["Frontier"]

_ENDED = frozenset({FAILED, SKIPPED, CANCELLED})


def _satisfied(record: TaskRecord) -> bool:
    return record.state == SUCCEEDED and record.outputs_collected


class Frontier:
    """Ready and blocked tasks of one run, updated from the tasks touched since the last tick."""

    def __init__(
        self, records: Mapping[str, TaskRecord], dependencies: Mapping[str, Iterable[str]]
    ) -> None:
        self.records = records
        self.dependencies = {task: tuple(deps) for task, deps in dependencies.items() if deps}
        self.dependants: dict[str, list[str]] = {}
        for task, deps in self.dependencies.items():
            for dep in deps:
                self.dependants.setdefault(dep, []).append(task)
        self.position = {task_id: i for i, task_id in enumerate(records)}
        self._ready: set[str] = set()
        self._order: list[int] = []  # plan positions, sorted; an entry not in _ready is stale
        self._ids = list(records)
        self._blocked: list[tuple[TaskRecord, str]] = []
        #: tasks looked at since the frontier was made (what tests count)
        self.looked = 0
        self.update(self._ids)

    def __len__(self) -> int:
        return len(self._ready)

    def update(self, touched: Iterable[str]) -> None:
        """Look again at the ``touched`` tasks, and at the dependants of those that ended."""
        again: dict[str, None] = {}
        for task_id in touched:
            again[task_id] = None
            record = self.records[task_id]
            if record.state in _ENDED or _satisfied(record):
                again.update(dict.fromkeys(self.dependants.get(task_id, ())))
        for task_id in again:
            self._look(self.records[task_id])

    def _look(self, record: TaskRecord) -> None:
        self.looked += 1
        if record.state != QUEUED:
            self._ready.discard(record.id)
            return
        deps = self.dependencies.get(record.id, ())
        for dep in deps:
            state = self.records[dep].state
            if state in _ENDED:
                self._ready.discard(record.id)
                self._blocked.append((record, f"dependency {dep} {state}"))
                return
        if record.id not in self._ready and all(_satisfied(self.records[d]) for d in deps):
            self._ready.add(record.id)
            order, position = self._order, self.position[record.id]
            at = bisect.bisect_left(order, position)
            if at == len(order) or order[at] != position:  # else a stale entry comes back
                order.insert(at, position)

    def blocked(self) -> list[tuple[TaskRecord, str]]:
        """Queued tasks found blocked since the last call, each with why (and forget them)."""
        found, self._blocked = self._blocked, []
        return [(record, why) for record, why in found if record.state == QUEUED]

    def ready(self, limit: int | None = None) -> list[TaskRecord]:
        """The first ``limit`` ready tasks (all if None), in plan order; they stay ready."""
        order, ready, ids = self._order, self._ready, self._ids
        found: list[TaskRecord] = []
        stale_prefix = 0
        for position in order:
            if limit is not None and len(found) >= limit:
                break
            if ids[position] in ready:
                found.append(self.records[ids[position]])
            elif not found:
                stale_prefix += 1
        del order[:stale_prefix]  # taken tasks lead the list: passed once, then dropped
        if len(order) > 2 * len(ready) + 64:  # stale entries further in: drop them all
            self._order = [position for position in order if ids[position] in ready]
        return found

    def take(self, records: Iterable[TaskRecord]) -> None:
        """``records`` went to the submits: no longer ready until touched again."""
        for record in records:
            self._ready.discard(record.id)
        if not self._ready:
            self._ready = set()  # an emptied set keeps its table (4 MB for 100,000 tasks)
