"""A run's bookkeeping: state changes with their counts, journal writes, and events.

Shared by the tick loop (:mod:`altar.execution.run.runner`) and the functions that act on a run's
tasks outside it (:mod:`altar.execution.run.cancelling`), so `altar cancel` needs no plan.

Every change of a task's state goes through :meth:`Ledger.set_state`, which keeps the tasks
indexed by state (``by_state``), the successes whose outputs wait to be collected
(``to_collect``) and the tasks touched since the tick loop last looked (``touched``): a tick
reads what changed, never a scan of every task.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from collections.abc import Callable

from altar.execution.errors import JournalError
from altar.execution.run.results import RunEvent
from altar.execution.state.journal import SUCCEEDED, Journal, TaskRecord
from altar.execution.types import TaskFailure

__all__ = ["Ledger"]


class Ledger:
    """Changes to a journal's task records, made durable on request, reported as events."""

    def __init__(
        self, journal: Journal, on_event: Callable[[RunEvent], None] | None = None
    ) -> None:
        self.journal = journal
        self.records = journal.tasks
        self.on_event = on_event
        self.started = time.monotonic()
        # Kept current by set_state, so an event's counts cost O(states), not O(tasks).
        self._counts: Counter[str] = Counter()
        #: the tasks in each state (in the order they entered it)
        self.by_state: defaultdict[str, dict[str, TaskRecord]] = defaultdict(dict)
        #: successes whose outputs are not collected yet
        self.to_collect: dict[str, TaskRecord] = {}
        #: ids of the tasks whose state (or outputs) changed since the loop last took them
        self.touched: dict[str, None] = {}
        #: tasks whose outputs were collected since the loop last took them (for the cache)
        self.just_collected: list[TaskRecord] = []
        for record in self.records.values():
            self._counts[record.state] += 1
            self.by_state[record.state][record.id] = record
            if record.state == SUCCEEDED and not record.outputs_collected:
                self.to_collect[record.id] = record
        self._commit: asyncio.Future[None] | None = None
        #: attempts the provider ended since the run loop last looked (see ``ended``)
        self.endings: list[tuple[str, TaskFailure]] = []

    def emit(
        self,
        kind: str,
        message: str,
        record: TaskRecord | None = None,
        *,
        bytes_done: int | None = None,
        bytes_total: int | None = None,
    ) -> None:
        if self.on_event is None:
            return
        counts = {state: n for state, n in self._counts.items() if n}
        self.on_event(
            RunEvent(
                kind=kind,
                message=message,
                task_id=record.id if record else None,
                attempt=record.last.number if record and record.last else None,
                state=record.state if record else None,
                counts=counts,
                elapsed_s=time.monotonic() - self.started,
                bytes_done=bytes_done,
                bytes_total=bytes_total,
            )
        )

    def set_state(self, record: TaskRecord, state: str) -> None:
        """Every change of a record's state goes through here (the counts follow it)."""
        self._counts[record.state] -= 1
        self._counts[state] += 1
        left = self.by_state[record.state]
        del left[record.id]
        if not left:  # an emptied dict keeps its table: 100,000 queued tasks' is 5 MB
            del self.by_state[record.state]
        self.by_state[state][record.id] = record
        if state == SUCCEEDED and not record.outputs_collected:
            self.to_collect[record.id] = record
        else:
            self.to_collect.pop(record.id, None)
        record.state = state
        self.touched[record.id] = None

    def collected(self, record: TaskRecord) -> None:
        """The task's outputs are collected (its dependants may now be ready)."""
        record.outputs_collected = True
        self.to_collect.pop(record.id, None)
        self.touched[record.id] = None
        self.just_collected.append(record)

    def touch(self, record: TaskRecord) -> None:
        """Have the loop look at ``record`` again though its state did not change."""
        self.touched[record.id] = None

    def take_collected(self) -> list[TaskRecord]:
        """The tasks collected since the last call (and forget them)."""
        collected, self.just_collected = self.just_collected, []
        return collected

    def take_touched(self) -> list[str]:
        """The ids touched since the last call, in order (and forget them)."""
        touched, self.touched = list(self.touched), {}
        return touched

    def count(self, *states: str) -> int:
        """How many tasks are in any of ``states``."""
        return sum(len(self.by_state.get(state, ())) for state in states)

    def in_states(self, *states: str) -> list[TaskRecord]:
        """The tasks in any of ``states``, state by state."""
        return [r for state in states for r in self.by_state.get(state, {}).values()]

    def ended(self, record: TaskRecord, failure: TaskFailure) -> None:
        """Note an attempt the provider ended, for the run's hold (:mod:`.holding`)."""
        self.endings.append((record.id, failure))

    def changed(self, record: TaskRecord) -> None:
        self.journal.mark(record)

    def flush(self) -> None:
        """Make every marked change durable (one append and fsync)."""
        self.journal.flush()

    async def commit(self) -> None:
        """Make marked changes durable; changes made in the same event-loop turn share one fsync.

        The flush runs at the end of the current turn, after every coroutine that is already
        runnable has recorded its change (group commit). A run cancelled while waiting here
        still writes the change: the run flushes on its way out.
        """
        if self._commit is None:
            loop = asyncio.get_running_loop()
            self._commit = loop.create_future()
            self._commit.add_done_callback(lambda f: f.exception())  # retrieved even if unawaited
            loop.call_soon(self._run_commit)
        await asyncio.shield(self._commit)

    def _run_commit(self) -> None:
        future, self._commit = self._commit, None
        assert future is not None
        try:
            self.flush()
        except JournalError as error:
            future.set_exception(error)
        else:
            future.set_result(None)

    def checkpoint(self) -> None:
        """Fold the log into a snapshot once it outgrew it (see ``Journal.compact_due``)."""
        self.journal.flush()
        if self.journal.compact_due():
            self.journal.save()
