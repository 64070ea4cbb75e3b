"""``altar logs RUN TASK``: an attempt's stdout and stderr, ``--attempt``, ``--follow``."""

from __future__ import annotations

import asyncio
import json

import pytest
from altar.execution import registry as registry_module
from altar.execution.cli import command as cli
from altar.execution.cli import logs as cli_logs
from altar.execution.plans.plan import load_plan
from altar.execution.run.runner import run_plan


def run_cli(argv, capsys):
    code = cli.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_logs_of_a_failed_task(fake_registry, plan_file, tmp_path, capsys):
    fake_registry.script = {"fold-1": ["exit_3"]}
    run_dir = tmp_path / "r"
    assert run_cli(["run", plan_file, "--run-dir", run_dir], capsys)[0] == 1
    for task in fake_registry.tasks.values():  # a provider that keeps finished tasks' logs
        task.removed = False
    code, out, err = run_cli(["logs", run_dir, "fold-1"], capsys)
    assert code == 0
    assert out == "fold-1 step 0\nfold-1 step 1\n"
    assert err == "fold-1: exit_3\n"
    code, out, _ = run_cli(["logs", run_dir, "fold-1", "--json"], capsys)
    data = json.loads(out)
    assert data == {
        "task": "fold-1",
        "attempt": 1,
        "source": "task_logs",
        "stdout": "fold-1 step 0\nfold-1 step 1\n",
        "stderr": "fold-1: exit_3\n",
    }


def test_logs_of_an_earlier_attempt(fake_registry, plan_file, tmp_path, capsys):
    fake_registry.script = {"fold-1": ["oom", "ok"]}
    run_dir = tmp_path / "r"
    assert run_cli(["run", plan_file, "--run-dir", run_dir], capsys)[0] == 0
    for task in fake_registry.tasks.values():
        task.removed = False
    code, _, err = run_cli(["logs", run_dir, "fold-1", "--attempt", "1"], capsys)
    assert (code, err) == (0, "fold-1: oom\n")
    code, _, err = run_cli(["logs", run_dir, "fold-1"], capsys)
    assert (code, err) == (0, "")
    code, _, err = run_cli(["logs", run_dir, "fold-1", "--attempt", "3"], capsys)
    assert code == 2
    assert err == "altar: error: task 'fold-1' has no attempt 3 (its attempts: 1, 2)\n"


def test_unknown_task_is_one_line_naming_the_tasks(fake_registry, plan_file, tmp_path, capsys):
    run_dir = tmp_path / "r"
    run_cli(["run", plan_file, "--run-dir", run_dir], capsys)
    code, out, err = run_cli(["logs", run_dir, "fold-9"], capsys)
    assert (code, out) == (2, "")
    assert err == (
        f"altar: error: {run_dir} has no task 'fold-9' (its tasks: fold-0, fold-1, fold-2, "
        "summarize-3)\n"
    )


def test_a_backend_without_logs_gives_its_failure_tail(
    fake_registry, plan_file, tmp_path, capsys, monkeypatch
):
    fake_registry.script = {"fold-1": ["exit_3"]}
    run_dir = tmp_path / "r"
    run_cli(["run", plan_file, "--run-dir", run_dir], capsys)

    async def no_logs(self, handle):
        return None

    monkeypatch.setattr(cli.default_registry.get("fake"), "task_logs", no_logs)
    code, out, err = run_cli(["logs", run_dir, "fold-1"], capsys)
    assert (code, out) == (0, "")
    assert err == (
        "altar: backend 'fake' keeps only the log tail of a failed attempt; showing it\n"
        "log tail of fold-1: it went wrong"
    )


def test_follow_prints_what_a_running_attempt_adds(
    fake_registry, plan_file, tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr(cli_logs, "FOLLOW_INTERVAL_S", 0.0)
    fake_registry.duration = 6
    run_dir = tmp_path / "r"
    backend = registry_module.get_backend_class("fake")(slots=1)  # one task live at a time

    async def partial() -> None:
        def on_event(event) -> None:
            if event.kind == "submitted":
                task.cancel()

        task = asyncio.ensure_future(
            run_plan(load_plan(plan_file), backend, run_dir=run_dir, on_event=on_event)
        )
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(partial())
    submitted = [t for t in fake_registry.tasks.values()]
    key = submitted[0].key
    code, out, _ = run_cli(["logs", run_dir, key, "--follow"], capsys)
    assert code == 0
    # every step once, in order, although each was fetched while the task still ran
    assert out == "".join(f"{key} step {n}\n" for n in range(6))


def test_follow_waits_for_a_queued_attempt_to_write(
    fake_registry, plan_file, tmp_path, capsys, monkeypatch
):
    """Issue 23: a job still queued (no log file yet: task_logs None) is waited for."""
    monkeypatch.setattr(cli_logs, "FOLLOW_INTERVAL_S", 0.0)
    fake_registry.duration = 6
    run_dir = tmp_path / "r"
    backend_class = registry_module.get_backend_class("fake")
    backend = backend_class(slots=1)

    async def partial() -> None:
        def on_event(event) -> None:
            if event.kind == "submitted":
                task.cancel()

        task = asyncio.ensure_future(
            run_plan(load_plan(plan_file), backend, run_dir=run_dir, on_event=on_event)
        )
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(partial())
    key = next(iter(fake_registry.tasks.values())).key
    real_logs = backend_class.task_logs
    queued = {"calls": 0}

    async def queued_at_first(self, handle):
        queued["calls"] += 1
        return None if queued["calls"] <= 2 else await real_logs(self, handle)

    monkeypatch.setattr(backend_class, "task_logs", queued_at_first)
    code, out, err = run_cli(["logs", run_dir, key, "--follow"], capsys)
    assert (code, err) == (0, "")
    assert out == "".join(f"{key} step {n}\n" for n in range(6))
    assert queued["calls"] > 2


def test_no_logs_left_is_one_line_and_exit_1(
    fake_registry, plan_file, tmp_path, capsys, monkeypatch
):
    run_dir = tmp_path / "r"
    run_cli(["run", plan_file, "--run-dir", run_dir], capsys)

    async def no_logs(self, handle):
        return None

    monkeypatch.setattr(cli.default_registry.get("fake"), "task_logs", no_logs)
    monkeypatch.setattr(cli.default_registry.get("fake"), "failure_detail", no_logs)
    code, out, err = run_cli(["logs", run_dir, "fold-0"], capsys)  # succeeded: no failure tail
    assert (code, out) == (1, "")
    assert err == (
        "altar: no output of task 'fold-0' attempt 1 is left: backend 'fake' does not give a "
        "task's logs, and keeps only the log tail of a failed attempt\n"
    )


def test_an_attempt_that_wrote_nothing_says_so_and_exits_0(
    fake_registry, plan_file, tmp_path, capsys, monkeypatch
):
    run_dir = tmp_path / "r"
    assert run_cli(["run", plan_file, "--run-dir", run_dir], capsys)[0] == 0

    async def empty(backend, record, attempt):
        return cli_logs.Fetched("", "", "task_logs")

    monkeypatch.setattr(cli_logs, "_fetch", empty)
    code, out, err = run_cli(["logs", run_dir, "fold-1"], capsys)
    assert (code, out) == (0, "")
    assert err == "altar: task 'fold-1' attempt 1 wrote no output\n"
