"""The altar CLI, driven through main(argv) and through the installed console script."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from altar.execution import registry as registry_module
from altar.execution.cli import command as cli
from altar.execution.digests.digest import sha256_file, verify_files_script
from altar.execution.run import runner
from altar.execution.run.progress import ProgressPrinter, format_duration, format_table
from altar.execution.run.runner import RunEvent, TaskResult
from altar.execution.state.journal import JOURNAL_NAME, Journal, run_lock


def run_cli(argv, capsys):
    code = cli.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_run_prints_progress_and_a_table(fake_registry, plan_file, tmp_path, capsys):
    code, out, err = run_cli(["run", plan_file, "--run-dir", tmp_path / "run"], capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["TASK", "KIND", "STATUS", "ATTEMPTS", "TIME", "DETAIL"]
    assert [line.split()[:4] for line in lines[1:5]] == [
        ["fold-0", "fold", "succeeded", "1"],
        ["fold-1", "fold", "succeeded", "1"],
        ["fold-2", "fold", "succeeded", "1"],
        ["summarize-3", "summarize", "succeeded", "1"],
    ]
    assert lines[-1].startswith("4 tasks: 4 succeeded in ")
    assert lines[-1].endswith(f"run directory {tmp_path / 'run'}")
    assert "fold-0 submitted" in err
    assert "summarize-3 succeeded" in err
    assert "\x1b[K" not in err  # not a terminal: plain lines only
    assert (tmp_path / "out/summary.txt").read_bytes() == b"summary\n"


def test_run_json_and_task_failures_exit_1(fake_registry, plan_file, tmp_path, capsys):
    fake_registry.script = {"fold-1": ["exit_3"]}
    code, out, err = run_cli(["run", plan_file, "--run-dir", tmp_path / "r", "--json"], capsys)
    assert code == 1
    data = json.loads(out)
    assert data["ok"] is False
    assert data["counts"] == {"succeeded": 2, "failed": 1, "skipped": 1}
    failed = data["tasks"][1]
    assert (failed["id"], failed["reason"], failed["exit_code"]) == ("fold-1", "exit_3", 3)
    assert failed["detail"] == "log tail of fold-1: it went wrong"
    assert "altar: running 4 task(s)" in err


def test_run_failure_table_shows_the_log_tail(fake_registry, plan_file, tmp_path, capsys):
    fake_registry.script = {"fold-1": ["exit_3"]}
    code, out, _ = run_cli(["run", plan_file, "--run-dir", tmp_path / "r"], capsys)
    assert code == 1
    assert "exit_3: log tail of fold-1: it went wrong" in out
    assert "fold-1 (exit_3):\n    log tail of fold-1: it went wrong" in out
    assert "dependency fold-1 failed" in out


def test_option_overrides_and_bad_options(fake_registry, plan_file, tmp_path, capsys):
    code, _, err = run_cli(
        ["run", plan_file, "--run-dir", tmp_path / "r", "--option", "slots=1"], capsys
    )
    assert code == 0, err
    assert fake_registry.max_live == 1
    code, _, err = run_cli(["run", plan_file, "--option", "slot=1"], capsys)
    assert code == 2
    assert err == (  # issue 23: the command line is blamed, not the plan
        "altar: error: --option slot=1: backend 'fake' has no option "
        "'slot' (its options: slots, poll_s)\n"
    )
    plan_file.write_text(plan_file.read_text().replace("slots = 2", "slot = 2"))
    code, _, err = run_cli(["run", plan_file, "--option", "slots=1"], capsys)
    assert (code, err) == (
        2,
        f"altar: error: {plan_file}: backend.options.slot: backend 'fake' has no option "
        "'slot' (its options: slots, poll_s)\n",
    )


def test_a_bad_option_value_is_blamed_on_the_command_line(
    fake_registry, plan_file, tmp_path, capsys, monkeypatch
):
    """Issue 23: a value the backend rejects from --option was blamed on plan.toml."""
    import functools

    fake = registry_module.get_backend_class("fake")
    original = fake.__init__

    @functools.wraps(original)
    def checked(self, *, slots=None, poll_s=0.0):
        if slots is not None and slots < 1:
            raise ValueError(f"slots must be at least 1, got {slots}")
        original(self, slots=slots, poll_s=poll_s)

    monkeypatch.setattr(fake, "__init__", checked)
    code, _, err = run_cli(["run", plan_file, "--option", "slots=0"], capsys)
    assert (code, err) == (
        2,
        "altar: error: --option slots=0: backend 'fake' rejected its options: "
        "slots must be at least 1, got 0\n",
    )
    plan_file.write_text(plan_file.read_text().replace("slots = 2", "slots = 0"))
    code, _, err = run_cli(["run", plan_file, "--option", "poll_s=1"], capsys)
    assert (code, err) == (
        2,
        f"altar: error: {plan_file}: backend.options: backend 'fake' rejected its options: "
        "slots must be at least 1, got 0\n",
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "PLAN", "--backend", "nope"], "no execution backend named 'nope' is installed"),
        (["run", "PLAN", "--backend", "fak"], "named 'fak' is installed; did you mean 'fake'?"),
        (["run", "TYPO"], "typo.toml: backend.type: no execution backend named 'fakee' is"),
        (["run", "PLAN", "--backend", "kubernetes"], "to add it: pip install altar-backend-k8s"),
        (["run", "PLAN", "--max-parallel", "0"], "argument --max-parallel: must be at least 1"),
        (["run", "PLAN", "--option", "novalue"], "expected KEY=VALUE, got 'novalue'"),
        (["run", "missing.toml"], "missing.toml: cannot read the plan"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        (["verify", "f", "--digest", "sha256:XYZ"], "--digest must be sha256:<64 lowercase hex>"),
        (["status", "nowhere"], "nowhere has no run journal"),
    ],
)
def test_user_errors_are_one_line_and_exit_2(fake_registry, plan_file, capsys, argv, message):
    typo = plan_file.with_name("typo.toml")
    typo.write_text(plan_file.read_text().replace('type = "fake"', 'type = "fakee"'))
    argv = [{"PLAN": str(plan_file), "TYPO": str(typo)}.get(a, a) for a in argv]
    code, out, err = run_cli(argv, capsys)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert message in err
    assert "Traceback" not in err


def test_a_plan_error_names_file_and_field(fake_registry, plan_file, tmp_path, capsys):
    path = tmp_path / "bad.toml"
    path.write_text(
        plan_file.read_text().replace('labels = { task = "fold-1" }', "resources = { count = 0 }")
    )
    code, _, err = run_cli(["run", path], capsys)
    assert code == 2
    assert err == (
        f"altar: error: {path}: tasks[1].resources.count: resource count must be at least 1, "
        "got 0\n"
    )


def test_status_and_cancel(fake_registry, plan_file, tmp_path, capsys):
    import asyncio

    from altar.execution.plans.plan import load_plan
    from altar.execution.run.runner import run_plan

    fake_registry.duration = 100
    backend = registry_module.get_backend_class("fake")(slots=2)
    seen = []

    async def partial():
        task = asyncio.ensure_future(
            run_plan(
                load_plan(plan_file),
                backend,
                run_dir=tmp_path / "r",
                poll_interval_s=0.0,
                on_event=lambda e: seen.append(e) or (len(seen) == 4 and task.cancel()),
            )
        )
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(partial())
    code, out, err = run_cli(["status", tmp_path / "r"], capsys)
    assert code == 0
    run_id = Journal.load(tmp_path / "r").run_id
    assert (
        f"altar: run {run_id} on fake; its provider objects carry the labels altar.run={run_id}"
        in err
    )
    assert [line.split()[2] for line in out.splitlines()[1:5]] == [
        "running",
        "running",
        "queued",
        "queued",
    ]
    code, out, _ = run_cli(["status", tmp_path / "r", "--json"], capsys)
    assert json.loads(out)["counts"] == {"queued": 2, "running": 2}
    fake_registry.unavailable_cancels = 1  # the provider refuses one of the two cancels
    code, out, err = run_cli(["cancel", tmp_path / "r"], capsys)
    assert code == 1
    assert out == ""
    assert err.startswith(f"altar: could not cancel 1 task(s) of {tmp_path / 'r'}: fold-")
    assert err.count("\n") == 1
    assert len(fake_registry.cancelled) == 1
    fake_registry.unavailable_cancels = 1  # and again, asking for JSON
    code, out, err = run_cli(["cancel", tmp_path / "r", "--json"], capsys)
    assert code == 1
    assert err == ""
    report = json.loads(out)
    assert report["outcome"] == "incomplete"
    assert report["cancelled"] == 3
    assert report["run_dir"] == str(tmp_path / "r")
    assert len(report["still_open"]) == 1
    assert report["still_open"][0].startswith("fold-")
    code, out, _ = run_cli(["cancel", tmp_path / "r", "--json"], capsys)  # retries the one left
    assert code == 0
    assert json.loads(out) == {
        "run_dir": str(tmp_path / "r"),
        "outcome": "cancelled",
        "cancelled": 4,
        "still_open": [],
    }
    assert len(fake_registry.cancelled) == 2
    code, out, _ = run_cli(["cancel", tmp_path / "r"], capsys)  # nothing left: still fine
    assert code == 0
    assert out == f"cancelled 4 task(s) of {tmp_path / 'r'}\n"
    # a run another process drives is asked to cancel instead
    with run_lock(tmp_path / "r2"):
        (tmp_path / "r2" / JOURNAL_NAME).write_bytes((tmp_path / "r" / JOURNAL_NAME).read_bytes())
        code, out, _ = run_cli(["cancel", tmp_path / "r2"], capsys)
        assert code == 0
        assert "asked the altar process driving" in out
        code, out, _ = run_cli(["cancel", tmp_path / "r2", "--json"], capsys)
    assert code == 0
    assert json.loads(out)["outcome"] == "requested"
    assert (tmp_path / "r2" / "cancel-requested").exists()


def test_verify(tmp_path, capsys):
    good = tmp_path / "good file.bin"
    good.write_bytes(b"weights")
    other = tmp_path / "other.bin"
    other.write_bytes(b"other")
    digest = sha256_file(good)
    code, out, _ = run_cli(["verify", good, "--digest", digest, "--no-trust-records"], capsys)
    assert (code, out) == (0, f"{good}: OK\n")
    code, out, _ = run_cli(["verify", good, other, "--digest", digest], capsys)
    assert code == 1
    assert out.splitlines()[0] == f"{good}: OK"
    assert out.splitlines()[1].startswith(f"{other}: FAILED (file at '{other}' has digest sha256:")
    code, out, _ = run_cli(
        ["verify", good, other, "--digest", digest, "--digest", sha256_file(other)], capsys
    )
    assert code == 0
    code, _, err = run_cli(
        ["verify", good, other, good, "--digest", digest, "--digest", digest], capsys
    )
    assert code == 2
    assert "one --digest for all files or one per file" in err
    code, out, _ = run_cli(["verify", tmp_path, "--digest", digest], capsys)
    assert code == 1
    assert "is not a regular file" in out


def test_verify_accepts_a_current_record(tmp_path, capsys):
    path = tmp_path / "w.bin"
    path.write_bytes(b"weights")
    digest = sha256_file(path)
    time.sleep(1.1)  # a record is only written once the file's ctime second is over
    run_cli(["verify", path, "--digest", digest], capsys)
    code, out, _ = run_cli(["verify", path, "--digest", digest], capsys)
    assert (code, out) == (0, f"{path}: OK (verification record)\n")
    code, out, _ = run_cli(["verify", path, "--digest", digest, "--no-trust-records"], capsys)
    assert (code, out) == (0, f"{path}: OK\n")


def test_verify_script(capsys):
    assert run_cli(["verify-script"], capsys)[1] == verify_files_script()
    assert run_cli(["verify-script", "--no-trust-records"], capsys)[1] == verify_files_script(
        trust_records=False
    )


def test_backends(fake_registry, capsys):
    code, out, _ = run_cli(["backends"], capsys)
    assert code == 0
    assert out.split()[:2] == ["fake", "-"]
    assert out.rstrip().endswith("ok")
    code, out, _ = run_cli(["backends", "--json"], capsys)
    assert json.loads(out)[0]["healthy"] is True


# What `altar backends` itself must not import (issue 24, start-up): the run machinery and the
# standard modules only it needs. Each backend's own imports are its own (their anatomy tests).
RUN_MACHINERY = (
    "asyncio",
    "json",
    "tomllib",
    "altar.execution.run.runner",
    "altar.execution.state.journal",
    "altar.execution.plans.plan",
    "altar.execution.run.progress",
    "altar.execution.report",
)


@pytest.mark.parametrize("argv", [["backends"], ["backends", "--json"], ["--help"]])
def test_backends_and_help_import_no_run_machinery(argv):
    code = (
        "import contextlib, io, sys\n"
        "from altar.execution import registry\n"
        "from altar.execution.cli import command as cli\n"
        "cli.default_registry = registry.BackendRegistry('altar.no_entry_points')\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):\n"
        f"    cli.main({argv!r})\n"
        "assert out.getvalue(), 'printed nothing'\n"
        f"print(' '.join(m for m in {RUN_MACHINERY!r} if m in sys.modules))\n"
    )
    expected = "json" if "--json" in argv else ""  # it prints JSON
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == expected


def test_a_commands_arguments_are_added_when_it_is_parsed(capsys):
    """The parser imports each command's module only for that command; its flags still work."""
    with pytest.raises(SystemExit) as exit_:
        cli.main(["status", "--help"])
    assert exit_.value.code == 0
    assert "--watch" in capsys.readouterr().out
    code, _, err = run_cli(["runs", "--no-such-flag"], capsys)
    assert code == 2
    assert "--no-such-flag" in err


def test_compare(fake_registry, plan_file, tmp_path, capsys):
    code, out, err = run_cli(
        [
            "compare",
            plan_file,
            "--backend",
            "fake",
            "--reference",
            "fake",
            "--workdir",
            tmp_path / "w",
        ],
        capsys,
    )
    assert code == 0, err
    assert out == (
        "fake vs reference fake: no differences in commands, outputs or outcomes across 4 task(s)\n"
    )
    assert "[reference]" in err
    fake_registry.script = {"fold-2": ["ok", "exit_1"]}  # the second run (reference) fails
    fake_registry.submits.clear()
    code, out, _ = run_cli(
        [
            "compare",
            plan_file,
            "--backend",
            "fake",
            "--reference",
            "fake",
            "--workdir",
            tmp_path / "w2",
            "--json",
        ],
        capsys,
    )
    assert code == 1
    aspects = {(d["task_id"], d["aspect"]) for d in json.loads(out)["differences"]}
    assert ("fold-2", "outcome") in aspects


# -- rendering ----------------------------------------------------------------------------


def test_progress_on_a_terminal_redraws_one_status_line():
    stream = io.StringIO()
    printer = ProgressPrinter(stream, total=4, live=True)
    printer(RunEvent("state", "a running", "a", counts={"running": 1, "queued": 3}, elapsed_s=1))
    printer(RunEvent("succeeded", "a succeeded in 1.0s", "a", counts={"succeeded": 1}, elapsed_s=2))
    printer.close()
    text = stream.getvalue()
    assert text.startswith("   1.0s  [3 queued, 1 running of 4; 0% done]")
    assert (
        "\r\x1b[K   2.0s  a succeeded in 1.0s\n   2.0s  [1 succeeded of 4; 25% done, ETA 6.0s]"
        in text
    )
    assert text.endswith("\r\x1b[K")


def test_table_and_durations():
    tasks = [
        TaskResult("fold-0", "fold", "succeeded", 1, duration_s=3.21),
        TaskResult(
            "fold-1", "fold", "failed", 2, "exit_3", "line 1\nTraceback...\nValueError: bad", 3, 75
        ),
        TaskResult("summary", "summarize", "skipped", 0, "skipped", "dependency fold-1 failed"),
    ]
    assert format_table(tasks).splitlines() == [
        "TASK     KIND       STATUS     ATTEMPTS  TIME   DETAIL",
        "fold-0   fold       succeeded  1         3.2s",
        "fold-1   fold       failed     2         1m15s  exit_3: ValueError: bad",
        "summary  summarize  skipped    0         -      dependency fold-1 failed",
    ]
    assert format_duration(7300) == "2h01m"


def test_the_console_script(tmp_path):
    script = Path(sys.executable).parent / "altar"
    assert script.exists()
    result = subprocess.run([script, "verify-script"], capture_output=True, text=True, check=False)
    assert result.returncode == 0
    assert result.stdout == verify_files_script()
    bad = tmp_path / "bad.toml"
    bad.write_text("[[tasks]]\nkind = 'k'\n")
    result = subprocess.run([script, "run", bad], capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert result.stderr == f"altar: error: {bad}: tasks[0].image: required\n"


def test_the_status_line_clock_ticks_between_events():
    stream = io.StringIO()
    printer = ProgressPrinter(stream, total=2, live=True)
    printer(RunEvent("state", "a running", "a", counts={"running": 1, "queued": 1}, elapsed_s=0))
    printer._offset -= 65  # as if 65 s passed without an event
    printer.tick()
    assert stream.getvalue().endswith("\r\x1b[K  1m05s  [1 queued, 1 running of 2; 0% done]")
    plain = ProgressPrinter(io.StringIO(), total=2, live=False)
    plain.tick()
    assert plain.stream.getvalue() == ""


SLOW_BACKEND = """
import asyncio, os, sys
from altar.execution import ExecutionBackend, TaskHandle, TaskState, TaskStatus
from altar.execution import registry
from altar.execution.cli import command as cli

class Slow(ExecutionBackend):
    name = "slow"
    input_digest_verification = "staging"

    def __init__(self, *, tag: str = "") -> None:
        pass

    async def submit(self, spec):
        if os.environ.get("SLOW_SUBMIT"):
            print("submitting", flush=True)
            await asyncio.sleep(float(os.environ["SLOW_SUBMIT"]))  # accepted, answering slowly
        return TaskHandle(self.name, spec.kind, dict(spec.labels))

    async def poll(self, handles):
        print("polled", flush=True)
        return [TaskStatus(h, TaskState.RUNNING) for h in handles]

reg = registry.BackendRegistry("altar.test_cli_none")
reg.register("slow", Slow)
cli.default_registry = registry.default_registry = reg
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.mark.parametrize(
    ("signum", "code", "how"),
    [
        (signal.SIGINT, 130, "interrupted"),
        (signal.SIGTERM, 143, "stopped by SIGTERM"),
        (signal.SIGHUP, 129, "stopped by SIGHUP"),
    ],
)
@pytest.mark.parametrize("during", ["poll", "submit"])
def test_a_signal_stops_altar_run_with_a_resume_hint(tmp_path, signum, code, how, during):
    script = tmp_path / "slow_cli.py"
    script.write_text(SLOW_BACKEND)
    plan = tmp_path / "my plan.toml"  # a resume hint a shell can paste
    plan.write_text('[backend]\ntype = "slow"\n[[tasks]]\nkind = "k"\nimage = "i"\ncommand = []\n')
    env = dict(os.environ, SLOW_SUBMIT="1.5" if during == "submit" else "")
    child = subprocess.Popen(
        [sys.executable, script, "run", plan, "--run-dir", tmp_path / "r"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdout is not None
    assert child.stdout.readline() == ("polled\n" if during == "poll" else "submitting\n")
    child.send_signal(signum)
    _, err = child.communicate(timeout=60)
    assert child.returncode == code, err
    assert f"altar: {how}; 1 submitted task(s) keep running. Resume with: altar run " in err
    assert err.rstrip().endswith(f"altar run '{plan}' --run-dir {tmp_path / 'r'}")
    assert sum(1 for line in err.splitlines() if "Resume with" in line) == 1
    assert "Traceback" not in err

    record = Journal.load(tmp_path / "r").tasks["k-0"]
    # a submit in flight got its grace: its handle is journaled, nothing is left in doubt
    assert record.state in ("pending", "running")
    assert record.attempts[0].handle.external_id == "k"
    assert record.in_doubt == 0


def test_the_resume_hint_after_a_signal_resumes_with_the_runs_options(tmp_path):
    """Issue 23: the hint repeats --option (hostile text quoted); pasted, it resumes the run."""
    import shlex

    script = tmp_path / "slow_cli.py"
    script.write_text(SLOW_BACKEND)
    plan = tmp_path / "plan.toml"
    plan.write_text('[backend]\ntype = "slow"\n[[tasks]]\nkind = "k"\nimage = "i"\ncommand = []\n')
    tag = "a b $(touch pwned) 'q' \"d\" 2"

    def start(argv):
        child = subprocess.Popen(
            [sys.executable, script, *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ, SLOW_SUBMIT=""),
            cwd=tmp_path,
        )
        assert child.stdout is not None
        line = child.stdout.readline()
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=60)
        return line, child.returncode, err

    argv = ["run", plan, "--option", f"tag={tag}", "--max-retries", "4", "--run-dir", "r"]
    line, code, err = start(argv)
    assert (line, code) == ("polled\n", 130), err
    hint = err.rstrip().splitlines()[-1].partition("Resume with: ")[2]
    pasted = shlex.split(hint)
    assert pasted == [
        "altar",
        "run",
        str(plan),
        "--option",
        f"tag={tag}",
        "--max-retries",
        "4",
        "--run-dir",
        "r",
    ]
    line, code, err = start(pasted[1:])  # the same options: the journal takes the resume
    assert (line, code) == ("polled\n", 130), err
    assert "altar: resuming 1 task(s)" in err
    assert not (tmp_path / "pwned").exists()


def staging_event(elapsed_s: float, done: int, total: int | None = 10 << 30) -> RunEvent:
    from altar.execution.transfer_progress import format_bytes

    of = f" of {format_bytes(total)} ({done * 100 // total}%)" if total else " so far"
    return RunEvent(
        "staging_progress",
        f"staging {format_bytes(done)}{of}",
        counts={"queued": 2},
        elapsed_s=elapsed_s,
        bytes_done=done,
        bytes_total=total,
    )


def test_staging_progress_fills_the_status_line_on_a_terminal():
    stream = io.StringIO()
    printer = ProgressPrinter(stream, total=2, live=True)
    printer(RunEvent("staging", "staging 2 input(s)", counts={"queued": 2}, elapsed_s=0))
    printer(staging_event(1.5, (10 << 30) // 4))
    assert stream.getvalue().endswith("\r\x1b[K   1.5s  [staging 2.5 GiB of 10.0 GiB (25%)]")
    printer._offset -= 2
    printer.tick()  # the clock runs on while the bytes do
    assert stream.getvalue().endswith("\r\x1b[K   3.5s  [staging 2.5 GiB of 10.0 GiB (25%)]")
    printer(RunEvent("staged", "staged 2 input(s)", counts={"queued": 2}, elapsed_s=4))
    printer.close()
    text = stream.getvalue()
    assert "   4.0s  staged 2 input(s)\n   4.0s  [2 queued of 2; 0% done]" in text
    assert "staging 2.5 GiB" not in text.split("staged 2 input(s)")[1]
    assert text.count("\n") == 2  # progress never scrolls the terminal


def test_staging_progress_in_plain_output_prints_a_line_every_few_seconds():
    stream = io.StringIO()
    printer = ProgressPrinter(stream, total=2, live=False)
    for tenth in range(5, 125, 5):  # an event every 0.5 s for 12 s
        printer(staging_event(tenth / 10, tenth * (20 << 20)))  # 200 MiB/s
    printer(RunEvent("staged", "staged 2 input(s)", counts={"queued": 2}, elapsed_s=12.5))
    lines = stream.getvalue().splitlines()
    assert lines == [
        "   0.5s  staging 100.0 MiB of 10.0 GiB (0%)",
        "   5.5s  staging 1.1 GiB of 10.0 GiB (10%)",
        "  10.5s  staging 2.1 GiB of 10.0 GiB (20%)",
        "  12.5s  staged 2 input(s)",
    ]


def test_run_shows_staging_progress_and_json_output_is_unchanged(fake_registry, tmp_path, capsys):
    reference = tmp_path / "ref genome.fa"
    reference.write_bytes(b"A" * (3 << 20))
    plan = tmp_path / "stage.toml"
    plan.write_text(
        "[backend]\ntype = 'fake'\n\n"
        "[[tasks]]\nkind = 'align'\nimage = 'busybox:latest'\ncommand = ['true']\n"
        f"inputs = [{{ uri = {json.dumps(str(reference))}, logical_path = 'ref/genome.fa' }}]\n"
    )
    fake_registry.stage_bytes = {"ref/genome.fa": 3 << 20}
    code, out, err = run_cli(["run", plan, "--run-dir", tmp_path / "plain"], capsys)
    assert code == 0, err
    assert "staging 1 input(s)\n" in err
    shown = re.findall(r"  staging [\d.]+ [KM]iB of 3\.0 MiB \(\d+%\)\n", err)
    assert len(shown) == 1, err  # the first event, then nothing for 5 s
    assert " MiB" not in out

    code, out, err = run_cli(["run", plan, "--run-dir", tmp_path / "json", "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert list(data) == ["run_dir", "backend", "run_id", "ok", "elapsed_s", "counts", "tasks"]
    assert " MiB" not in out
    assert " MiB" not in err


@pytest.mark.skipif(not Path("/proc/self/mem").is_file(), reason="needs Linux /proc")
def test_verify_reports_an_unreadable_file_as_failed_without_a_traceback(tmp_path, capsys):
    # /proc/self/mem is a regular file whose first read fails with EIO
    good = tmp_path / "good.bin"
    good.write_bytes(b"weights")
    digest = sha256_file(good)
    code, out, err = run_cli(["verify", "/proc/self/mem", good, "--digest", digest], capsys)
    assert code == 1
    assert out.splitlines()[0].startswith("/proc/self/mem: FAILED (")
    assert "Input/output error" in out.splitlines()[0]
    assert out.splitlines()[1] == f"{good}: OK"
    assert "Traceback" not in err


def test_a_backend_whose_poll_fails_for_good_is_one_line_not_a_traceback(
    fake_registry, fake_backend_class, plan_file, tmp_path, capsys, monkeypatch
):
    # e.g. the Kubernetes backend's K8sApiError (a RuntimeError) for a 403 Forbidden
    async def forbidden(self, handles):
        raise RuntimeError("403 Forbidden: jobs.batch is forbidden for this service account")

    monkeypatch.setattr(fake_backend_class, "poll", forbidden)
    code, out, err = run_cli(["run", plan_file, "--run-dir", tmp_path / "r"], capsys)
    assert code == 1
    stopped, resume = err.splitlines()[-2:]
    assert stopped.startswith("altar: backend 'fake' poll failed: RuntimeError: 403 Forbidden")
    assert "its submitted tasks keep running" in stopped
    assert "resume it with the same run directory" in stopped
    assert resume == f"altar: resume with: altar run {plan_file} --run-dir {tmp_path / 'r'}"
    assert "Traceback" not in err
    code, out, err = run_cli(["status", tmp_path / "r"], capsys)
    assert code == 0
    assert "the backend's poll failed, showing the journal only: RuntimeError: 403" in err
    assert out.splitlines()[0].startswith("TASK")


def test_provider_text_in_error_lines_cannot_drive_the_terminal(
    fake_registry, fake_backend_class, plan_file, tmp_path, capsys, monkeypatch
):
    async def hostile(self, handles):
        raise RuntimeError("token refused\x1b]0;PWNED\x07\x1b[2J")

    monkeypatch.setattr(fake_backend_class, "poll", hostile)
    code, _, run_err = run_cli(["run", plan_file, "--run-dir", tmp_path / "r"], capsys)
    assert code == 1
    code, _, status_err = run_cli(["status", tmp_path / "r"], capsys)
    assert code == 0
    for err in (run_err, status_err):
        assert "token refused\\x1b]0;PWNED\\x07\\x1b[2J" in err
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", err)


def test_status_shows_the_journal_when_the_backend_cannot_be_reached_to_be_built(
    fake_registry, fake_backend_class, plan_file, tmp_path, capsys, monkeypatch
):
    from altar.execution import BackendUnavailableError

    assert run_cli(["run", plan_file, "--run-dir", tmp_path / "r"], capsys)[0] == 0

    def unreachable(self, **options):
        raise BackendUnavailableError("cannot connect to the Docker daemon")

    monkeypatch.setattr(fake_backend_class, "__init__", unreachable)
    code, out, err = run_cli(["status", tmp_path / "r"], capsys)
    assert code == 0
    assert "showing the journal only" in err
    assert "cannot connect to the Docker daemon" in err
    assert [line.split()[2] for line in out.splitlines()[1:5]] == ["succeeded"] * 4


def test_text_from_tasks_cannot_drive_the_terminal():
    """A log tail or provider message with escape sequences is shown escaped, never obeyed."""
    from altar.execution.run.progress import format_event, format_failures, terminal_safe

    hostile = "ok\x1b]0;pwned\x07\r\x1b[2Kfake success\x9b31m\ttab kept"
    assert terminal_safe(hostile) == (
        "ok\\x1b]0;pwned\\x07\\x0d\\x1b[2Kfake success\\x9b31m\ttab kept"
    )
    task = TaskResult("t", "kind\x1b[31m", "failed", 1, reason="exit_1", detail=f"first\n{hostile}")
    rendered = format_table([task]) + format_failures([task])
    event = RunEvent("failed", f"t failed: {hostile}\nsecond line", counts={}, elapsed_s=1.0)
    rendered += format_event(event, plain=True)
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", rendered)
    assert "\\x1b]0;pwned" in rendered
    assert "first" in format_failures([task])  # the detail's own lines are kept
    assert "\n" not in format_event(event, plain=True)


def test_verify_names_a_missing_file_as_missing(tmp_path, capsys):
    missing = tmp_path / "nowhere.bin"
    code, out, _ = run_cli(["verify", missing, "--digest", "sha256:" + "0" * 64], capsys)
    assert code == 1
    assert out == f"{missing}: FAILED (file at {str(missing)!r} does not exist)\n"


def test_json_on_a_log_still_prints_retries_and_outages(fake_registry, plan_file, tmp_path, capsys):
    # stderr is not a terminal here (capsys), as in every CI job
    fake_registry.script = {"fold-1": ["oom", "ok"], "fold-2": ["unavailable", "ok"]}
    code, out, err = run_cli(["run", plan_file, "--run-dir", tmp_path / "r", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["ok"] is True
    assert "fold-1 attempt 1 failed (oom_killed); retrying" in err
    assert "fold-2: submit: BackendUnavailableError: fake provider is down" in err
    assert "submitted" not in err  # routine progress stays out of a --json log


def _outage_event(message: str, elapsed: float) -> RunEvent:
    return RunEvent("backend_unavailable", message, elapsed_s=elapsed)


def test_an_outage_prints_its_advice_once_then_a_short_line():
    advice = (
        "poll: BackendUnavailableError: cannot reach the Docker engine at unix:///x: refused. "
        "Start the engine (`sudo systemctl start docker`) or set DOCKER_HOST."
    )
    stream = io.StringIO()
    printer = ProgressPrinter(stream, total=2, live=False)
    for second in range(3):
        printer(_outage_event(advice, second * 5.0))
    printer(_outage_event(advice.replace("poll:", "fold-0: submit:", 1), 16.0))
    lines = stream.getvalue().splitlines()
    assert len(lines) == 4
    assert lines[0].endswith(advice)
    assert lines[1] == "   5.0s  poll: the backend is still unavailable (as above)"
    assert lines[2] == "  10.0s  poll: the backend is still unavailable (as above)"
    assert lines[3] == "  16.0s  fold-0: submit: the backend is still unavailable (as above)"
    assert stream.getvalue().count("systemctl") == 1
    # the backend answered: a later outage is reported in full again
    printer(RunEvent("submitted", "fold-0 submitted (x)", task_id="fold-0", elapsed_s=20.0))
    printer(_outage_event(advice, 25.0))
    assert stream.getvalue().count("systemctl") == 2


def test_every_run_stopped_error_is_one_line_and_exit_1(
    fake_registry, plan_file, tmp_path, capsys, monkeypatch
):
    from altar.execution.errors import RunStoppedError

    class SomeNewStop(RunStoppedError):
        pass

    async def stopped(*args, **kwargs):
        raise SomeNewStop("the run stopped for a reason\nnamed here; resume it")

    monkeypatch.setattr(runner, "run_plan", stopped)  # the cli imports it when it runs
    code, _, err = run_cli(["run", plan_file, "--run-dir", tmp_path / "run"], capsys)
    assert code == 1
    assert err.splitlines()[-1] == "altar: the run stopped for a reason named here; resume it"
