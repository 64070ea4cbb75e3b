"""``altar status``: what a resume will do, a summary line, exit 1 with failed tasks (issue 15)."""

from __future__ import annotations

import asyncio
import errno
import json

import pytest
from altar.execution import registry as registry_module
from altar.execution.cli import command as cli
from altar.execution.plans.plan import load_plan
from altar.execution.run.runner import run_plan
from altar.execution.state.journal import Journal


def run_cli(argv, capsys):
    code = cli.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def rows(out: str) -> dict[str, list[str]]:
    """Table rows by task id (the lines before the blank line)."""
    table = out.split("\n\n")[0].splitlines()[1:]
    return {line.split()[0]: line.split() for line in table}


def interrupt_after_submits(plan_file, run_dir, submits: int) -> None:
    """Start the plan and stop it like Ctrl-C once ``submits`` tasks were submitted."""
    backend = registry_module.get_backend_class("fake")(slots=2)

    async def partial() -> None:
        seen = []

        def on_event(event) -> None:
            seen.append(event.kind)
            if seen.count("submitted") == submits:
                task.cancel()

        task = asyncio.ensure_future(
            run_plan(
                load_plan(plan_file),
                backend,
                run_dir=run_dir,
                poll_interval_s=0.0,
                on_event=on_event,
            )
        )
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(partial())


def status_until_settled(run_dir, task_id, capsys):
    for _ in range(5):  # each status polls once; the fake advances a step per poll
        code, out, err = run_cli(["status", run_dir], capsys)
        if rows(out)[task_id][2] not in ("pending", "running"):
            return code, out, err
    raise AssertionError(out)


def test_after_ctrl_c_a_task_the_resume_retries_is_not_failed(
    fake_registry, plan_file, tmp_path, capsys
):
    fake_registry.script = {"fold-0": ["oom", "ok"]}
    run_dir = tmp_path / "r"
    interrupt_after_submits(plan_file, run_dir, 2)
    code, out, _ = status_until_settled(run_dir, "fold-0", capsys)
    assert rows(out)["fold-0"][2] == "queued"
    assert "attempt 1 failed (oom_killed); resuming the run retries it" in out
    assert code == 0
    # and the resume does retry it: the status did not lie
    code, _, err = run_cli(["run", plan_file, "--run-dir", run_dir], capsys)
    assert code == 0, err
    assert fake_registry.submits["fold-0"] == 2


def test_a_failed_task_gives_a_summary_and_exit_1(fake_registry, plan_file, tmp_path, capsys):
    fake_registry.script = {"fold-1": ["exit_3"]}
    run_dir = tmp_path / "r"
    code, _, _ = run_cli(["run", plan_file, "--run-dir", run_dir], capsys)
    assert code == 1
    _, out, _ = run_cli(["status", run_dir], capsys)
    assert code == 1
    assert rows(out)["fold-1"][2] == "failed"
    assert out.splitlines()[-1] == (
        f"4 tasks: 2 succeeded, 1 failed, 1 skipped; run directory {run_dir}"
    )
    code, out, _ = run_cli(["status", run_dir, "--quiet"], capsys)
    assert (code, out.count("\n")) == (1, 1)
    code, out, _ = run_cli(["status", run_dir, "--json"], capsys)
    assert code == 1
    assert json.loads(out)["counts"] == {"succeeded": 2, "failed": 1, "skipped": 1}


def test_after_an_out_of_space_stop_outputs_not_collected_are_not_succeeded(
    fake_registry, plan_file, tmp_path, capsys
):
    fake_registry.collect_errors = [OSError(errno.ENOSPC, "No space left on device")]
    run_dir = tmp_path / "r"
    code, _, err = run_cli(["run", plan_file, "--run-dir", run_dir], capsys)
    assert code == 1
    assert "free space and resume the run" in err
    _, out, _ = run_cli(["status", run_dir], capsys)
    states = {task: row[2] for task, row in rows(out).items()}
    assert "collecting" in states.values()
    assert list(states.values()).count("succeeded") < 3
    assert "outputs are not collected yet" in out
    assert f"resume it with: altar run {plan_file} --run-dir {run_dir}" in out
    code, out, _ = run_cli(["status", run_dir, "--json"], capsys)
    assert json.loads(out)["counts"].get("collecting", 0) >= 1


def test_watch_returns_when_every_task_settled(fake_registry, plan_file, tmp_path, capsys):
    run_dir = tmp_path / "r"
    interrupt_after_submits(plan_file, run_dir, 2)
    code, _, _ = run_cli(["run", plan_file, "--run-dir", run_dir], capsys)
    assert code == 0
    code, out, _ = run_cli(["status", run_dir, "--watch", "0.1", "--quiet"], capsys)
    assert code == 0
    assert out == f"4 tasks: 4 succeeded; run directory {run_dir}\n"


def test_status_colours_only_a_terminal_without_no_color(monkeypatch):
    import io

    from altar.execution.run.progress import format_table, use_colour
    from altar.execution.run.runner import TaskResult

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert use_colour(Terminal()) is True
    assert use_colour(io.StringIO()) is False
    monkeypatch.setenv("NO_COLOR", "1")
    assert use_colour(Terminal()) is False
    table = format_table([TaskResult("a", "k", "failed", 1, reason="exit_1")], colour=True)
    assert "\x1b[31mfailed\x1b[0m" in table
    assert "\x1b[" not in format_table([TaskResult("a", "k", "failed", 1)])


def test_a_success_with_nothing_to_collect_is_succeeded(tmp_path):
    from altar.execution.state.journal import Attempt, Journal, TaskRecord
    from altar.execution.state.runs import status_result

    records = {
        name: TaskRecord(
            name,
            "k",
            "sha256:" + "0" * 64,
            state="succeeded",
            attempts=[Attempt(1, "succeeded", None, None, 1.0, 2.0, 3.0)],
        )
        for name in ("writes", "prints")
    }
    journal = Journal(tmp_path, "fake", {}, "plan.toml", records)
    unknown = status_result(journal)
    assert [t.status for t in unknown.tasks] == ["collecting", "collecting"]
    known = status_result(journal, with_outputs=frozenset({"writes"}))
    assert [t.status for t in known.tasks] == ["collecting", "succeeded"]
    assert known.tasks[0].duration_s == 1.0


def test_the_printed_resume_command_resumes_a_run_started_with_options(
    fake_registry, plan_file, tmp_path, capsys
):
    """Issue 23: the resume line carries the run's --option values, quoted for a shell."""
    import shlex

    run_dir = tmp_path / "run $(x) 'q'"
    backend = registry_module.get_backend_class("fake")(slots=2, poll_s=0.5)

    async def partial() -> None:
        def on_event(event) -> None:
            if event.kind == "submitted":
                task.cancel()

        task = asyncio.ensure_future(
            run_plan(
                load_plan(plan_file),
                backend,
                run_dir=run_dir,
                poll_interval_s=0.0,
                on_event=on_event,
                backend_options={"slots": 2, "poll_s": 0.5},
            )
        )
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(partial())
    _, out, _ = run_cli(["status", run_dir], capsys)
    line = next(x for x in out.splitlines() if x.startswith("resume it with: "))
    argv = shlex.split(line.removeprefix("resume it with: "))
    assert argv[:3] == ["altar", "run", str(plan_file)]
    assert "--option" in argv
    assert argv[argv.index("--option") + 1] == "poll_s=0.5"  # slots = 2 is the plan's own
    code, _, err = run_cli(argv[1:], capsys)
    assert code == 0, err
    assert "altar: resuming 4 task(s)" in err


@pytest.mark.parametrize(
    "spelling",
    [
        ["--watch", "RUN"],
        ["RUN", "--watch"],
        ["--watch", "0.1", "RUN"],
        ["RUN", "--watch=0.1"],
        ["--watch", "--interval", "0.1", "RUN"],
    ],
)
def test_watch_before_the_run_dir_is_not_read_as_the_interval(
    fake_registry, plan_file, tmp_path, capsys, spelling
):
    """Issue 23: `status --watch RUN_DIR` took the path for the interval."""
    run_dir = tmp_path / "r"
    assert run_cli(["run", plan_file, "--run-dir", run_dir], capsys)[0] == 0
    argv = ["status", *[str(run_dir) if a == "RUN" else a for a in spelling], "--quiet"]
    code, out, err = run_cli(argv, capsys)
    assert (code, err) == (0, "")
    assert out == f"4 tasks: 4 succeeded; run directory {run_dir}\n"


def test_a_resumed_runs_total_time_and_eta_count_its_whole_history(
    fake_registry, plan_file, tmp_path, capsys
):
    """Issue 23: after a resume the summary's time and the ETA counted only this process."""
    import io
    import re

    from altar.execution.run.progress import ProgressPrinter
    from altar.execution.run.runner import RunEvent
    from altar.execution.state.journal import Journal

    run_dir = tmp_path / "r"
    interrupt_after_submits(plan_file, run_dir, 2)
    journal = Journal.load(run_dir)
    journal.created_at -= 1000  # the run started 1000 s before its first process stopped
    journal.save()
    code, out, err = run_cli(["run", plan_file, "--run-dir", run_dir, "--quiet"], capsys)
    assert code == 0, err
    took = re.fullmatch(r"4 tasks: 4 succeeded in (\S+) \((\S+) in this process\); .*\n", out)
    assert took is not None, out
    assert took.group(1).startswith("16m4")

    stream = io.StringIO()
    printer = ProgressPrinter(stream, total=4, live=True, earlier_s=90.0)
    printer(RunEvent("state", "x", "a", counts={"succeeded": 2, "running": 2}, elapsed_s=10.0))
    # 2 of 4 finished in 100 s of the run's history: 100 s to go, not 10 s
    assert stream.getvalue().endswith("1m40s  [2 running, 2 succeeded of 4; 50% done, ETA 1m40s]")


def test_the_resume_line_repeats_the_runs_max_retries_and_max_parallel(
    fake_registry, plan_file, tmp_path, capsys
):
    """Issue 23: the journal records --max-retries/--max-parallel; status's resume line and
    the one after Ctrl-C repeat them, also after a resume that named none; a journal written
    before they were recorded still reads."""
    import argparse

    run_dir = tmp_path / "run"
    backend = registry_module.get_backend_class("fake")(slots=2, poll_s=0.5)

    def interrupted(**flags: int) -> None:
        async def partial() -> None:
            def on_event(event) -> None:
                if event.kind == "submitted":
                    task.cancel()

            task = asyncio.ensure_future(
                run_plan(load_plan(plan_file), backend, run_dir=run_dir, on_event=on_event, **flags)
            )
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(partial())

    interrupted(max_retries=3, max_parallel=2)
    assert Journal.load(run_dir).flags == {"max_parallel": 2, "max_retries": 3}
    expected = f"altar run {plan_file} --max-parallel 2 --max-retries 3 --run-dir {run_dir}"
    _, out, _ = run_cli(["status", run_dir], capsys)
    assert f"resume it with: {expected}" in out
    interrupted()  # a resume that repeats neither keeps both
    assert Journal.load(run_dir).flags == {"max_parallel": 2, "max_retries": 3}
    args = argparse.Namespace(
        plan=plan_file, backend=None, option=[], max_parallel=None, max_retries=None
    )
    assert cli._resume(args, run_dir) == expected  # what Ctrl-C prints
    interrupted(max_retries=0)  # one named: it replaces that one only
    assert Journal.load(run_dir).flags == {"max_parallel": 2, "max_retries": 0}
    # an older journal (no "flags") loads, and its resume line has none
    path = run_dir / "journal.json"
    data = json.loads(path.read_text())
    del data["flags"]
    path.write_text(json.dumps(data))
    assert Journal.load(run_dir).flags == {}
    _, out, _ = run_cli(["status", run_dir], capsys)
    assert f"resume it with: altar run {plan_file} --run-dir {run_dir}" in out


def test_status_of_a_finished_run_does_not_parse_its_plan(
    fake_registry, plan_file, tmp_path, capsys, monkeypatch
):
    # issue 24: at 100,000 tasks a parse costs seconds; nothing of a finished run's rows needs it
    from altar.execution.plans import plan_cache

    run_dir = tmp_path / "r"
    assert run_cli(["run", plan_file, "--run-dir", run_dir], capsys)[0] == 0
    parsed: list[str] = []
    real = plan_cache.load_plan

    def counted(path):
        parsed.append(str(path))
        return real(path)

    monkeypatch.setattr(plan_cache, "load_plan", counted)
    plan_cache.clear()
    for flags in ([], ["--json"], ["--quiet"]):
        code, out, _ = run_cli(["status", run_dir, *flags], capsys)
        assert code == 0
        assert "collecting" not in out
    assert parsed == []
    # a success whose outputs are not collected needs the plan (does it declare outputs?),
    # parsed once for the rows and the resume line
    journal = Journal.load(run_dir)
    record = next(iter(journal.tasks.values()))
    record.outputs_collected = False
    journal.save()
    code, out, _ = run_cli(["status", run_dir], capsys)
    assert parsed == [str(plan_file)]
    assert "resume it with" in out
