"""Same-tick scheduling and ticks that cost what changed (issue 24), on a fake clock.

Counted, never timed: polls, waits and clock time on :class:`FakeClock`, the scans of every
task a tick makes, the journal appends (fsyncs) of a run.
"""

from __future__ import annotations

import asyncio
import itertools
import random

import pytest
from altar.execution.plans.plan import Plan, PlanTask
from altar.execution.run import runner as runner_module
from altar.execution.run import scheduling
from altar.execution.run.frontier import Frontier
from altar.execution.run.pacing import Pace
from altar.execution.run.runner import run_plan
from altar.execution.state import journal as journal_module
from altar.execution.state.records import (
    FAILED,
    PENDING,
    QUEUED,
    RUNNING,
    SKIPPED,
    SUBMITTING,
    SUCCEEDED,
    TaskRecord,
)

from .runkit import FAST, simple_plan, spec
from .test_runner import Timeline


def chain_plan(n: int) -> Plan:
    keys = [f"t{i}" for i in range(n)]
    return Plan(
        "fake",
        {},
        [PlanTask(k, spec(k)) for k in keys],
        dependencies={k: (keys[i - 1],) for i, k in enumerate(keys) if i},
    )


# -- the chain: a dependant goes in the tick its dependency ended --------------------------


@pytest.mark.asyncio
async def test_a_chain_of_instant_tasks_takes_one_poll_per_link_and_no_clock_time(
    tmp_path, provider, fake_backend_class
):
    timeline = Timeline(fake_backend_class)
    provider.duration = 1  # finished at its first poll
    result = await asyncio.wait_for(
        run_plan(
            chain_plan(6),
            timeline.backend_class(provider=provider),
            run_dir=tmp_path / "run",
            poll_interval_s=1.0,
            max_poll_interval_s=8.0,
            clock=timeline.clock,
        ),
        timeout=30,  # a hang guard, not a measurement
    )
    assert result.ok
    entries = timeline.entries
    polls = [e[1] for e in entries if e[0] == "poll"]
    assert polls == [{f"t{i}": "succeeded"} for i in range(6)]  # one poll per link
    assert timeline.clock.time == 0.0  # no link waited for the poll pace
    for i in range(1, 6):
        ended = entries.index(("poll", {f"t{i - 1}": "succeeded"}))
        # the same tick submits the dependant; the run waits only for its submit to land
        assert entries[ended + 1 : ended + 4] == [
            ("wait", 1.0, True),
            ("submit", f"t{i}"),
            ("poll", {f"t{i}": "succeeded"}),
        ]


@pytest.mark.asyncio
async def test_the_early_poll_waits_as_long_as_the_last_poll_took(
    tmp_path, provider, fake_backend_class
):
    """A slow poll is not hammered: an early poll comes no sooner than the last one took."""
    timeline = Timeline(fake_backend_class)
    clock = timeline.clock
    starts: list[tuple[float, float]] = []  # (start, end) of each poll on the clock

    class SlowPoll(timeline.backend_class):  # type: ignore[misc, valid-type]
        async def poll(self, handles):
            start = clock.time
            clock.time += 0.3  # the poll takes 0.3 s of clock time
            statuses = await super().poll(handles)
            starts.append((start, clock.time))
            return statuses

    provider.duration = 1
    result = await asyncio.wait_for(
        run_plan(
            chain_plan(4),
            SlowPoll(provider=provider),
            run_dir=tmp_path / "run",
            poll_interval_s=1.0,
            max_poll_interval_s=8.0,
            clock=clock,
        ),
        timeout=30,
    )
    assert result.ok
    assert len(starts) == 4
    for (_, end), (start, _) in itertools.pairwise(starts):
        assert start - end == pytest.approx(0.3)  # not at once, and not the full second
    waits = [e[1:] for e in timeline.entries if e[0] == "wait"]
    assert (0.3, False) in waits
    assert (1.0, False) not in waits


def test_the_pace_backs_off_and_resets():
    pace = Pace(0.5, 2.0)
    assert pace.due(0.0, landed=False)  # the first poll is due at once
    pace.started(0.0)
    pace.ended(0.1)
    assert not pace.due(0.3, landed=False)
    assert pace.due(0.3, landed=True)  # a landed submit: polled once 0.1 s passed
    assert not pace.due(0.15, landed=True)
    assert pace.next(landed=False) == 0.5
    assert pace.next(landed=True) == pytest.approx(0.2)
    for expected in (1.0, 2.0, 2.0):
        pace.back_off()
        assert pace.interval == expected
    pace.reset()
    assert pace.interval == 0.5


# -- O(changed) ticks ----------------------------------------------------------------------


class CountingTasks(dict[str, TaskRecord]):
    """A journal's tasks that count the passes over all of them."""

    scans = 0

    def values(self):  # type: ignore[override]
        CountingTasks.scans += 1
        return super().values()

    def items(self):  # type: ignore[override]
        CountingTasks.scans += 1
        return super().items()

    def keys(self):  # type: ignore[override]
        CountingTasks.scans += 1
        return super().keys()

    def __iter__(self):
        CountingTasks.scans += 1
        return super().__iter__()


@pytest.mark.asyncio
async def test_a_tick_over_untouched_open_tasks_scans_no_task_list(
    tmp_path, provider, fake_backend_class, monkeypatch
):
    real_open = runner_module.open_journal

    def counting_open(*args, **kwargs):
        journal = real_open(*args, **kwargs)
        journal.tasks = CountingTasks(journal.tasks)
        return journal

    monkeypatch.setattr(runner_module, "open_journal", counting_open)
    CountingTasks.scans = 0
    scans_at_poll: list[int] = []
    frontier_looks: list[int] = []

    class Watching(fake_backend_class):
        async def poll(self, handles):
            scans_at_poll.append(CountingTasks.scans)
            return await super().poll(handles)

    provider.duration = 60  # 300 tasks land within a few polls, then run unchanged
    names = [f"t{i}" for i in range(300)]
    backend = Watching(provider=provider)
    real_run = runner_module._Run.run

    async def watched_run(self):
        original = self.poll

        async def poll():
            frontier_looks.append(self.frontier.looked)
            return await original()

        self.poll = poll
        return await real_run(self)

    monkeypatch.setattr(runner_module._Run, "run", watched_run)
    result = await run_plan(simple_plan(*names), backend, run_dir=tmp_path / "run", **FAST)
    assert result.ok
    assert len(scans_at_poll) >= 60
    assert scans_at_poll[0] > 0  # the run's start reads every task once (the count works)
    # polls 15 to 50: every task running and unchanged, and no pass over all tasks
    assert provider.poll_calls[15] == provider.poll_calls[50]
    assert len(provider.poll_calls[15]) == 300
    assert scans_at_poll[15] == scans_at_poll[50]
    # and the frontier looked at no task while none changed
    assert frontier_looks[15] == frontier_looks[50]


@pytest.mark.asyncio
async def test_fsyncs_are_batched_per_tick_not_per_task(
    tmp_path, provider, fake_backend_class, monkeypatch
):
    appends = []
    real_append = journal_module.append_durably

    def counted(path, data):
        appends.append(data.count(b"\n"))
        real_append(path, data)

    monkeypatch.setattr(journal_module, "append_durably", counted)
    provider.duration = 1
    names = [f"t{i}" for i in range(100)]
    result = await run_plan(
        simple_plan(*names),
        fake_backend_class(provider=provider),
        run_dir=tmp_path / "run",
        max_parallel=10,
        **FAST,
    )
    assert result.ok
    rounds = 100 // 10
    # a round of ten: one write of the successes (no outputs to fetch) with the next ten
    # intents, one of their handles
    assert len(appends) <= 2 * rounds + 2, appends
    assert sum(appends) >= 300  # yet every change was written (intent, handle, success)


# -- the frontier ----------------------------------------------------------------------------


def records(*ids: str) -> dict[str, TaskRecord]:
    return {i: TaskRecord(i, "fold", "sha256:0") for i in ids}


def test_the_frontier_gives_ready_tasks_in_plan_order_and_takes_them():
    tasks = records("a", "b", "c", "d")
    frontier = Frontier(tasks, {"b": ("a",)})
    assert [r.id for r in frontier.ready()] == ["a", "c", "d"]
    assert [r.id for r in frontier.ready(2)] == ["a", "c"]
    frontier.take([tasks["a"], tasks["c"]])
    assert [r.id for r in frontier.ready()] == ["d"]
    tasks["a"].state, tasks["a"].outputs_collected = SUCCEEDED, True
    frontier.update(["a"])  # a succeeded: b is looked at again
    assert [r.id for r in frontier.ready()] == ["b", "d"]
    frontier.update(["c"])  # c given back (its submit was withdrawn): ready again, in order
    assert [r.id for r in frontier.ready()] == ["b", "c", "d"]
    assert len(frontier) == 3


def test_the_frontier_looks_only_at_what_changed_and_its_dependants():
    tasks = records(*(f"t{i}" for i in range(1000)), "merge")
    frontier = Frontier(tasks, {"merge": ("t0", "t1")})
    start = frontier.looked
    tasks["t5"].state = SUCCEEDED
    tasks["t5"].outputs_collected = True
    frontier.update(["t5"])
    assert frontier.looked - start == 1  # t5 alone: nothing depends on it
    tasks["t0"].state, tasks["t0"].outputs_collected = SUCCEEDED, True
    frontier.update(["t0"])
    assert frontier.looked - start == 3  # t0 and its dependant
    assert "merge" not in {r.id for r in frontier.ready()}  # t1 has not succeeded


def test_the_frontier_finds_blocked_tasks_once():
    tasks = records("a", "b", "c")
    frontier = Frontier(tasks, {"b": ("a",), "c": ("b",)})
    tasks["a"].state = FAILED
    frontier.update(["a"])
    assert [(r.id, why) for r, why in frontier.blocked()] == [("b", "dependency a failed")]
    assert frontier.blocked() == []
    assert tasks["c"].state == QUEUED
    assert [r.id for r in frontier.ready()] == []


@pytest.mark.parametrize("seed", range(20))
def test_the_frontier_agrees_with_the_scans_it_replaces(seed):
    """Random plans and runs: ready and blocked as ``scheduling`` finds them over every task."""
    rng = random.Random(seed)
    ids = [f"t{i}" for i in range(40)]
    deps = {t: tuple(rng.sample(ids[:i], rng.randint(0, min(i, 3)))) for i, t in enumerate(ids)}
    tasks = records(*ids)
    frontier = Frontier(tasks, deps)
    step = {QUEUED: SUBMITTING, SUBMITTING: PENDING, PENDING: RUNNING}
    for _ in range(200):
        touched = []
        for record in rng.sample(list(tasks.values()), 4):
            if record.state in step and (record.state != QUEUED or record in frontier.ready()):
                record.state = step[record.state]
            elif record.state == RUNNING:
                record.state = rng.choice([SUCCEEDED, SUCCEEDED, FAILED, QUEUED])  # QUEUED: retry
            elif record.state == SUCCEEDED:
                record.outputs_collected = True
            touched.append(record.id)
        frontier.update(touched)
        while found := frontier.blocked():  # the runner skips them, which may block others
            for record, _ in found:
                record.state = SKIPPED
            frontier.update([record.id for record, _ in found])
        assert scheduling.blocked(tasks, deps) == []
        expected = [r.id for r in scheduling.ready(tasks, deps)]
        assert [r.id for r in frontier.ready()] == expected
        assert [r.id for r in frontier.ready(3)] == expected[:3]
    assert {r.state for r in tasks.values()} >= {SUCCEEDED, SKIPPED}  # the walk got somewhere


@pytest.mark.asyncio
async def test_a_success_with_outputs_is_durable_before_they_are_fetched(
    tmp_path, provider, fake_backend_class
):
    """A collect may take long and the provider forget the task: the success is on disk first."""
    from altar.execution.state.journal import Journal

    from .test_runner import one_output_plan

    seen = []

    class Looking(fake_backend_class):
        async def collect_outputs(self, transfers):
            record = Journal.load(tmp_path / "run").tasks["a"]
            seen.append((record.state, record.outputs_collected))
            return await super().collect_outputs(transfers)

    provider.duration = 1
    plan = one_output_plan(tmp_path)
    result = await run_plan(plan, Looking(provider=provider), run_dir=tmp_path / "run", **FAST)
    assert result.ok
    assert seen == [(SUCCEEDED, False)]
