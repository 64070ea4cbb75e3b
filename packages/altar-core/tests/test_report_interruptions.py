"""The report shows when the runner was down, what that touched, and why tasks failed (issue 23)."""

from __future__ import annotations

import asyncio

import pytest
from altar.execution import TaskFailure, TaskHandle
from altar.execution.report import EventRecorder, build_report, read_events, render_html
from altar.execution.report.events import LoggedEvent
from altar.execution.report.model import Interruption
from altar.execution.run.runner import run_plan
from altar.execution.state.journal import Attempt, Journal, TaskRecord

from .runkit import simple_plan

T0 = 1_800_000_000.0


def journal_of(tmp_path, *records: TaskRecord, staging_error: str | None = None) -> Journal:
    journal = Journal(
        tmp_path,
        "fake",
        {},
        "plan.toml",
        {r.id: r for r in records},
        finished=True,
        created_at=T0,
        staging_error=staging_error,
    )
    return journal


def attempt(number: int, start: float, end: float | None, **changes) -> Attempt:
    values = {
        "number": number,
        "state": "succeeded" if end is not None else "running",
        "handle": TaskHandle("fake", f"id-{number}-{start}", {}, None),
        "submitted_at": start,
        "started_at": start + 0.5,
        "finished_at": end,
    }
    values.update(changes)
    return Attempt(**values)


def record(task_id: str, *attempts: Attempt, state: str = "succeeded") -> TaskRecord:
    r = TaskRecord(task_id, "k", "sha256:" + "0" * 64, state=state, attempts=list(attempts))
    r.outputs_collected = state == "succeeded"
    return r


def test_a_crash_between_two_processes_is_an_interruption(tmp_path):
    journal = journal_of(
        tmp_path,
        record("long", attempt(1, T0 + 1, T0 + 30)),  # ran through the crash
        record("early", attempt(1, T0 + 1, T0 + 3)),  # done before it
        record("late", attempt(1, T0 + 25, T0 + 28)),  # submitted by the second process
        record("cut", attempt(1, T0 + 2, T0 + 26, adopted=True)),
        record("twice", attempt(1, T0 + 25, T0 + 27, reexecuted=1)),
    )
    events = [
        LoggedEvent(T0, "process"),
        LoggedEvent(T0 + 1, "submitted", "long", 1),
        LoggedEvent(T0 + 4, "succeeded", "early"),
        LoggedEvent(T0 + 24, "process"),  # killed after T0 + 4; resumed at T0 + 24
        LoggedEvent(T0 + 24.1, "resumed"),
        LoggedEvent(T0 + 31, "done"),
    ]
    report = build_report(journal, events)
    assert report.interruptions == (
        Interruption(T0 + 4, T0 + 24, finished=False, in_flight=("long", "cut")),
    )
    bars = {row.id: row.attempts[0] for row in report.tasks}
    assert bars["long"].interrupted == "in flight while the runner was down (20.0s)"
    assert bars["early"].interrupted is None
    assert bars["late"].interrupted is None
    assert bars["cut"].interrupted == (
        "its submit was cut short by a stop of the runner; the resumed run found it"
    )
    assert "it may have run twice" in (bars["twice"].interrupted or "")
    html = render_html(report)
    assert '<rect class="gap"' in html
    assert "runner down for 20.0s" in html
    assert "was resumed 20.0s later; 2 task(s) were in flight and kept running: long, cut" in html
    assert "(1 interrupted)" in html


def test_a_log_from_before_process_lines_uses_resumed_and_a_rerun_is_no_crash(tmp_path):
    journal = journal_of(tmp_path, record("a", attempt(1, T0 + 1, T0 + 12)))
    old = [LoggedEvent(T0 + 1, "submitted", "a", 1), LoggedEvent(T0 + 9, "resumed")]
    assert build_report(journal, old).interruptions == (
        Interruption(T0 + 1, T0 + 9, finished=False, in_flight=("a",)),
    )
    rerun = [
        LoggedEvent(T0, "process"),
        LoggedEvent(T0 + 13, "done"),
        LoggedEvent(T0 + 60, "process"),
    ]
    report = build_report(journal, rerun)
    assert report.interruptions == (Interruption(T0 + 13, T0 + 60, finished=True),)
    assert report.tasks[0].attempts[0].interrupted is None
    assert "altar run --retry-failed" in render_html(report)
    assert "None logged: one process drove the run." in render_html(build_report(journal, []))


def test_a_failure_shows_its_reason_exit_code_and_detail(tmp_path):
    detail = "Traceback (most recent call last):\n  File x\nValueError: boom\n\n"
    failure = TaskFailure("exit_3", detail, True, 3)
    journal = journal_of(
        tmp_path,
        record("bad", attempt(1, T0 + 1, T0 + 2, state="failed", failure=failure), state="failed"),
        staging_error="staged input 'w.bin' does not match its digest; fix the digest",
    )
    report = build_report(journal)
    row = report.tasks[0]
    assert (row.reason, row.exit_code, row.detail) == ("exit_3", 3, "ValueError: boom")
    assert row.attempts[0].detail == "ValueError: boom"
    html = render_html(report)
    assert 'exit_3 (exit code 3)<br><span class="detail">ValueError: boom</span>' in html
    assert "attempt 1 failed (exit_3): ValueError: boom" in html
    assert "Traceback (most recent call last):" in html  # in the log tail
    assert (
        '<p class="error" id="staging-error">staging failed: staged input &#x27;w.bin&#x27; '
        "does not match its digest; fix the digest</p>"
    ) in html


def test_a_real_stop_and_resume_is_in_the_report(tmp_path, fake_backend_class):
    """The process lines are written by the event log of each run_plan, killed or not."""
    backend = fake_backend_class()
    backend.provider.duration = 3
    run_dir = tmp_path / "run"
    plan = simple_plan("a", "b")

    async def crash_then_resume() -> None:
        task: asyncio.Future[object] | None = None
        recorder = EventRecorder(run_dir)

        def on_event(event):
            recorder(event)
            if event.kind == "state" and "running" in event.message and task is not None:
                task.cancel()

        task = asyncio.ensure_future(
            run_plan(plan, backend, run_dir=run_dir, on_event=on_event, poll_interval_s=0.0)
        )
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.05)
        result = await run_plan(
            plan, backend, run_dir=run_dir, on_event=EventRecorder(run_dir), poll_interval_s=0.0
        )
        assert result.ok

    asyncio.run(crash_then_resume())
    events = read_events(run_dir)
    assert [e.kind for e in events].count("process") == 2
    report = build_report(Journal.load(run_dir), events)
    [gap] = report.interruptions
    assert not gap.finished
    assert gap.in_flight
    assert any(bar.interrupted for row in report.tasks for bar in row.attempts)


def test_altar_report_json_counts_the_interruptions(tmp_path, capsys):
    from altar.execution.cli import command as cli

    journal = journal_of(tmp_path / "run", record("a", attempt(1, T0 + 1, T0 + 12)))
    journal.run_dir.mkdir()
    journal.save()
    (journal.run_dir / "events.jsonl").write_text(
        '{"at": 1800000001, "kind": "process"}\n{"at": 1800000002, "kind": "submitted"}\n'
        '{"at": 1800000009, "kind": "process"}\n'
    )
    assert cli.main(["report", str(journal.run_dir), "--json"]) == 0
    assert '"interruptions": 1' in capsys.readouterr().out


def test_a_submit_journaled_after_the_last_event_moves_the_stop(tmp_path):
    """The in-doubt submits a kill cut short were journaled after the last logged event."""
    journal = journal_of(
        tmp_path,
        record("cut", attempt(1, T0 + 6, T0 + 25, adopted=True)),
        record("done", attempt(1, T0 + 1, T0 + 5.5)),
    )
    events = [
        LoggedEvent(T0, "process"),
        LoggedEvent(T0 + 5.5, "succeeded", "done"),
        LoggedEvent(T0 + 20, "process"),
    ]
    [gap] = build_report(journal, events).interruptions
    assert (gap.start, gap.end, gap.in_flight) == (T0 + 6, T0 + 20, ("cut",))
