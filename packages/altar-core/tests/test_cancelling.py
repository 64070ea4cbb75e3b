"""Cancelling a run and cleaning up its tasks (altar.execution.run.cancelling)."""

from __future__ import annotations

import asyncio

import pytest
from altar.execution.run import runner
from altar.execution.run.runner import (
    CANCEL_REQUEST,
    cancel_run,
    run_plan,
    run_status,
)
from altar.execution.state.journal import Journal

from .runkit import FAST, run_until, simple_plan


@pytest.mark.asyncio
async def test_cancel_a_run_no_process_drives(tmp_path, provider, fake_backend_class):
    provider.duration = 10
    plan = simple_plan("a", "b")
    await run_until(
        plan,
        fake_backend_class(provider=provider),
        tmp_path / "r",
        lambda e: e.kind == "submitted" and e.task_id == "b",
    )
    outcome = await cancel_run(tmp_path / "r", fake_backend_class(provider=provider))
    assert outcome == "cancelled"
    assert sorted(provider.cancelled) == sorted(provider.tasks)
    status = await run_status(tmp_path / "r")
    assert [t.status for t in status.tasks] == ["cancelled", "cancelled"]
    assert provider.cleanup_calls


@pytest.mark.asyncio
async def test_cancel_a_running_run_asks_its_process(tmp_path, provider, fake_backend_class):
    provider.duration = 1000
    plan = simple_plan("a", "b")
    requested = []

    def on_event(event):
        if event.kind == "submitted" and event.task_id == "b" and not requested:
            requested.append(asyncio.ensure_future(cancel_run(tmp_path / "r")))

    result = await run_plan(
        plan,
        fake_backend_class(provider=provider),
        run_dir=tmp_path / "r",
        on_event=on_event,
        poll_interval_s=0.01,
        max_poll_interval_s=0.01,
    )
    assert await requested[0] == "requested"
    assert [t.status for t in result.tasks] == ["cancelled", "cancelled"]
    assert sorted(provider.cancelled) == sorted(provider.tasks)
    assert not (tmp_path / "r" / CANCEL_REQUEST).exists()


@pytest.mark.asyncio
async def test_spec_named_handles_are_cleaned_up_once(tmp_path):
    from altar.execution import ExecutionBackend, TaskFailure, TaskHandle, TaskState, TaskStatus

    class SpecNamed(ExecutionBackend):
        """Names each task by its spec, as the Kubernetes backend does: every attempt, one id."""

        name = "spec-named"
        input_digest_verification = "task"

        def __init__(self):
            self.submits = 0
            self.cleaned = []

        async def submit(self, spec):
            self.submits += 1
            return TaskHandle(self.name, spec.labels["task"], dict(spec.labels))

        async def poll(self, handles):
            if self.submits == 1:
                failure = TaskFailure("job_failed", "evicted")
                return [TaskStatus(h, TaskState.FAILED, failure) for h in handles]
            return [TaskStatus(h, TaskState.SUCCEEDED) for h in handles]

        async def cleanup(self, handles):
            self.cleaned.append([h.external_id for h in handles])

    backend = SpecNamed()
    result = await run_plan(simple_plan("a"), backend, run_dir=tmp_path / "r", **FAST)
    assert result.tasks[0].attempts == 2
    assert result.ok
    assert backend.cleaned == [["a"]]
    modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "r").iterdir()}
    assert modes == {
        "journal.json": 0o600,
        "journal.log": 0o600,
        "lock": 0o600,
        "summary.json": 0o600,
    }


@pytest.mark.asyncio
async def test_cancel_reaches_every_task_at_once(tmp_path, provider, fake_backend_class):
    provider.duration = 1000
    plan = simple_plan(*(f"t{i}" for i in range(40)))
    await run_until(
        plan,
        fake_backend_class(provider=provider),
        tmp_path / "r",
        lambda e: e.kind == "submitted" and e.task_id == "t39",
    )
    assert await cancel_run(tmp_path / "r", fake_backend_class(provider=provider)) == "cancelled"
    assert sorted(provider.cancelled) == sorted(provider.tasks)
    assert provider.max_cancels_in_flight == 32  # bounded, not one by one
    assert Journal.load(tmp_path / "r").finished


@pytest.mark.asyncio
async def test_a_failed_cancel_leaves_the_task_open_and_a_second_cancel_retries_it(
    tmp_path, provider, fake_backend_class
):
    provider.duration = 1000
    plan = simple_plan("a", "b", "c")
    await run_until(
        plan,
        fake_backend_class(provider=provider),
        tmp_path / "r",
        lambda e: e.kind == "submitted" and e.task_id == "c",
    )
    provider.unavailable_cancels = 1
    with pytest.raises(runner.CancelIncompleteError, match="could not cancel 1 task") as caught:
        await cancel_run(tmp_path / "r", fake_backend_class(provider=provider))
    (still_open,) = caught.value.task_ids
    status = await run_status(tmp_path / "r")
    statuses = {t.id: t.status for t in status.tasks}
    assert statuses.pop(still_open) in ("pending", "running")  # as last seen: it may still run
    assert list(statuses.values()) == ["cancelled", "cancelled"]
    journal = Journal.load(tmp_path / "r")
    assert not journal.finished
    assert not journal.tasks[still_open].cleaned
    assert await cancel_run(tmp_path / "r", fake_backend_class(provider=provider)) == "cancelled"
    assert sorted(provider.cancelled) == sorted(provider.tasks)
    assert [t.status for t in (await run_status(tmp_path / "r")).tasks] == ["cancelled"] * 3


@pytest.mark.asyncio
async def test_a_driven_run_reports_a_cancel_that_failed(tmp_path, provider, fake_backend_class):
    provider.duration = 1000
    provider.unavailable_cancels = 1
    plan = simple_plan("a", "b")
    seen = []

    def on_event(event):
        seen.append(event)
        if event.kind == "submitted" and event.task_id == "b":
            (tmp_path / "r" / CANCEL_REQUEST).write_text("cancel\n")

    result = await run_plan(
        plan,
        fake_backend_class(provider=provider),
        run_dir=tmp_path / "r",
        on_event=on_event,
        **FAST,
    )
    assert sorted(t.status for t in result.tasks) == ["cancelled", "running"]
    (failed,) = [e for e in seen if e.kind == "cancel_failed"]
    assert "BackendUnavailableError: fake provider refused the connection" in failed.message
    assert not Journal.load(tmp_path / "r").finished


@pytest.mark.asyncio
async def test_a_cancel_stopped_midway_keeps_what_it_cancelled(
    tmp_path, provider, fake_backend_class
):
    # Ctrl-C on `altar cancel` while one cancel hangs: the tasks already cancelled on the
    # provider must be journaled as cancelled, not left "running"
    provider.duration = 10
    plan = simple_plan("a", "b")
    await run_until(
        plan,
        fake_backend_class(provider=provider),
        tmp_path / "r",
        lambda e: e.kind == "submitted" and e.task_id == "b",
        poll_interval_s=60.0,
    )
    a_id = Journal.load(tmp_path / "r").tasks["a"].last.handle.external_id
    a_done = asyncio.Event()

    class HangsOnB(fake_backend_class):
        async def cancel(self, handle):
            if handle.external_id != a_id:
                await asyncio.Event().wait()
            await super().cancel(handle)
            a_done.set()

    task = asyncio.ensure_future(cancel_run(tmp_path / "r", HangsOnB(provider=provider)))
    await asyncio.wait_for(a_done.wait(), 5)
    await asyncio.sleep(0.05)  # a's cancel returns and is marked; b's hangs
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    states = {k: r.state for k, r in Journal.load(tmp_path / "r").tasks.items()}
    assert states == {"a": "cancelled", "b": "pending"}


@pytest.mark.asyncio
async def test_a_task_cancelled_while_waiting_for_its_retry_reads_cancelled(
    tmp_path, provider, fake_backend_class
):
    # attempt 1 timed out; the run was cancelled before attempt 2 was submitted: the task's
    # reason is "cancelled", not the earlier attempt's "timeout"
    from altar.execution import BackendUnavailableError

    provider.script = {"a": ["timeout"]}
    provider.duration = 1

    class NoRetrySubmit(fake_backend_class):
        async def submit(self, spec):
            if provider.submits.get("a"):
                (tmp_path / "r" / CANCEL_REQUEST).write_text("cancel\n")
                raise BackendUnavailableError("down")  # stays queued until the cancel
            return await super().submit(spec)

    result = await asyncio.wait_for(
        run_plan(
            simple_plan("a"), NoRetrySubmit(provider=provider), run_dir=tmp_path / "r", **FAST
        ),
        5,
    )
    [task] = result.tasks
    assert (task.status, task.reason, task.attempts) == ("cancelled", "cancelled", 1)
    assert task.detail == "cancelled by `altar cancel`"


@pytest.mark.asyncio
async def test_a_cancel_request_is_not_held_up_by_a_stuck_submit(
    tmp_path, provider, fake_backend_class, monkeypatch
):
    monkeypatch.setattr(runner, "SUBMIT_GRACE_S", 0.05)
    provider.duration = 1000
    provider.hang_submits = {"b"}  # the provider never answers this one
    plan = simple_plan("a", "b")

    def on_event(event):
        if event.kind == "submitted" and event.task_id == "a":
            (tmp_path / "r" / CANCEL_REQUEST).write_text("cancel\n")

    result = await asyncio.wait_for(
        run_plan(
            plan,
            fake_backend_class(provider=provider),
            run_dir=tmp_path / "r",
            on_event=on_event,
            **FAST,
        ),
        timeout=10,
    )
    assert [t.status for t in result.tasks] == ["cancelled", "cancelled"]
    assert len(provider.cancelled) == 1  # a's task; b's submit never returned a handle
    # b may have been started by the provider: the run says so rather than claim it cancelled
    assert [t.in_doubt for t in result.tasks] == [0, 1]
    assert "could not be cancelled" in result.tasks[1].detail


@pytest.mark.asyncio
async def test_cancel_with_a_failed_cancel_never_cleans_up_the_task_still_running(
    tmp_path, provider, fake_backend_class
):
    provider.duration = 1000
    plan = simple_plan("a", "b")
    await run_until(
        plan,
        fake_backend_class(provider=provider),
        tmp_path / "r",
        lambda e: e.kind == "state" and e.task_id == "b",
    )
    provider.unavailable_cancels = 1
    with pytest.raises(runner.CancelIncompleteError) as caught:
        await cancel_run(tmp_path / "r", fake_backend_class(provider=provider))
    (still_open,) = caught.value.task_ids
    journal = Journal.load(tmp_path / "r")
    open_id = journal.tasks[still_open].last.handle.external_id
    assert all(open_id not in call for call in provider.cleanup_calls)
    assert provider.cleanup_calls  # the cancelled one was cleaned up


@pytest.mark.asyncio
async def test_one_cancel_raising_still_lets_the_others_finish_and_journals_them(
    tmp_path, provider, fake_backend_class
):
    provider.duration = 1000
    plan = simple_plan("a", "b", "c")
    await run_until(
        plan,
        fake_backend_class(provider=provider),
        tmp_path / "r",
        lambda e: e.kind == "state" and e.task_id == "c",
    )

    class CancelExplodes(fake_backend_class):
        async def cancel(self, handle):
            if handle.labels["task"] == "a":
                raise asyncio.CancelledError  # not an Exception: it is not a cancel failure
            await super().cancel(handle)

    with pytest.raises(asyncio.CancelledError):
        await cancel_run(tmp_path / "r", CancelExplodes(provider=provider))
    states = {k: r.state for k, r in Journal.load(tmp_path / "r").tasks.items()}
    assert states == {"a": "running", "b": "cancelled", "c": "cancelled"}


@pytest.mark.asyncio
async def test_cancelling_a_task_waiting_to_resubmit_an_in_doubt_submit_says_so(
    tmp_path, provider, fake_backend_class
):
    from altar.execution.run.cancelling import cancel_all
    from altar.execution.run.ledger import Ledger
    from altar.execution.state.journal import open_journal
    from altar.execution.state.records import IN_DOUBT, Attempt

    plan = simple_plan("a")
    (tmp_path / "r").mkdir()
    journal = open_journal(plan, "fake", tmp_path / "r", {})
    record = journal.tasks["a"]
    record.attempts.append(Attempt(number=1, state=IN_DOUBT, key="k" * 32))
    record.in_doubt = 1
    events = []
    failed = await cancel_all(
        Ledger(journal, events.append), fake_backend_class(provider=provider), "stop"
    )
    assert failed == []
    assert record.state == "cancelled"
    assert record.attempts[0].state == "failed"
    assert "may have started for it is removed only by a backend that lists" in record.detail
    assert provider.cancelled == []  # nothing to cancel by handle
    assert Journal.load(tmp_path / "r").tasks["a"].state == "cancelled"  # journaled
