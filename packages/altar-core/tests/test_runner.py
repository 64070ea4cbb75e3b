"""The plan runner's tick loop against the scripted fake provider (see conftest.py)."""

from __future__ import annotations

import asyncio
import errno
import itertools

import pytest
from altar.execution import ResourceRequest, Transfer
from altar.execution.labels import submission_key
from altar.execution.plans.plan import Plan, PlanTask
from altar.execution.run import runner
from altar.execution.run.budget import RetryBudget
from altar.execution.run.clock import Clock
from altar.execution.run.runner import (
    StagingError,
    run_plan,
    run_status,
)
from altar.execution.state.journal import Journal, open_journal

from .runkit import FAST, journal_bytes, run_until, simple_plan, spec

DIGEST = "sha256:" + "ef" * 32


def demo_plan(tmp_path, folds: int = 3) -> Plan:
    weights = Transfer(str(tmp_path / "w.bin"), "models/w.bin", digest=DIGEST)
    tasks = [
        PlanTask(
            f"fold-{i}",
            spec(
                f"fold-{i}",
                inputs=[weights],
                outputs=[Transfer(str(tmp_path / f"out/fold-{i}.txt"), f"jobs/J/fold-{i}.txt")],
            ),
        )
        for i in range(folds)
    ]
    tasks.append(
        PlanTask(
            "summary",
            spec(
                "summary",
                kind="summarize",
                inputs=[weights]
                + [
                    Transfer(str(tmp_path / f"out/fold-{i}.txt"), f"jobs/J/fold-{i}.txt")
                    for i in range(folds)
                ],
                outputs=[Transfer(str(tmp_path / "out/summary.txt"), "jobs/J/summary.txt")],
            ),
        )
    )
    return Plan("fake", {}, tasks)


@pytest.mark.asyncio
async def test_a_plan_runs_to_completion(tmp_path, provider, fake_backend_class):
    backend = fake_backend_class(provider=provider)
    events = []
    result = await run_plan(
        demo_plan(tmp_path), backend, run_dir=tmp_path / "run", on_event=events.append, **FAST
    )
    assert result.ok
    assert [(t.id, t.status, t.attempts) for t in result.tasks] == [
        ("fold-0", "succeeded", 1),
        ("fold-1", "succeeded", 1),
        ("fold-2", "succeeded", 1),
        ("summary", "succeeded", 1),
    ]
    # one staging call, weights once, fold outputs (produced in the plan) never staged
    assert provider.stage_calls == [
        [Transfer(str(tmp_path / "w.bin"), "models/w.bin", digest=DIGEST)]
    ]
    # the summary was submitted only after every fold had succeeded
    summary_id = next(t.id for t in provider.tasks.values() if t.key == "summary")
    first_poll_with_summary = next(i for i, c in enumerate(provider.poll_calls) if summary_id in c)
    before = provider.poll_calls[first_poll_with_summary - 1]
    assert not before or all(provider.tasks[i].outcome == "ok" for i in before)
    assert len(provider.collect_calls) == 4
    assert sorted(h for call in provider.cleanup_calls for h in call) == sorted(provider.tasks)
    assert all(t.duration_s is not None for t in result.tasks)
    kinds = [e.kind for e in events]
    assert kinds[0] == "staging"
    assert kinds[-1] == "done"
    assert kinds.count("succeeded") == 4
    assert events[-1].counts == {"succeeded": 4}


@pytest.mark.asyncio
async def test_one_poll_call_per_tick_covers_every_open_task(
    tmp_path, provider, fake_backend_class
):
    provider.duration = 4
    backend = fake_backend_class(provider=provider)
    plan = simple_plan(*(f"t{i}" for i in range(20)))
    await run_plan(plan, backend, run_dir=tmp_path / "run", **FAST)
    # every task was submitted in the first tick, so the first poll asked about all 20 at once
    assert len(provider.poll_calls[0]) == 20
    assert len(provider.poll_calls) == provider.duration


@pytest.mark.asyncio
async def test_non_deterministic_failures_are_retried(tmp_path, provider, fake_backend_class):
    provider.script = {"flaky": ["timeout", "oom", "ok"], "doomed": ["job_failed"] * 5}
    backend = fake_backend_class(provider=provider)
    events = []
    result = await run_plan(
        simple_plan("flaky", "doomed"),
        backend,
        run_dir=tmp_path / "run",
        max_retries=2,
        on_event=events.append,
        **FAST,
    )
    flaky, doomed = result.tasks
    assert (flaky.status, flaky.attempts) == ("succeeded", 3)
    assert (doomed.status, doomed.attempts, doomed.reason) == ("failed", 3, "job_failed")
    assert provider.submits == {"flaky": 3, "doomed": 3}
    assert [e.task_id for e in events if e.kind == "retry"].count("doomed") == 2
    assert not result.ok


@pytest.mark.asyncio
async def test_deterministic_failure_stops_the_task_and_skips_dependents(
    tmp_path, provider, fake_backend_class
):
    provider.script = {"fold-1": ["exit_3"]}
    backend = fake_backend_class(provider=provider)
    result = await run_plan(demo_plan(tmp_path), backend, run_dir=tmp_path / "run", **FAST)
    by_id = {t.id: t for t in result.tasks}
    failed = by_id["fold-1"]
    assert (failed.status, failed.attempts, failed.reason, failed.exit_code) == (
        "failed",
        1,
        "exit_3",
        3,
    )
    assert failed.detail == "log tail of fold-1: it went wrong"
    assert by_id["summary"].status == "skipped"
    assert by_id["summary"].detail == "dependency fold-1 failed"
    assert "summary" not in provider.submits
    assert by_id["fold-0"].status == "succeeded"


@pytest.mark.asyncio
async def test_every_event_counts_the_task_states_of_that_moment(
    tmp_path, provider, fake_backend_class, monkeypatch
):
    # The runner keeps the counts as states change instead of recounting every task per event;
    # each event must still carry exactly what a recount would give.
    provider.script = {
        "fold-1": ["exit_3"],
        "flaky": ["timeout", "ok"],
        "gpu": ["reject"],
        "down": ["unavailable", "ok"],
    }
    plan = demo_plan(tmp_path)
    plan = Plan(
        "fake",
        {},
        [
            *plan.tasks,
            PlanTask("flaky", spec("flaky")),
            PlanTask("gpu", spec("gpu", resources=ResourceRequest(gpu="a100"))),
            PlanTask("down", spec("down")),
        ],
    )
    backend = fake_backend_class(provider=provider)
    (tmp_path / "run").mkdir()
    journal = open_journal(plan, backend.name, tmp_path / "run", {})
    recounts, events = [], []

    def on_event(event):
        recount = {}
        for rec in journal.tasks.values():
            recount[rec.state] = recount.get(rec.state, 0) + 1
        recounts.append(recount)
        events.append(event)

    run = runner._Run(
        plan,
        backend,
        journal,
        max_parallel=None,
        budget=RetryBudget(2),
        poll_interval_s=0.0,
        max_poll_interval_s=0.0,
        on_event=on_event,
    )
    result = await run.run()
    assert [e.counts for e in events] == recounts
    assert {"retry", "skipped", "failed", "succeeded"} <= {e.kind for e in events}
    assert events[-1].counts == result.counts() == {"succeeded": 4, "failed": 2, "skipped": 1}


@pytest.mark.asyncio
async def test_submit_errors(tmp_path, provider, fake_backend_class):
    provider.script = {
        "gpu": ["reject"],
        "down": ["unavailable", "unavailable", "ok"],
        "boom": ["submit_error", "ok"],
    }
    backend = fake_backend_class(provider=provider)
    plan = Plan(
        "fake",
        {},
        [
            PlanTask("gpu", spec("gpu", resources=ResourceRequest(gpu="a100"))),
            PlanTask("down", spec("down")),
            PlanTask("boom", spec("boom")),
        ],
    )
    result = await run_plan(plan, backend, run_dir=tmp_path / "run", max_retries=1, **FAST)
    gpu, down, boom = result.tasks
    assert (gpu.status, gpu.reason) == ("failed", "submit_rejected")
    assert "cannot run a a100 GPU" in gpu.detail
    # an unreachable provider does not use up attempts; a submit that raised ran nothing, so
    # ATTEMPTS (executions) counts only the attempt that ran, though a retry was used
    assert (down.status, down.attempts) == ("succeeded", 1)
    assert (boom.status, boom.attempts) == ("succeeded", 1)
    assert [
        a.failure.reason for a in Journal.load(tmp_path / "run").tasks["boom"].attempts[:1]
    ] == ["submit_failed"]


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("slots", "max_parallel", "limit"), [(2, None, 2), (None, 1, 1), (3, 2, 2)]
)
async def test_capacity_and_max_parallel_limit_live_tasks(
    tmp_path, provider, fake_backend_class, slots, max_parallel, limit
):
    provider.slots = slots
    provider.duration = 3
    backend = fake_backend_class(provider=provider)
    plan = simple_plan(*(f"t{i}" for i in range(7)))
    result = await run_plan(
        plan, backend, run_dir=tmp_path / "run", max_parallel=max_parallel, **FAST
    )
    assert result.ok
    assert provider.max_live == limit


class Timeline:
    """The runner's backend calls and waits, in order, on a fake clock (no test sleeps).

    A wait is recorded with its length and whether a submit was in flight. With one in flight
    the wait lasts until it lands (no clock time passes); otherwise the clock jumps ahead by
    the wait's length.
    """

    def __init__(self, fake_backend_class):
        self.entries: list[tuple] = []
        entries = self.entries
        self.clock = FakeClock(entries)

        class Recording(fake_backend_class):
            async def submit(self, spec):
                handle = await super().submit(spec)
                entries.append(("submit", spec.labels["task"]))
                return handle

            async def poll(self, handles):
                statuses = await super().poll(handles)
                keys = [self.provider.tasks[h.external_id].key for h in handles]
                states = [status.state.value for status in statuses]
                entries.append(("poll", dict(zip(keys, states, strict=True))))
                return statuses

        self.backend_class = Recording


class FakeClock(Clock):
    def __init__(self, entries):
        self.time = 0.0
        self.entries = entries

    def now(self):
        return self.time

    async def wait(self, seconds, wake=None):
        self.entries.append(("wait", seconds, wake is not None))
        if wake is not None:
            return await wake  # ended by the landing
        self.time += max(0.0, seconds)
        return False


@pytest.mark.asyncio
async def test_a_freed_slot_is_refilled_without_waiting(
    tmp_path, provider, fake_backend_class, monkeypatch
):
    timeline = Timeline(fake_backend_class)
    provider.duration = 4  # polls 1-3 see it running, poll 4 sees it finished
    result = await asyncio.wait_for(
        run_plan(
            simple_plan("a", "b", "c"),
            timeline.backend_class(provider=provider),
            run_dir=tmp_path / "run",
            max_parallel=1,
            poll_interval_s=1.0,
            max_poll_interval_s=8.0,
            clock=timeline.clock,
        ),
        timeout=30,  # a hang guard, not a measurement
    )
    assert result.ok
    entries = timeline.entries
    for done, refill in (("a", "b"), ("b", "c")):
        finished = next(
            i for i, e in enumerate(entries) if e[0] == "poll" and e[1].get(done) == "succeeded"
        )
        # the next submit was already under way when the run first waited: no backoff first,
        # and its task is polled as soon as the submit lands (no clock time either)
        assert entries[finished + 1] == ("wait", 1.0, True)
        assert entries[finished + 2] == ("submit", refill)
        assert entries[finished + 3] == ("poll", {refill: "running"})
    assert timeline.clock.time == 3 * 7.0  # 1 + 2 + 4 per task; a refill and its poll: none
    # while a task runs unchanged the waits grow, and a change resets them
    before_b = entries[: entries.index(("submit", "b"))]
    assert [e[1:] for e in before_b if e[0] == "wait"] == [
        (1.0, True),  # a's submit lands: poll 1 at once
        (1.0, False),  # after poll 1: a is running, a change
        (2.0, False),  # poll 2: nothing changed
        (4.0, False),  # poll 3: nothing changed
        (1.0, True),  # poll 4: a finished; b was submitted in the same tick
    ]
    # no tick is wasted: after every poll the run waits or submits, never polls again at once
    for before, after in itertools.pairwise(entries):
        assert not (before[0] == "poll" and after[0] == "poll"), entries


@pytest.mark.asyncio
async def test_a_slow_submit_holds_up_neither_polling_nor_the_other_slots(
    tmp_path, provider, fake_backend_class
):
    provider.slots = 2  # capacity() reports what is live; a submit in flight is not yet
    gate = asyncio.Event()
    order: list[str] = []

    class SlowA(fake_backend_class):
        async def submit(self, spec):
            key = spec.labels["task"]
            if key == "a":
                await gate.wait()  # a's submit lands only once c was submitted
            handle = await super().submit(spec)
            order.append(key)
            if key == "c":
                gate.set()
            return handle

    result = await asyncio.wait_for(  # a hang guard: the old tick waited for every submit
        run_plan(simple_plan("a", "b", "c"), SlowA(provider=provider), run_dir=tmp_path / "r"),
        timeout=30,
    )
    assert result.ok
    assert order == ["b", "c", "a"]  # b ran and finished, c took its slot, a still submitting
    assert provider.max_live == 2  # a's submit in flight counted against capacity


@pytest.mark.asyncio
async def test_backend_unavailable_during_poll_is_waited_out(
    tmp_path, provider, fake_backend_class
):
    provider.unavailable_polls = 3
    backend = fake_backend_class(provider=provider)
    events = []
    result = await run_plan(
        simple_plan("a"), backend, run_dir=tmp_path / "run", on_event=events.append, **FAST
    )
    assert result.ok
    assert [e.kind for e in events].count("backend_unavailable") == 3


@pytest.mark.asyncio
async def test_poll_must_answer_every_handle(tmp_path, provider, fake_backend_class):
    class Short(fake_backend_class):
        async def poll(self, handles):
            return (await super().poll(handles))[:-1]

    with pytest.raises(RuntimeError, match="returned 1 statuses for 2 handles"):
        await run_plan(
            simple_plan("a", "b"), Short(provider=provider), run_dir=tmp_path / "r", **FAST
        )


@pytest.mark.asyncio
async def test_staging_failure_is_one_error_and_is_retried_on_resume(
    tmp_path, provider, fake_backend_class
):
    class BadStaging(fake_backend_class):
        async def stage_inputs(self, transfers):
            raise ValueError("w.bin has digest sha256:00; expected sha256:ef")

    with pytest.raises(StagingError, match=r"staging inputs failed: ValueError: w.bin has digest"):
        await run_plan(demo_plan(tmp_path), BadStaging(provider=provider), run_dir=tmp_path / "r")
    assert not Journal.load(tmp_path / "r").staged
    result = await run_plan(
        demo_plan(tmp_path), fake_backend_class(provider=provider), run_dir=tmp_path / "r", **FAST
    )
    assert result.ok


@pytest.mark.asyncio
@pytest.mark.parametrize("stop_after", range(1, 14))
async def test_a_run_killed_at_any_event_resumes_without_running_a_task_twice(
    tmp_path, provider, fake_backend_class, stop_after
):
    provider.duration = 3
    provider.slots = 2
    plan = demo_plan(tmp_path)
    seen = []

    def stop(event):
        seen.append(event)
        return len(seen) == stop_after

    await run_until(plan, fake_backend_class(provider=provider), tmp_path / "run", stop)
    # a fresh process: a new backend instance on the same provider, the same run directory
    result = await run_plan(
        plan, fake_backend_class(provider=provider), run_dir=tmp_path / "run", **FAST
    )
    assert result.ok
    assert provider.submits == {"fold-0": 1, "fold-1": 1, "fold-2": 1, "summary": 1}
    assert len(provider.stage_calls) == 1 or stop_after == 1
    assert len(provider.collect_calls) == 4


@pytest.mark.asyncio
async def test_a_run_killed_inside_submit_submits_again(
    tmp_path, provider, fake_backend_class, monkeypatch
):
    monkeypatch.setattr(runner, "SUBMIT_GRACE_S", 0.0)  # killed: no time to wait for b's submit
    provider.hang_submits = {"b"}
    plan = simple_plan("a", "b")
    backend = fake_backend_class(provider=provider)
    a_submitted = asyncio.Event()

    def on_event(event):
        if event.kind == "submitted" and event.task_id == "a":
            a_submitted.set()

    task = asyncio.ensure_future(
        run_plan(plan, backend, run_dir=tmp_path / "run", on_event=on_event, **FAST)
    )
    await a_submitted.wait()
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    journal = Journal.load(tmp_path / "run")
    assert journal.tasks["b"].state == "submitting"
    assert journal.tasks["b"].attempts[0].handle is None
    assert journal.tasks["a"].attempts[0].handle.external_id.startswith("fake-")
    events = []
    result = await run_plan(
        plan,
        fake_backend_class(provider=provider),
        run_dir=tmp_path / "run",
        on_event=events.append,
        **FAST,
    )
    assert result.ok
    assert [e.task_id for e in events if e.kind == "in_doubt"] == ["b"]
    assert provider.submits == {"a": 1, "b": 1}
    # this backend can neither list nor adopt: b's resubmit may have been a second execution
    assert [t.attempts for t in result.tasks] == [1, 2]
    assert [t.reexecuted for t in result.tasks] == [0, 1]
    assert [t.in_doubt for t in result.tasks] == [0, 1]
    record = Journal.load(tmp_path / "run").tasks["b"]
    assert len(record.attempts) == 1  # one attempt, submitted twice with one key
    assert record.attempts[0].key == submission_key(journal.run_id, "b", 1)


@pytest.mark.asyncio
async def test_a_finished_run_is_not_run_again(tmp_path, provider, fake_backend_class):
    plan = simple_plan("a")
    await run_plan(plan, fake_backend_class(provider=provider), run_dir=tmp_path / "r", **FAST)
    again = await run_plan(
        plan, fake_backend_class(provider=provider), run_dir=tmp_path / "r", **FAST
    )
    assert again.ok
    assert provider.submits == {"a": 1}


@pytest.mark.asyncio
async def test_status_polls_open_tasks_without_writing(tmp_path, provider, fake_backend_class):
    provider.duration = 10
    plan = simple_plan("a", "b")
    await run_until(
        plan,
        fake_backend_class(provider=provider),
        tmp_path / "r",
        lambda e: e.kind == "submitted" and e.task_id == "b",
        poll_interval_s=60.0,  # stopped before the first poll
    )
    before = journal_bytes(tmp_path / "r")
    status = await run_status(tmp_path / "r", fake_backend_class(provider=provider))
    assert [t.status for t in status.tasks] == ["running", "running"]
    assert journal_bytes(tmp_path / "r") == before
    offline = await run_status(tmp_path / "r")
    assert [t.status for t in offline.tasks] == ["pending", "pending"]


@pytest.mark.asyncio
async def test_outputs_are_collected_even_when_the_provider_blinks(
    tmp_path, provider, fake_backend_class
):
    from altar.execution import BackendUnavailableError

    class Blinking(fake_backend_class):
        failures = 2

        async def collect_outputs(self, transfers):
            if Blinking.failures:
                Blinking.failures -= 1
                raise BackendUnavailableError("storage timed out")
            await super().collect_outputs(transfers)

    plan = Plan(
        "fake", {}, [PlanTask("a", spec("a", outputs=[Transfer(str(tmp_path / "o"), "jobs/o")]))]
    )
    result = await run_plan(plan, Blinking(provider=provider), run_dir=tmp_path / "r", **FAST)
    assert result.ok
    assert len(provider.collect_calls) == 1
    assert Blinking.failures == 0


@pytest.mark.asyncio
async def test_a_collection_error_fails_the_task(tmp_path, provider, fake_backend_class):
    class Broken(fake_backend_class):
        async def collect_outputs(self, transfers):
            raise FileNotFoundError("jobs/o: no such file")

    plan = Plan(
        "fake", {}, [PlanTask("a", spec("a", outputs=[Transfer(str(tmp_path / "o"), "jobs/o")]))]
    )
    result = await run_plan(plan, Broken(provider=provider), run_dir=tmp_path / "r", **FAST)
    [task] = result.tasks
    assert (task.status, task.reason) == ("failed", "output_collection_failed")
    assert task.detail == "FileNotFoundError: jobs/o: no such file"


@pytest.mark.asyncio
async def test_a_handle_returned_just_before_a_crash_is_kept(
    tmp_path, provider, fake_backend_class, monkeypatch
):
    runs: list[asyncio.Task] = []

    class CrashAfterSubmit(fake_backend_class):
        async def submit(self, spec):
            handle = await super().submit(spec)
            if spec.labels["task"] == "b":
                runs[0].cancel()  # the run dies the moment this submit returns
            return handle

    plan = simple_plan("a", "b", "c")
    monkeypatch.setattr(runner, "SUBMIT_GRACE_S", 0.0)
    provider.hang_submits = {"c"}  # still inside submit when the run dies
    runs.append(
        asyncio.ensure_future(
            run_plan(plan, CrashAfterSubmit(provider=provider), run_dir=tmp_path / "r", **FAST)
        )
    )
    with pytest.raises(asyncio.CancelledError):
        await runs[0]
    journal = Journal.load(tmp_path / "r")
    assert journal.tasks["b"].attempts[0].handle is not None
    result = await run_plan(
        plan, fake_backend_class(provider=provider), run_dir=tmp_path / "r", **FAST
    )
    assert result.ok
    assert provider.submits == {"a": 1, "b": 1, "c": 1}
    # c's submit had not returned when the run died: in doubt, submitted again, launched once
    assert [t.in_doubt for t in result.tasks] == [0, 0, 1]


@pytest.mark.asyncio
async def test_the_first_poll_interval_defaults_to_the_backends_own(
    tmp_path, provider, fake_backend_class, monkeypatch
):
    timeline = Timeline(fake_backend_class)
    timeline.backend_class.poll_interval_s = 0.25
    provider.duration = 3
    result = await asyncio.wait_for(
        run_plan(
            simple_plan("a"),
            timeline.backend_class(provider=provider),
            run_dir=tmp_path / "run",
            max_poll_interval_s=8.0,
            clock=timeline.clock,
        ),
        timeout=30,  # a hang guard, not a measurement
    )
    assert result.ok
    waits = [e[1] for e in timeline.entries if e[0] == "wait"]
    assert waits[:2] == [0.25, 0.25]  # the submit lands (polled at once), a change
    assert waits[2] == 0.5  # then it backs off from there


@pytest.mark.asyncio
@pytest.mark.parametrize(("backend_cap", "longest"), [(None, 8.0), (1.0, 1.0), (20.0, 8.0)])
async def test_a_backend_may_lower_the_backoff_cap(
    tmp_path, provider, fake_backend_class, backend_cap, longest
):
    # A backend whose poll is cheap (Slurm reads job records) sets max_poll_interval_s; one
    # that does not (every 0.3.0 backend) keeps the runner's own cap.
    timeline = Timeline(fake_backend_class)
    timeline.backend_class.poll_interval_s = 0.25
    if backend_cap is not None:
        timeline.backend_class.max_poll_interval_s = backend_cap
    provider.duration = 60
    result = await asyncio.wait_for(
        run_plan(
            simple_plan("a"),
            timeline.backend_class(provider=provider),
            run_dir=tmp_path / "run",
            max_poll_interval_s=8.0,
            clock=timeline.clock,
        ),
        timeout=30,  # a hang guard, not a measurement
    )
    assert result.ok
    waits = [e[1] for e in timeline.entries if e[0] == "wait"]
    assert max(waits) == longest


@pytest.mark.asyncio
async def test_a_run_ending_early_keeps_the_handle_of_a_submit_in_flight(
    tmp_path, provider, fake_backend_class
):
    """Ctrl-C while the provider is starting a task: the task runs, so its handle is kept."""
    provider.duration = 3
    provider.slow_submits = {"b": 0.2}
    plan = simple_plan("a", "b")
    seen = []
    await run_until(
        plan,
        fake_backend_class(provider=provider),
        tmp_path / "r",
        # b is still being submitted when a's submit lands
        lambda e: seen.append(e) or (e.kind == "submitted" and e.task_id == "a"),
    )
    assert [e.kind for e in seen][-2:] == ["stopping", "submitted"]
    assert "1 submit(s) in flight" in seen[-2].message
    journal = Journal.load(tmp_path / "r")
    assert journal.tasks["b"].state == "pending"
    assert journal.tasks["b"].attempts[0].handle is not None
    assert journal.tasks["b"].attempts[0].handle.external_id in provider.tasks
    events = []
    result = await run_plan(
        plan,
        fake_backend_class(provider=provider),
        run_dir=tmp_path / "r",
        on_event=events.append,
        **FAST,
    )
    assert result.ok
    assert provider.submits == {"a": 1, "b": 1}  # b ran once: polled, not submitted again
    assert [t.in_doubt for t in result.tasks] == [0, 0]
    assert not [e for e in events if e.kind == "in_doubt"]


@pytest.mark.asyncio
async def test_a_submit_that_outlasts_the_grace_is_left_in_doubt(
    tmp_path, provider, fake_backend_class, monkeypatch
):
    monkeypatch.setattr(runner, "SUBMIT_GRACE_S", 0.05)
    provider.hang_submits = {"b"}
    plan = simple_plan("a", "b")
    await run_until(
        plan,
        fake_backend_class(provider=provider),
        tmp_path / "r",
        lambda e: e.kind == "submitted" and e.task_id == "a",
    )
    journal = Journal.load(tmp_path / "r")
    assert journal.tasks["b"].state == "submitting"
    assert journal.tasks["b"].attempts[0].handle is None


@pytest.mark.asyncio
async def test_a_run_stopped_while_it_reads_a_failure_detail_resumes_that_task(
    tmp_path, provider, fake_backend_class
):
    # The poll saw the task finish, then the run stopped while asking for its log tail. The
    # journal must not say "attempt failed, task still running": a resumed run would then skip
    # every later poll of it (same state as the attempt) and never finish.
    provider.script = {"a": ["exit_3"]}
    provider.duration = 1
    asking = asyncio.Event()

    class SlowDetail(fake_backend_class):
        async def failure_detail(self, handle):
            asking.set()
            await asyncio.Event().wait()

    run = asyncio.ensure_future(
        run_plan(simple_plan("a"), SlowDetail(provider=provider), run_dir=tmp_path / "r", **FAST)
    )
    await asyncio.wait_for(asking.wait(), 5)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    record = Journal.load(tmp_path / "r").tasks["a"]
    assert record.state == record.last.state
    result = await asyncio.wait_for(
        run_plan(
            simple_plan("a"), fake_backend_class(provider=provider), run_dir=tmp_path / "r", **FAST
        ),
        5,
    )
    assert [(t.status, t.reason) for t in result.tasks] == [("failed", "exit_3")]
    assert provider.submits == {"a": 1}


@pytest.mark.asyncio
async def test_submits_to_an_unreachable_provider_back_off(tmp_path, provider, fake_backend_class):
    # "the run backs off (up to 5 s between tries)": a submit that finds the provider down
    # must not be retried every poll_interval_s for as long as the provider stays down
    provider.script = {"a": ["unavailable"] * 12 + ["ok"]}
    tries: list[float] = []

    class Timed(fake_backend_class):
        async def submit(self, spec):
            tries.append(asyncio.get_running_loop().time())
            return await super().submit(spec)

    result = await asyncio.wait_for(
        run_plan(
            simple_plan("a"),
            Timed(provider=provider),
            run_dir=tmp_path / "r",
            poll_interval_s=0.005,
            max_poll_interval_s=0.04,
        ),
        10,
    )
    assert result.ok
    gaps = [later - earlier for earlier, later in itertools.pairwise(tries)]
    assert len(gaps) == 12
    assert min(gaps[6:]) >= 0.03, gaps  # backed off to max_poll_interval_s


@pytest.mark.asyncio
async def test_a_submit_refused_during_a_poll_is_not_retried_in_the_same_tick(
    tmp_path, provider, fake_backend_class
):
    # The refusal of a's submit lands while the next tick's poll (of b) is in flight, as it
    # can on a loaded machine: that tick must not submit a again at once, nor reset the backoff.
    provider.script = {"a": ["unavailable"] * 8 + ["ok"]}
    provider.duration = 40
    tries: list[float] = []
    polling = asyncio.Event()

    class RefusedDuringPoll(fake_backend_class):
        async def submit(self, spec):
            if spec.labels.get("task") == "a" and len(tries) < 8:
                polling.clear()
                await polling.wait()  # the refusal comes back during the next poll
            if spec.labels.get("task") == "a":
                tries.append(asyncio.get_running_loop().time())
            return await super().submit(spec)

        async def poll(self, handles):
            polling.set()
            await asyncio.sleep(0.002)
            return await super().poll(handles)

    result = await asyncio.wait_for(
        run_plan(
            simple_plan("a", "b"),
            RefusedDuringPoll(provider=provider),
            run_dir=tmp_path / "r",
            poll_interval_s=0.005,
            max_poll_interval_s=0.04,
        ),
        20,
    )
    assert result.ok
    gaps = [later - earlier for earlier, later in itertools.pairwise(tries)]
    assert len(gaps) == 8
    assert min(gaps[5:]) >= 0.03, gaps  # backed off to max_poll_interval_s


@pytest.mark.asyncio
async def test_collecting_from_an_unreachable_provider_is_not_a_busy_loop(
    tmp_path, provider, fake_backend_class
):
    # a's outputs cannot be collected for a while (provider down), b holds the only slot and c
    # waits for it: the run must wait between tries, not spin on collect_outputs and capacity.
    # On a fake clock only the run's own waits move time, so a busy loop never gets past the
    # outage and the call cap below ends it.
    from altar.execution import BackendUnavailableError

    provider.slots = 1
    provider.duration = 2
    timeline = Timeline(fake_backend_class)
    entries = timeline.entries

    class DownForAWhile(timeline.backend_class):
        async def collect_outputs(self, transfers):
            entries.append(("collect", timeline.clock.time))
            if sum(1 for e in entries if e[0] == "collect") > 200:
                raise AssertionError("collect_outputs called 200 times: a busy loop")
            if timeline.clock.time < 0.3:
                raise BackendUnavailableError("fake provider is down")
            await super().collect_outputs(transfers)

    plan = Plan(
        "fake",
        {},
        [
            PlanTask(k, spec(k, outputs=[Transfer(str(tmp_path / k), f"out/{k}")]))
            for k in ("a", "b", "c")
        ],
    )
    result = await asyncio.wait_for(
        run_plan(
            plan,
            DownForAWhile(provider=provider),
            run_dir=tmp_path / "r",
            poll_interval_s=0.01,
            max_poll_interval_s=0.04,
            clock=timeline.clock,
        ),
        30,  # a hang guard, not a measurement
    )
    assert result.ok
    collects = sum(1 for e in entries if e[0] == "collect")
    pauses = sum(1 for e in entries if e[0] == "wait" and e[1] > 0 and not e[2])
    # at most two collects per tick of three tasks; a busy loop makes hundreds without a pause
    assert collects <= 6 * (pauses + 1), f"{collects} collect calls, {pauses} pauses"
    assert pauses >= 0.3 / 0.04  # the outage was waited out, at most max_poll_interval_s a time


def one_output_plan(tmp_path) -> Plan:
    out = Transfer(str(tmp_path / "out/a.txt"), "jobs/J/a.txt")
    return Plan("fake", {}, [PlanTask("a", spec("a", outputs=[out]))])


@pytest.mark.asyncio
async def test_a_full_disk_while_collecting_stops_the_run_and_keeps_the_success(
    tmp_path, provider, fake_backend_class
):
    provider.duration = 1
    provider.collect_errors = [OSError(errno.ENOSPC, "No space left on device")]
    plan = one_output_plan(tmp_path)
    with pytest.raises(runner.OutputCollectionError, match="free space and resume"):
        await run_plan(plan, fake_backend_class(provider=provider), run_dir=tmp_path / "r", **FAST)
    record = Journal.load(tmp_path / "r").tasks["a"]
    assert record.state == "succeeded"
    assert not record.outputs_collected
    result = await run_plan(
        plan, fake_backend_class(provider=provider), run_dir=tmp_path / "r", **FAST
    )
    assert result.ok
    assert provider.submits == {"a": 1}  # collected on resume, not run again
    assert len(provider.collect_calls) == 2


@pytest.mark.asyncio
async def test_another_collection_error_fails_the_task_for_good(
    tmp_path, provider, fake_backend_class
):
    provider.duration = 1
    provider.collect_errors = [PermissionError(errno.EACCES, "Permission denied")]
    result = await run_plan(
        one_output_plan(tmp_path),
        fake_backend_class(provider=provider),
        run_dir=tmp_path / "r",
        **FAST,
    )
    (task,) = result.tasks
    assert (task.status, task.reason) == ("failed", "output_collection_failed")
    assert "Permission denied" in task.detail


@pytest.mark.asyncio
async def test_a_malformed_input_uri_is_a_staging_error_also_when_progress_is_shown(
    tmp_path, provider, fake_backend_class
):
    """urlsplit refuses "s3://[bucket/w.bin"; the size probe for progress must not crash on it."""

    class Refuses(fake_backend_class):
        async def stage_inputs(self, transfers):
            raise ValueError(f"cannot stage {transfers[0].uri!r}")

    weights = Transfer("s3://[bucket/w.bin", "models/w.bin", digest=DIGEST)
    plan = Plan("fake", {}, [PlanTask("a", spec("a", inputs=[weights]))])
    with pytest.raises(StagingError, match=r"cannot stage 's3://\[bucket/w\.bin'"):
        await run_plan(
            plan,
            Refuses(provider=provider),
            run_dir=tmp_path / "r",
            on_event=lambda event: None,
            **FAST,
        )
