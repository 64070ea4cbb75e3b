"""Run a plan on a backend: stage once, submit within limits, poll with backoff, collect, clean up.

The run is a loop of ticks. Each tick makes one ``poll`` call for every open task (when one is
due), collects what succeeded, and in the same tick submits what that made ready and what the
freed slots allow (in the background, concurrently, so a slow submit never holds up polling).
Between ticks it waits: the interval starts at ``poll_interval_s``, doubles while nothing
changes and resets on any change. A submit that lands ends the wait early, and its task is
polled at once (an instant or cached task may be done already), once per batch of landings and
never sooner after the last poll than that poll took (:mod:`~altar.execution.run.pacing`). A
tick costs what changed: the tasks are indexed by state (:class:`.ledger.Ledger`) and the ready
ones kept by :class:`.frontier.Frontier`; a tick's changes share one journal write with the
intents it launches (and one before outputs are fetched, when a success has some).

The run keeps a journal (:mod:`altar.execution.state.journal`) in its run directory. Start the same
plan again with the same run directory and the run resumes: it polls the tasks it already
submitted and never has one task running twice at once (see the journal module for the one
crash window a backend that mints fresh ids leaves open).

Failures: a non-deterministic one (``timeout``, ``oom_killed``, ``container_missing``,
``job_failed``, ...) is retried up to ``max_retries`` times, one the provider ended
(``provider_ending``) up to ``max_provider_retries`` times; a deterministic one (``exit_<n>``,
``input_digest_mismatch``) stops that task, and its ``failure_detail`` (the log tail) is kept.
A task whose dependency did not succeed is ``skipped``.

The parts, one module each: :mod:`~altar.execution.run.results` (``RunEvent``, ``TaskResult``,
``RunResult``), :mod:`~altar.execution.errors` (the run errors under ``RunStoppedError``),
:mod:`~altar.execution.state.journal` (``open_journal``), :mod:`~altar.execution.run.ledger` (state
changes, journal writes, events), :mod:`~altar.execution.run.scheduling` (pure: ``ready``,
``choose``, ``blocked``), :mod:`~altar.execution.run.budget` (the retry budgets),
:mod:`~altar.execution.run.holding` (submits held back by limits and provider endings),
:mod:`~altar.execution.run.submitting`, :mod:`~altar.execution.run.observing` (poll and collect),
:mod:`~altar.execution.run.cancelling` (cancel and cleanup, and ``cancel_run``),
:mod:`~altar.execution.state.runs` (``run_status``) and
:mod:`~altar.execution.run.clock` (the injected
clock). This module keeps the tick loop and ``run_plan``; every name it exported before still
imports from here.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from altar.execution.atomic import sweeping_for
from altar.execution.backend import ExecutionBackend, poll_interval_cap, submit_window
from altar.execution.cache.settings import CacheSettings
from altar.execution.errors import (
    BackendCallError,
    CancelIncompleteError,
    JournalError,
    OutputCollectionError,
    RunStoppedError,
    StagingError,
)
from altar.execution.plans.placeholders import expand_spec, has_placeholders
from altar.execution.plans.plan import Plan, PlanTask, outputs_for_run
from altar.execution.run.budget import DEFAULT_MAX_RETRIES, RetryBudget, plan_budget
from altar.execution.run.caching import RunCache
from altar.execution.run.cancelling import CANCEL_REQUEST, cancel_all, cancel_run, cleanup_finished
from altar.execution.run.clock import Clock
from altar.execution.run.frontier import Frontier
from altar.execution.run.lanes import Lanes
from altar.execution.run.ledger import Ledger
from altar.execution.run.litter import litter_directories, remove_litter, remove_run_dir_litter
from altar.execution.run.observing import collect_succeeded, poll_open
from altar.execution.run.pacing import Pace
from altar.execution.run.reconciling import reconcile, start_adopted
from altar.execution.run.results import (
    TASK_STATES,
    RunEvent,
    RunResult,
    TaskResult,
    results_of,
)
from altar.execution.run.routed import resolver_for
from altar.execution.run.staging import stage_run
from altar.execution.run.submitting import SUBMIT_WINDOW, Submits
from altar.execution.state.bulk import long_lived
from altar.execution.state.journal import (
    IN_DOUBT,
    PENDING,
    QUEUED,
    RUNNING,
    SKIPPED,
    SUBMITTING,
    Journal,
    TaskRecord,
    open_journal,
    run_lock,
)
from altar.execution.state.records import FINAL_STATES
from altar.execution.state.runs import run_status

__all__ = [
    "CANCEL_REQUEST",
    "DEFAULT_MAX_RETRIES",
    "SUBMIT_WINDOW",
    "TASK_STATES",
    "BackendCallError",
    "CancelIncompleteError",
    "Clock",
    "OutputCollectionError",
    "RunEvent",
    "RunResult",
    "RunStoppedError",
    "StagingError",
    "TaskResult",
    "cancel_run",
    "run_plan",
    "run_plan_sync",
    "run_status",
]

# A run that ends early (Ctrl-C, an error) first lets the submits in flight return for this long:
# a provider that already accepted one keeps running it, so its handle is worth journaling (a
# resumed run then polls it instead of submitting it again and running the task twice).
SUBMIT_GRACE_S = 10.0


def _resolve(future: asyncio.Future[bool] | None, value: bool) -> None:
    if future is not None and not future.done():
        future.set_result(value)


class _Run:
    """One driven run: the tick loop. The phases live in their own modules (see the top)."""

    def __init__(
        self,
        plan: Plan,
        backend: ExecutionBackend,
        journal: Journal,
        *,
        max_parallel: int | None,
        budget: RetryBudget,
        poll_interval_s: float,
        max_poll_interval_s: float,
        on_event: Callable[[RunEvent], None] | None,
        clock: Clock | None = None,
        cache: CacheSettings | None = None,
    ) -> None:
        self.plan = plan
        self.backend = backend
        self.journal = journal
        self.ledger = Ledger(journal, on_event)
        self.clock = clock if clock is not None else Clock()
        self.max_parallel = max_parallel
        self.budget = budget
        # the backoff's cap: the backend may lower it (ExecutionBackend.max_poll_interval_s)
        cap = poll_interval_cap(backend, max_poll_interval_s, poll_interval_s)
        self.pace = Pace(poll_interval_s, cap)
        self.on_event = on_event
        self.tasks: dict[str, PlanTask] = {task.id: task for task in plan.tasks}
        self.specs = {task.id: task.spec for task in plan.tasks}  # built once, not per tick
        self.records = journal.tasks
        # each backend of a routed run is a lane: its own max_parallel, capacity and hold
        self.lanes = Lanes(
            backend, self.specs, max_parallel=max_parallel, pool=self.pool, emit=self.ledger.emit
        )
        self.submits = Submits(
            self.ledger,
            backend,
            # portable paths ({altar:mount_root}) become this backend's; the journal keeps
            # the plan's text, so its spec digests are the same on every backend
            {
                task.id: (
                    expand_spec(task.spec, resolver_for(backend, task.id))
                    if has_placeholders(task.spec)
                    else task.spec  # no resolver to make (10,000 of them for a large plan)
                )
                for task in plan.tasks
            },
            run_id=journal.run_id,
            budget=budget,
            grace_s=SUBMIT_GRACE_S,
            on_news=self._news,
            window=submit_window(backend, SUBMIT_WINDOW),  # wider if it adopts by key
            lanes=self.lanes,
        )
        self._landed = False  # a submit landed with news since the tick began
        self._waiter: asyncio.Future[bool] | None = None  # the wait between ticks
        self.frontier = Frontier(self.records, plan.dependencies)
        self.emit = self.ledger.emit
        self.set_state = self.ledger.set_state
        self.changed = self.ledger.changed
        self.flush = self.ledger.flush
        self.cache = RunCache(cache, plan, backend, self.ledger, journal) if cache else None

    def _news(self) -> None:
        self._landed = True
        _resolve(self._waiter, True)

    # -- phases -------------------------------------------------------------------------

    async def stage(self) -> None:
        if self.journal.edited:
            names = ", ".join(self.journal.edited[:5])
            more = ", ..." if len(self.journal.edited) > 5 else ""
            self.emit(
                "edited",
                f"{len(self.journal.edited)} task(s) changed in the plan before they were "
                f"submitted, and run as it now says: {names}{more}",
            )
        await stage_run(
            self.plan, self.backend, self.journal, self.emit, progress=self.on_event is not None
        )

    def resume(self) -> None:
        open_tasks = 0
        for record in self.records.values():
            last = record.last
            if record.state == SUBMITTING and last is not None and last.handle is None:
                # the process stopped inside submit: find its task, or submit it again with
                # the same key (see the journal module)
                self.set_state(record, QUEUED)
                record.in_doubt += 1
                last.state = IN_DOUBT
                self.changed(record)
                self.emit(
                    "in_doubt",
                    f"{record.id}: an earlier submit was interrupted before its handle was "
                    "recorded; looking for its task, else submitting it again",
                    record,
                )
            elif record.state in (PENDING, RUNNING, SUBMITTING):
                open_tasks += 1
        if open_tasks:
            self.emit("resumed", f"resuming: {open_tasks} task(s) already submitted")

    def skip_blocked(self) -> None:
        """Skip the tasks a dependency that did not succeed blocks, and theirs, in this tick."""
        while True:
            self.frontier.update(self.ledger.take_touched())
            found = self.frontier.blocked()
            if not found:
                return
            for record, detail in found:
                self.set_state(record, SKIPPED)
                record.detail = detail
                self.changed(record)
                self.emit("skipped", f"{record.id} skipped: {record.detail}", record)

    def ready(self, limit: int | None = None) -> list[TaskRecord]:
        """The first ``limit`` ready tasks not already waiting for room in the submit window."""
        self.skip_blocked()
        ready = self.frontier.ready(limit)
        queued = self.submits.queued
        return [r for r in ready if r.id not in queued] if queued else ready

    def room(self) -> int | None:
        """How many more tasks ``max_parallel`` lets go now (None: no limit)."""
        if self.max_parallel is None:
            return None
        in_flight = self.ledger.count(SUBMITTING, PENDING, RUNNING) + len(self.submits.queued)
        return max(0, self.max_parallel - in_flight)

    def settled(self) -> bool:
        """Every task final, and every success's outputs collected."""
        return self.ledger.count(*FINAL_STATES) == len(self.records) and not self.ledger.to_collect

    def pool(self, record: TaskRecord) -> str:
        return self.tasks[record.id].spec.resources.gpu or "cpu"

    def feed_hold(self) -> None:
        """Tell the lanes' holds what the provider refused and ended since the last tick."""
        self.lanes.feed(self.submits.limits, self.ledger.endings, self.records, self.now())
        self.submits.limits.clear()
        self.ledger.endings.clear()

    async def candidates(self) -> list[TaskRecord]:
        """The ready tasks ``max_parallel`` leaves room for, less those the cache served (a
        routed run's lanes share the room out themselves: a full lane must not starve one)."""
        room = self.room()
        if room == 0:
            return []
        if self.lanes.routed is not None:
            room = None
        if self.cache is None:
            return self.ready(room)
        rest = await self.cache.serve(self.ready())  # a hit takes no slot
        return rest if room is None else rest[:room]

    async def choose(self, allowed: list[TaskRecord]) -> list[TaskRecord]:
        """The tasks to submit now (asks a lane's capacity only if any may go there)."""
        if not allowed:
            return []  # most ticks: nothing ready, so no list of the tasks in flight
        # one backend: candidates() applied max_parallel; only submits in flight take a slot
        # a capacity report may not show yet
        states = (SUBMITTING, PENDING, RUNNING) if self.lanes.routed else (SUBMITTING,)
        flying = self.ledger.in_states(*states)
        submitted = self.ledger.count(SUBMITTING, PENDING, RUNNING) > 0
        return await self.lanes.choose(
            allowed, flying, self.submits.waiting, self.now(), submitted=submitted
        )

    def now(self) -> float:
        """The clock of the poll schedule."""
        return self.clock.now()

    async def wait(self, seconds: float) -> bool:
        """Wait up to ``seconds``; True if a submit landed meanwhile (or before)."""
        if self._landed:
            return True
        if not self.submits:
            return await self.clock.wait(seconds)
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiter = waiter
        try:
            return await self.clock.wait(seconds, waiter)
        finally:
            self._waiter = None

    async def reconcile(self) -> None:
        """Adopt in-doubt submissions the provider holds; remove its objects we do not own."""
        outcome = await reconcile(self.ledger, self.backend, self.journal.run_id)
        self.submits.absent |= outcome.absent
        if outcome.adopted and self.backend.adopts_submissions:
            await start_adopted(self.ledger, self.backend, self.submits.labelled, outcome.adopted)

    def tidy(self, owners: list[int]) -> None:
        """Remove the temporary files that earlier (killed) processes of this run left."""
        removed: list[Path] = []
        if owners:  # else nothing of ours to find: do not walk every output's directory
            removed = remove_litter(litter_directories(self.plan, self.journal.run_dir), owners)
        removed += remove_run_dir_litter(self.journal.run_dir)  # incl. pids never journaled
        if removed:
            names = ", ".join(path.name for path in removed[:3])
            more = f" and {len(removed) - 3} more" if len(removed) > 3 else ""
            self.emit(
                "litter_removed",
                f"removed {len(removed)} temporary file(s) an earlier process of this run "
                f"left: {names}{more}",
            )

    async def poll(self) -> bool:
        """One poll of every open task (see :mod:`.pacing` for when); True if any changed."""
        await self.submits.settle()
        self.submits.landed = False  # this poll covers every submit landed so far
        self.pace.started(self.now())
        try:
            changed, _ = await poll_open(self.ledger, self.backend, budget=self.budget)
        finally:
            self.pace.ended(self.now())
        return changed

    async def collect(self) -> bool:
        return await collect_succeeded(self.ledger, self.backend, self.specs)

    # -- the loop -----------------------------------------------------------------------

    async def run(self) -> RunResult:
        try:
            resuming = bool(self.journal.pids) or any(r.attempts for r in self.records.values())
            earlier = [pid for pid in self.journal.pids if pid != os.getpid()]
            self.journal.pids = [*earlier, os.getpid()]
            self.journal.save()  # our pid is durable before we write any temporary file
            self.resume()
            if resuming:
                self.tidy(earlier)
                await self.reconcile()
            with sweeping_for(earlier):
                await self.stage()
            cancel_file = self.journal.run_dir / CANCEL_REQUEST
            while True:
                if cancel_file.exists():
                    await self.submits.abandon()  # submits in flight get the grace, not forever
                    await cancel_all(self.ledger, self.backend, "cancelled by `altar cancel`")
                    cancel_file.unlink(missing_ok=True)
                    break
                self._landed = False
                refused, self.submits.refused = self.submits.refused, False
                self.submits.reap()
                due = self.pace.due(self.now(), landed=self.submits.landed)
                changed = await self.poll() if due else False
                collected = await self.collect()
                self.feed_hold()
                just_collected = self.ledger.take_collected()
                if self.cache is not None:
                    if collected:
                        await self.cache.store_collected(just_collected)
                    await self.cache.release_finished()
                # what the poll freed and made ready is submitted in this same tick, unless a
                # submit found the provider down meanwhile: the next tick waits that out
                batch = [] if self.submits.refused else await self.choose(await self.candidates())
                self.submits.launch(batch)
                self.frontier.take(batch)
                self.skip_blocked()
                self.ledger.checkpoint()  # what the launch's write did not carry (if any)
                self.submits.reap()
                if not self.submits and self.settled():
                    break
                # a launch resets the backoff, unless it only retries submits that found the
                # provider down: those are waited out like a poll that finds it down
                if changed or collected or (batch and not refused):
                    self.pace.reset()
                elif due:
                    self.pace.back_off()
                if await self.wait(self.pace.next(landed=self.submits.landed) - self.now()):
                    self.pace.reset()  # a submit landed: its task is news
            await self.submits.drain()
            if self.cache is not None:
                await self.cache.store_collected()
                await self.cache.release_finished()
            with sweeping_for(earlier):  # what a killed process was writing as it cleaned up
                await cleanup_finished(self.ledger, self.backend)
            await self.reconcile()
            self.tidy(earlier)
            self.journal.finished = all(record.final for record in self.records.values())
            self.journal.save()
            result = results_of(self.journal, time.monotonic() - self.ledger.started)
            summary = ", ".join(f"{n} {state}" for state, n in result.counts().items())
            self.emit("done", f"{len(result.tasks)} task(s): {summary}")
            return result
        finally:
            try:
                await self.submits.abandon()
            finally:
                # a cancelled or crashed run keeps what it learned
                with contextlib.suppress(JournalError):
                    self.flush()


async def run_plan(
    plan: Plan,
    backend: ExecutionBackend,
    *,
    run_dir: str | Path,
    max_parallel: int | None = None,
    max_retries: int | None = None,
    max_provider_retries: int | None = None,
    poll_interval_s: float | None = None,
    max_poll_interval_s: float = 5.0,
    on_event: Callable[[RunEvent], None] | None = None,
    backend_options: Mapping[str, Any] | None = None,
    clock: Clock | None = None,
    cache: CacheSettings | bool = True,
) -> RunResult:
    """Run ``plan`` on ``backend``, journaling into ``run_dir`` (resumed if it holds a journal).

    ``max_parallel``, ``max_retries`` and ``max_provider_retries`` default to the plan's
    values (then unlimited, 2 and 10; see :mod:`altar.execution.run.budget`); those given are
    recorded in the journal (``flags``) so resume commands repeat them.
    ``backend_options`` (default: the plan's, when its backend type is ``backend.name``) are
    recorded so ``altar status`` and ``altar cancel`` can build the backend again.
    Polling starts every ``poll_interval_s`` (default: the backend's ``poll_interval_s``) and
    doubles up to ``max_poll_interval_s`` while nothing changes; each tick makes one ``poll``
    call for every open task. Submits run concurrently in the background; a slot freed by a
    finished task is refilled at once. ``clock`` (default: the event loop's) times the
    polls and the waits between them; tests pass a fake one. ``cache``: True uses the plan's
    ``[cache]`` table if it has one, False no cache, or settings of its own (see
    :mod:`altar.execution.run.caching`).
    """
    run_dir = Path(run_dir)
    given = {
        "max_parallel": max_parallel,
        "max_retries": max_retries,
        "max_provider_retries": max_provider_retries,
    }
    flags = {name: value for name, value in given.items() if value is not None}
    if poll_interval_s is None:
        poll_interval_s = backend.poll_interval_s
    if max_parallel is None:
        max_parallel = plan.max_parallel
    if max_parallel is not None and max_parallel < 1:
        raise ValueError(f"max_parallel must be at least 1, got {max_parallel}")
    budget = plan_budget(plan, max_retries, max_provider_retries)
    with run_lock(run_dir):
        if backend_options is None and plan.backend_type == backend.name:
            backend_options = plan.backend_options
        journal = open_journal(
            plan, backend.name, run_dir, dict(backend_options or {}), flags, save=False
        )
        run = _Run(
            outputs_for_run(plan, run_dir),  # outputs_dir = "results/{altar:run}": this run's
            backend,
            journal,
            max_parallel=max_parallel,
            budget=budget,
            poll_interval_s=poll_interval_s,
            max_poll_interval_s=max_poll_interval_s,
            on_event=on_event,
            clock=clock,
            cache=plan.cache if cache is True else cache or None,
        )
        with long_lived():  # the plan and the journal, out of the collector's passes
            return await run.run()


def run_plan_sync(plan: Plan, backend: ExecutionBackend, **kwargs: Any) -> RunResult:
    """:func:`run_plan` for synchronous callers (starts its own event loop)."""
    return asyncio.run(run_plan(plan, backend, **kwargs))
