"""Exactly once (issue 13): submission keys, adoption, orphan removal, litter, true ATTEMPTS.

Against the fakes in conftest.py: ``FakeBackend`` mints a fresh task for every submit and cannot
list (an altar 0.3.0 backend); ``AdoptingFakeBackend`` finds a task by its submission key and
lists a run's tasks, like a provider with labels.
"""

from __future__ import annotations

import asyncio
import itertools
import os

import pytest
from altar.execution import (
    ContainerTaskSpec,
    TaskState,
    TaskStatus,
    Transfer,
)
from altar.execution.atomic import temp_path
from altar.execution.labels import (
    LABEL_ATTEMPT,
    LABEL_SUBMISSION,
    LABEL_TASK,
    submission_key,
    submission_labels,
)
from altar.execution.plans.plan import Plan, PlanTask
from altar.execution.run import runner
from altar.execution.run.progress import REEXECUTED_NOTE, format_table
from altar.execution.run.runner import run_plan
from altar.execution.state.journal import Journal

FAST = {"poll_interval_s": 0.0, "max_poll_interval_s": 0.0}


def spec(task_id: str, **changes) -> ContainerTaskSpec:
    values = {
        "kind": "fold",
        "image": "busybox:latest",
        "command": ["sh", "-c", f"echo {task_id}"],
        "labels": {"task": task_id},
    }
    values.update(changes)
    return ContainerTaskSpec(**values)


def simple_plan(*keys: str) -> Plan:
    return Plan("fake", {}, [PlanTask(k, spec(k)) for k in keys])


async def killed_while_b_is_in_submit(plan, backend, run_dir, monkeypatch) -> Journal:
    """Run until a was submitted and b's submit is in flight, then stop with no grace."""
    monkeypatch.setattr(runner, "SUBMIT_GRACE_S", 0.0)
    a_submitted = asyncio.Event()

    def on_event(event):
        if event.kind == "submitted" and event.task_id == "a":
            a_submitted.set()

    task = asyncio.ensure_future(
        run_plan(plan, backend, run_dir=run_dir, on_event=on_event, **FAST)
    )
    await a_submitted.wait()
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    monkeypatch.undo()
    journal = Journal.load(run_dir)
    assert journal.tasks["b"].state == "submitting"
    assert journal.tasks["b"].attempts[0].handle is None
    return journal


@pytest.mark.asyncio
async def test_every_submit_carries_the_run_identity_and_its_key_is_durable_first(
    tmp_path, provider, fake_backend_class
):
    provider.script = {"flaky": ["timeout", "ok"]}
    seen = []
    run_dir = tmp_path / "run"

    class Checking(fake_backend_class):
        async def submit(self, spec):
            on_disk = Journal.load(run_dir)  # what a crash right now would leave
            task_id = spec.labels[LABEL_TASK]
            attempt = on_disk.tasks[task_id].attempts[-1]
            seen.append((task_id, dict(spec.labels), attempt.key, on_disk.run_id))
            return await super().submit(spec)

    plan = Plan("fake", {}, [PlanTask("a", spec("a")), PlanTask("flaky", spec("flaky"))])
    result = await run_plan(plan, Checking(provider=provider), run_dir=run_dir, **FAST)
    assert result.ok
    run_id = Journal.load(run_dir).run_id
    assert len(run_id) == 32
    assert result.run_id == run_id
    by_attempt = {(task, labels[LABEL_ATTEMPT]): (labels, key) for task, labels, key, _ in seen}
    assert sorted(by_attempt) == [("a", "1"), ("flaky", "1"), ("flaky", "2")]
    for (task, attempt), (labels, journaled_key) in by_attempt.items():
        assert labels == {"task": task, **submission_labels(run_id, task, int(attempt))}
        assert journaled_key == labels[LABEL_SUBMISSION]  # journaled before submit was called
    assert by_attempt["flaky", "1"][1] != by_attempt["flaky", "2"][1]
    assert {r for *_, r in seen} == {run_id}
    assert plan.tasks[0].spec.labels == {"task": "a"}  # the plan's spec is not changed


@pytest.mark.asyncio
async def test_an_accepted_but_unanswered_submit_is_adopted_on_resume_not_run_again(
    tmp_path, provider, adopting_backend_class, monkeypatch
):
    provider.slow_submits = {"b": 60.0}  # accepted (the task runs), the answer never arrives
    plan = simple_plan("a", "b")
    run_dir = tmp_path / "run"
    first = await killed_while_b_is_in_submit(
        plan, adopting_backend_class(provider=provider), run_dir, monkeypatch
    )
    events = []
    result = await run_plan(
        plan,
        adopting_backend_class(provider=provider),
        run_dir=run_dir,
        on_event=events.append,
        **FAST,
    )
    assert result.ok
    assert provider.executions("b") == 1  # the task the lost submit started, nothing more
    assert provider.submits == {"a": 1, "b": 1}
    assert [e.task_id for e in events if e.kind == "adopted"] == ["b"]
    assert provider.list_calls == [first.run_id, first.run_id]  # on resume and at the end
    assert [(t.attempts, t.in_doubt, t.reexecuted) for t in result.tasks] == [(1, 0, 0), (1, 1, 0)]
    attempt = Journal.load(run_dir).tasks["b"].attempts[0]
    assert attempt.adopted
    assert attempt.key == submission_key(first.run_id, "b", 1)
    assert not [t for t in provider.tasks.values() if not t.removed]  # all cleaned up


@pytest.mark.asyncio
async def test_an_adopted_task_its_submit_created_but_never_started_is_started(
    tmp_path, provider, adopting_backend_class, monkeypatch
):
    # Found by tests/crash: a runner killed between a container's create and its start left a
    # container that the resumed run adopted from the listing and nobody ever started (the
    # in-process backend: a record without its supervisor, polled as pending for ever).
    started: set[str] = set()

    class StartsInSubmit(adopting_backend_class):
        """Like Docker: submit creates, then starts; a submit of the key starts a created one."""

        async def submit(self, spec):
            handle = await super().submit(spec)
            started.add(handle.external_id)
            return handle

        async def poll(self, handles):
            statuses = await super().poll(handles)
            return [
                s if s.handle.external_id in started else TaskStatus(s.handle, TaskState.PENDING)
                for s in statuses
            ]

    provider.slow_submits = {"b": 60.0}  # created; the start never comes: the runner dies
    plan = simple_plan("a", "b")
    run_dir = tmp_path / "run"
    await killed_while_b_is_in_submit(plan, StartsInSubmit(provider=provider), run_dir, monkeypatch)
    assert len(started) == 1  # a only
    resumed = run_plan(plan, StartsInSubmit(provider=provider), run_dir=run_dir, **FAST)
    result = await asyncio.wait_for(resumed, timeout=30)  # before the fix: pending for ever
    assert result.ok
    assert provider.executions("b") == 1
    assert [t.attempts for t in result.tasks] == [1, 1]
    assert Journal.load(run_dir).tasks["b"].attempts[0].adopted


@pytest.mark.asyncio
async def test_a_backend_that_adopts_but_cannot_list_gets_the_journaled_key_again(
    tmp_path, provider, adopting_backend_class, monkeypatch
):
    class NoListing(adopting_backend_class):
        async def list_submissions(self, run):
            return None

    provider.slow_submits = {"b": 60.0}
    plan = simple_plan("a", "b")
    run_dir = tmp_path / "run"
    await killed_while_b_is_in_submit(plan, NoListing(provider=provider), run_dir, monkeypatch)
    result = await run_plan(plan, NoListing(provider=provider), run_dir=run_dir, **FAST)
    assert result.ok
    assert provider.executions("b") == 1
    assert len(provider.adoptions) == 1  # the resubmit's key found the first task
    assert [(t.attempts, t.reexecuted) for t in result.tasks] == [(1, 0), (1, 0)]


@pytest.mark.asyncio
async def test_a_listing_that_shows_nothing_proves_the_lost_submit_never_arrived(
    tmp_path, provider, adopting_backend_class, monkeypatch
):
    provider.hang_submits = {"b"}  # the provider never saw it
    plan = simple_plan("a", "b")
    run_dir = tmp_path / "run"
    await killed_while_b_is_in_submit(
        plan, adopting_backend_class(provider=provider), run_dir, monkeypatch
    )

    class Plain(adopting_backend_class):
        adopts_submissions = False  # can list, cannot adopt: the listing alone decides

    result = await run_plan(plan, Plain(provider=provider), run_dir=run_dir, **FAST)
    assert result.ok
    assert provider.executions("b") == 1
    assert [(t.attempts, t.in_doubt, t.reexecuted) for t in result.tasks] == [(1, 0, 0), (1, 1, 0)]


@pytest.mark.asyncio
async def test_a_resubmit_nobody_can_check_is_counted_and_marked(
    tmp_path, provider, fake_backend_class, monkeypatch
):
    provider.hang_submits = {"b"}
    plan = simple_plan("a", "b")
    run_dir = tmp_path / "run"
    await killed_while_b_is_in_submit(
        plan, fake_backend_class(provider=provider), run_dir, monkeypatch
    )
    result = await run_plan(plan, fake_backend_class(provider=provider), run_dir=run_dir, **FAST)
    assert [(t.attempts, t.reexecuted) for t in result.tasks] == [(1, 0), (2, 1)]
    table = format_table(result.tasks).splitlines()
    assert table[1].split()[:4] == ["a", "fold", "succeeded", "1"]
    assert table[2].split()[:4] == ["b", "fold", "succeeded", "2*"]
    assert table[-1] == REEXECUTED_NOTE
    assert REEXECUTED_NOTE not in format_table(result.tasks[:1])


def orphan(provider, run_id: str, task_id: str, *, state_steps: int = 0) -> str:
    """Put a task of ``run_id`` on the provider that no journal knows (like a lost duplicate)."""
    labels = {"task": f"ghost-{task_id}", **submission_labels(run_id, task_id, 7)}
    external_id = f"orphan-{task_id}-{run_id[:4]}"
    provider.plant(external_id, spec(task_id, labels=labels), steps=state_steps)
    return external_id


@pytest.mark.asyncio
async def test_provider_objects_of_this_run_the_journal_does_not_own_are_removed(
    tmp_path, provider, adopting_backend_class
):
    plan = simple_plan("a", "b")
    run_dir = tmp_path / "run"

    class Duplicating(adopting_backend_class):
        """A provider that created a second task for one create (the journal gets one)."""

        async def submit(self, spec):
            handle = await super().submit(spec)
            if spec.labels["task"] == "a" and "dup-a" not in provider.tasks:
                # finished already, so the fake's "every live task is polled" check holds
                provider.plant("dup-a", spec, steps=provider.duration)
            return handle

    events = []
    result = await run_plan(
        plan, Duplicating(provider=provider), run_dir=run_dir, on_event=events.append, **FAST
    )
    assert result.ok
    journal = Journal.load(run_dir)
    assert provider.tasks["dup-a"].removed  # found at the end, cancelled and cleaned up
    assert "dup-a" in provider.cancelled
    assert [entry["external_id"] for entry in journal.removed] == ["dup-a"]
    assert journal.removed[0]["task"] == "a"
    assert [e.kind for e in events].count("removed") == 1
    # on resume: one of this run's, one of another run's (never touched)
    ours = orphan(provider, journal.run_id, "late")
    theirs = orphan(provider, "f" * 32, "other")
    events.clear()
    await run_plan(
        plan, adopting_backend_class(provider=provider), run_dir=run_dir, on_event=events.append
    )
    assert provider.tasks[ours].removed
    assert not provider.tasks[theirs].removed
    assert theirs not in provider.cancelled
    assert [entry["external_id"] for entry in Journal.load(run_dir).removed] == ["dup-a", ours]


@pytest.mark.asyncio
async def test_a_listing_that_fails_is_reported_and_the_run_goes_on(
    tmp_path, provider, adopting_backend_class
):
    class Broken(adopting_backend_class):
        async def list_submissions(self, run):
            raise PermissionError("listing refused")

    events = []
    result = await run_plan(
        simple_plan("a"),
        Broken(provider=provider),
        run_dir=tmp_path / "r",
        on_event=events.append,
        **FAST,
    )
    assert result.ok
    assert [e.message for e in events if e.kind == "cleanup_failed"] == [
        "list_submissions: PermissionError: listing refused"
    ]


@pytest.mark.asyncio
async def test_resume_removes_only_the_temporary_files_this_runs_killed_processes_left(
    tmp_path, provider, fake_backend_class
):
    out = tmp_path / "out dir"
    plan = Plan(
        "fake",
        {},
        [PlanTask("a", spec("a", outputs=[Transfer(str(out / "a.txt"), "jobs/a.txt")]))],
    )
    provider.root = tmp_path / "volume"
    run_dir = tmp_path / "run"
    await run_plan(plan, fake_backend_class(provider=provider), run_dir=run_dir, **FAST)
    journal = Journal.load(run_dir)
    dead = 2**22 + 12345  # above any pid_max default: no live process has it
    journal.pids = [dead]  # as if a killed process had driven it
    journal.save()
    ours = [
        temp_path(run_dir / "journal.json", pid=dead),
        temp_path(out / "a.txt", pid=dead),
        out / f"a.txt.{dead}.0123456789abcdef.partial",  # what altar-core 0.4 wrote
    ]
    not_ours = [
        run_dir / "notes.tmp",
        out / "results.partial",
        temp_path(out / "a.txt", pid=dead + 1),  # another process, not of this run
        tmp_path / temp_path("x", pid=dead).name,  # not a directory this run writes
    ]
    for path in ours + not_ours:
        path.write_bytes(b"x")
    events = []
    await run_plan(
        plan,
        fake_backend_class(provider=provider),
        run_dir=run_dir,
        on_event=events.append,
        **FAST,
    )
    assert [p for p in ours if p.exists()] == []
    assert [p for p in not_ours if not p.exists()] == []
    assert [e.kind for e in events].count("litter_removed") == 1
    assert Journal.load(run_dir).pids == [dead, os.getpid()]


@pytest.mark.asyncio
async def test_a_journal_snapshot_left_before_its_writer_journaled_its_pid_is_removed(
    tmp_path, provider, fake_backend_class
):
    # A process killed inside the first snapshot of a new run (or the one that records its
    # pid) leaves a temporary file whose pid no journal names (found by tests/crash).
    plan = simple_plan("a")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    never_journaled = 2**22 + 54321
    left = temp_path(run_dir / "journal.json", pid=never_journaled)
    left.write_bytes(b"{")
    result = await run_plan(plan, fake_backend_class(provider=provider), run_dir=run_dir, **FAST)
    assert result.ok
    assert not left.exists()
    assert never_journaled not in Journal.load(run_dir).pids


def test_the_stager_removes_leftovers_of_the_runs_earlier_processes(tmp_path):
    import hashlib

    from altar.execution.atomic import sweeping_for
    from altar.execution.digests.stager import LocalStager

    root = tmp_path / "root"
    (root / "m").mkdir(parents=True)
    stale = temp_path(root / "m" / "w.bin", pid=4242)
    foreign = temp_path(root / "m" / "w.bin", pid=4343)
    for path in (stale, foreign):
        path.write_bytes(b"half a copy")
    source = tmp_path / "w.bin"
    source.write_bytes(b"weights")
    digest = "sha256:" + hashlib.sha256(b"weights").hexdigest()
    stager = LocalStager(lambda p: root / p, backend="t")
    with sweeping_for([4242]):
        stager.stage(Transfer(str(source), "m/w.bin", digest=digest))
    assert not stale.exists()
    assert foreign.exists()


@pytest.mark.asyncio
async def test_a_cancelled_runs_stray_objects_are_removed_too(
    tmp_path, provider, adopting_backend_class
):
    provider.duration = 1000
    plan = simple_plan("a")
    run_dir = tmp_path / "run"
    submitted = asyncio.Event()

    def on_event(event):
        if event.kind == "submitted":
            submitted.set()

    task = asyncio.ensure_future(
        run_plan(
            plan,
            adopting_backend_class(provider=provider),
            run_dir=run_dir,
            on_event=on_event,
            **FAST,
        )
    )
    await submitted.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    stray = orphan(provider, Journal.load(run_dir).run_id, "a", state_steps=1)
    assert (
        await runner.cancel_run(run_dir, adopting_backend_class(provider=provider)) == "cancelled"
    )
    assert provider.tasks[stray].removed
    assert all(t.removed for t in provider.tasks.values())


@pytest.mark.asyncio
async def test_killed_again_and_again_every_task_runs_exactly_once(
    tmp_path, provider, adopting_backend_class, monkeypatch
):
    """A 40-task plan killed (no grace, like SIGKILL) at 20 moments, resumed each time."""
    monkeypatch.setattr(runner, "SUBMIT_GRACE_S", 0.0)
    provider.duration = 3
    provider.slots = 8
    tasks = []
    for i in range(40):
        after = (f"t{i - 5}",) if i >= 5 and i % 3 == 0 else ()
        tasks.append(PlanTask(f"t{i}", spec(f"t{i}"), after))
    plan = Plan("fake", {}, tasks)
    run_dir = tmp_path / "run"
    kills = 0
    result = None
    moments = itertools.cycle([2, 3, 2, 4, 3, 5, 2, 3])
    for _ in range(300):  # a bound, not a measurement: each run gets further than the last
        stop_at = next(moments)
        # every submit is accepted at once and answered a little later, some later than others
        # of their batch: a kill on an event of the first to land lands inside the others
        provider.slow_submits.update({f"t{i}": 0.002 * (1 + i % 3) for i in range(40)})
        running: list[asyncio.Task] = []
        seen = 0

        def on_event(event, limit=stop_at, running=running):
            nonlocal seen
            seen += 1
            if seen == limit and running:
                running[0].cancel()

        task = asyncio.ensure_future(
            run_plan(
                plan,
                adopting_backend_class(provider=provider),
                run_dir=run_dir,
                on_event=on_event,
                **FAST,
            )
        )
        running.append(task)
        try:
            result = await task
            break
        except asyncio.CancelledError:
            kills += 1
    print(f"kills={kills}", f"in_doubt={sum(t.in_doubt for t in result.tasks)}")
    assert kills >= 20
    assert result is not None
    assert result.ok
    executions = {f"t{i}": provider.executions(f"t{i}") for i in range(40)}
    assert executions == {f"t{i}": 1 for i in range(40)}  # no double, no lost task
    assert [t.id for t in result.tasks if t.attempts != 1 or t.reexecuted] == []
    assert [t.id for t in provider.tasks.values() if not t.removed] == []  # nothing left
    assert sum(t.in_doubt for t in result.tasks) > 0  # the kills did land inside submits


@pytest.mark.asyncio
async def test_a_submit_cut_off_as_unavailable_and_then_killed_is_adopted_not_removed(
    tmp_path, provider, adopting_backend_class, monkeypatch
):
    # The provider created b's task, then the connection dropped mid-answer, which a backend
    # reports as BackendUnavailableError; the runner is killed before it tries b again. The
    # resumed run must adopt that task by its key, not remove it as unowned and start another.
    from altar.execution import BackendUnavailableError

    monkeypatch.setattr(runner, "SUBMIT_GRACE_S", 0.0)
    cut_off = asyncio.Event()

    class DropsTheAnswer(adopting_backend_class):
        async def submit(self, spec):
            handle = await super().submit(spec)
            if spec.labels[LABEL_TASK] == "b" and not cut_off.is_set():
                cut_off.set()
                raise BackendUnavailableError("connection reset while reading the answer")
            return handle

    plan = simple_plan("a", "b")
    run_dir = tmp_path / "run"

    def killed_when_refused(event):  # the kill lands before b is tried again
        if event.kind == "backend_unavailable":
            task.cancel()

    task = asyncio.ensure_future(
        run_plan(
            plan,
            DropsTheAnswer(provider=provider),
            run_dir=run_dir,
            on_event=killed_when_refused,
            **FAST,
        )
    )
    with pytest.raises(asyncio.CancelledError):
        await task
    monkeypatch.undo()
    assert provider.executions("b") == 1
    assert provider.adoptions == []  # b was not tried again before the kill
    events = []
    result = await run_plan(
        plan,
        adopting_backend_class(provider=provider),
        run_dir=run_dir,
        on_event=events.append,
        **FAST,
    )
    assert result.ok
    assert provider.executions("b") == 1  # adopted, never started a second time
    assert [e.task_id for e in events if e.kind == "removed"] == []
    assert [t.reexecuted for t in result.tasks] == [0, 0]


@pytest.mark.asyncio
async def test_an_outage_at_submit_does_not_count_a_re_execution_in_the_same_process(
    tmp_path, provider, fake_backend_class
):
    # An unavailable provider at submit is tried again without using an attempt, and (in the
    # same process) without marking the task as possibly run twice.
    provider.script = {"b": ["unavailable", "unavailable", "ok"]}
    result = await run_plan(
        simple_plan("a", "b"), fake_backend_class(provider=provider), run_dir=tmp_path / "r", **FAST
    )
    assert result.ok
    assert [(t.attempts, t.reexecuted) for t in result.tasks] == [(1, 0), (1, 0)]
