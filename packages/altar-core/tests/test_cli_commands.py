"""``altar runs``, ``altar check`` / ``run --dry-run``, ``run --retry-failed`` and ``--quiet``."""

from __future__ import annotations

import json
import re

import pytest
from altar.execution import UnsupportedCapabilityError
from altar.execution.cli import command as cli
from altar.execution.state.journal import Journal


def run_cli(argv, capsys):
    code = cli.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# -- altar runs ----------------------------------------------------------------------------


def test_runs_lists_run_directories_newest_first(fake_registry, plan_file, tmp_path, capsys):
    fake_registry.script = {"fold-1": ["exit_3"]}
    root = tmp_path / "runs"
    assert run_cli(["run", plan_file, "--run-dir", root / "a"], capsys)[0] == 1
    fake_registry.script = {}
    fake_registry.tasks.clear()
    assert run_cli(["run", plan_file, "--run-dir", root / "b"], capsys)[0] == 0
    (root / "not-a-run").mkdir()
    code, out, _ = run_cli(["runs", root], capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["RUN", "STATE", "BACKEND", "STARTED", "TASKS", "PLAN"]
    assert lines[1].startswith(str(root / "b"))
    assert "finished" in lines[1]
    assert "4 succeeded" in lines[1]
    assert "2 succeeded, 1 failed, 1 skipped" in lines[2]
    assert lines[2].endswith(str(plan_file))
    assert len(lines) == 3
    code, out, _ = run_cli(["runs", root, "--json"], capsys)
    data = json.loads(out)
    assert [Journal.load(root / "b").run_dir, Journal.load(root / "a").run_dir] == [
        root / "b",
        root / "a",
    ]
    assert [run["run_dir"] for run in data] == [str(root / "b"), str(root / "a")]
    assert data[1]["counts"] == {"succeeded": 2, "failed": 1, "skipped": 1}
    assert data[1]["backend"] == "fake"
    (tmp_path / "none").mkdir()
    code, out, _ = run_cli(["runs", tmp_path / "none"], capsys)
    assert (code, out) == (0, f"no runs under {tmp_path / 'none'}\n")


def test_runs_reads_an_exact_summary_and_falls_back_to_the_journal_when_it_is_not(
    fake_registry, plan_file, tmp_path, capsys, monkeypatch
):
    from altar.execution.state import runs as runs_module
    from altar.execution.state.summary import SUMMARY_NAME

    fake_registry.script = {"fold-1": ["exit_3"]}
    root = tmp_path / "runs"
    assert run_cli(["run", plan_file, "--run-dir", root / "a"], capsys)[0] == 1
    from_journal = json.loads(run_cli(["runs", root, "--json"], capsys)[1])
    assert (root / "a" / SUMMARY_NAME).is_file()
    real_load = Journal.load
    loads = []
    monkeypatch.setattr(
        runs_module.Journal, "load", lambda d: loads.append(d) or real_load(d), raising=True
    )
    assert json.loads(run_cli(["runs", root, "--json"], capsys)[1]) == from_journal
    assert loads == []  # the summary was exact: no journal read
    assert from_journal[0]["counts"] == {"succeeded": 2, "failed": 1, "skipped": 1}
    # a change appended to the log after the snapshot makes the summary inexact
    journal = real_load(root / "a")
    journal.tasks["fold-1"].state = "succeeded"
    journal.mark(journal.tasks["fold-1"])
    journal.flush()
    data = json.loads(run_cli(["runs", root, "--json"], capsys)[1])
    assert loads == [root / "a"]
    assert data[0]["counts"] == {"succeeded": 2, "collecting": 1, "skipped": 1}
    # a summary from another snapshot, or damaged, is not believed either
    journal.save()
    older = (root / "a" / SUMMARY_NAME).read_bytes()  # exact for this snapshot
    (root / "a" / SUMMARY_NAME).write_text('{"format": "altar-run-summary/1", "counts": {}}')
    assert json.loads(run_cli(["runs", root, "--json"], capsys)[1]) == data
    assert len(loads) == 2
    # the summary is not fsynced: a power cut may leave it empty, or the one of the snapshot
    # before (its rename lost); the snapshot is durable first, so neither is believed
    journal.save()
    (root / "a" / SUMMARY_NAME).write_bytes(b"")
    assert json.loads(run_cli(["runs", root, "--json"], capsys)[1]) == data
    (root / "a" / SUMMARY_NAME).write_bytes(older)
    assert json.loads(run_cli(["runs", root, "--json"], capsys)[1]) == data
    assert len(loads) == 4


# -- altar check / run --dry-run ---------------------------------------------------------------


def test_check_passes_a_good_plan_and_creates_nothing(fake_registry, plan_file, tmp_path, capsys):
    code, out, err = run_cli(["check", plan_file], capsys)
    assert (code, err) == (0, "")
    assert out.startswith(f"{plan_file}: 4 task(s) on fake: plan and backend options valid")
    assert "note: backend 'fake' cannot tell whether 1 image(s) exist" in out
    code, out, _ = run_cli(["run", plan_file, "--dry-run", "--json"], capsys)
    assert code == 0
    assert json.loads(out)["ok"] is True
    assert not (tmp_path / ".altar").exists()
    assert fake_registry.submits == {}
    assert fake_registry.stage_calls == []


def test_check_names_every_problem_with_its_field(
    fake_registry, plan_file, tmp_path, capsys, monkeypatch
):
    weights = tmp_path / "w.bin"
    weights.write_bytes(b"w")
    text = plan_file.read_text().replace(
        'labels = { task = "fold-0" }',
        'labels = { task = "fold-0" }\ninputs = [{ uri = "missing.bin", logical_path = "in/m", '
        'digest = "sha256:' + "0" * 64 + '" }, { uri = "w.bin", logical_path = "in/w" }]',
    )
    text = text.replace(
        'labels = { task = "fold-2" }', 'labels = { task = "fold-2" }\nresources = { gpu = "h100" }'
    )
    plan_file.write_text(text)
    backend_class = cli.default_registry.get("fake")

    async def check_spec(self, spec):
        if spec.resources.gpu:
            raise UnsupportedCapabilityError(
                f"no {spec.resources.gpu} GPUs here", capability="resources.gpu"
            )

    async def image_present(self, image):
        return image != "busybox:latest"

    monkeypatch.setattr(backend_class, "check_spec", check_spec)
    monkeypatch.setattr(backend_class, "image_present", image_present)
    code, out, err = run_cli(["check", plan_file], capsys)
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        f"altar: error: {plan_file}: tasks[0].inputs[0]: input "
        f"{str(tmp_path / 'missing.bin')!r} does not exist",
        f"altar: error: {plan_file}: tasks[0].image: backend 'fake' cannot find image "
        "'busybox:latest'",
        f"altar: error: {plan_file}: tasks[2].resources.gpu: backend 'fake' refuses it: "
        "no h100 GPUs here",
    ]
    code, out, err = run_cli(["run", plan_file, "--dry-run"], capsys)
    assert code == 2
    assert len(err.splitlines()) == 3
    assert fake_registry.submits == {}


# -- altar run --retry-failed ------------------------------------------------------------------


def test_retry_failed_reruns_failed_and_skipped_only(fake_registry, plan_file, tmp_path, capsys):
    fake_registry.script = {"fold-1": ["exit_3", "ok"]}
    run_dir = tmp_path / "r"
    assert run_cli(["run", plan_file, "--run-dir", run_dir], capsys)[0] == 1
    before = dict(fake_registry.submits)
    # a plain resume of a finished run reruns nothing
    code, _, _ = run_cli(["run", plan_file, "--run-dir", run_dir], capsys)
    assert code == 1
    assert fake_registry.submits == before
    code, out, err = run_cli(["run", plan_file, "--run-dir", run_dir, "--retry-failed"], capsys)
    assert code == 0, err
    assert "altar: rerunning 2 failed or skipped task(s): fold-1, summarize-3" in err
    assert fake_registry.submits == {**before, "fold-1": 2, "summary": 1}
    assert before.get("summary") is None
    data = Journal.load(run_dir).tasks
    assert [a.number for a in data["fold-1"].attempts] == [1, 2]
    assert data["fold-1"].state == "succeeded"
    assert "4 succeeded" in out


def test_retry_failed_gives_a_fresh_retry_budget(fake_registry, plan_file, tmp_path, capsys):
    fake_registry.script = {"fold-1": ["oom", "oom", "oom", "oom", "ok"]}
    run_dir = tmp_path / "r"
    args = ["run", plan_file, "--run-dir", run_dir, "--max-retries", "1"]
    assert run_cli(args, capsys)[0] == 1  # attempts 1 and 2 failed
    assert run_cli([*args, "--retry-failed"], capsys)[0] == 1  # 3 and 4
    assert run_cli([*args, "--retry-failed"], capsys)[0] == 0  # 5 succeeded
    assert fake_registry.submits["fold-1"] == 5


def test_retry_failed_accepts_an_edit_of_the_failed_task_only(
    fake_registry, plan_file, tmp_path, capsys
):
    fake_registry.script = {"fold-1": ["exit_3"]}
    run_dir = tmp_path / "r"
    run_cli(["run", plan_file, "--run-dir", run_dir], capsys)
    original = plan_file.read_text()
    plan_file.write_text(original.replace("echo 0 >", "echo zero >"))  # fold-0 succeeded
    code, _, err = run_cli(["run", plan_file, "--run-dir", run_dir, "--retry-failed"], capsys)
    assert code == 2
    assert "task 'fold-0' changed since this run started and it did not fail (succeeded)" in err
    plan_file.write_text(original.replace("echo 1 >", "echo one >"))  # the failed fold-1
    fake_registry.script = {"fold-1": ["exit_3", "ok"]}
    code, _, err = run_cli(["run", plan_file, "--run-dir", run_dir, "--retry-failed"], capsys)
    assert code == 0, err
    (last,) = [t for t in fake_registry.tasks.values() if t.key == "fold-1"][-1:]
    assert "echo one >" in " ".join(last.spec.command)


def test_retry_failed_needs_an_existing_run(fake_registry, plan_file, tmp_path, capsys):
    code, _, err = run_cli(
        ["run", plan_file, "--run-dir", tmp_path / "new", "--retry-failed"], capsys
    )
    assert code == 2
    assert "--retry-failed needs --run-dir naming an existing run" in err


# -- altar run --quiet -------------------------------------------------------------------------


def test_quiet_prints_the_summary_and_warnings_only(fake_registry, plan_file, tmp_path, capsys):
    fake_registry.script = {"fold-1": ["oom", "ok"]}
    code, out, err = run_cli(["run", plan_file, "--run-dir", tmp_path / "r", "--quiet"], capsys)
    assert code == 0
    assert re.fullmatch(rf"4 tasks: 4 succeeded in \S+; run directory {tmp_path / 'r'}\n", out)
    assert "retrying" in err
    assert "submitted" not in err


def test_quiet_prints_no_banner_or_resume_lines(fake_registry, plan_file, tmp_path, capsys):
    """Issue 23: --quiet is the summary and warnings/errors only, on a resume too."""
    from .test_cli_status import interrupt_after_submits

    run_dir = tmp_path / "r"
    interrupt_after_submits(plan_file, run_dir, 2)
    code, out, err = run_cli(["run", plan_file, "--run-dir", run_dir, "--quiet"], capsys)
    assert code == 0, err
    took = r"\S+ \(\S+ in this process\)"  # a resume: the run's history, then this process
    assert re.fullmatch(rf"4 tasks: 4 succeeded in {took}; run directory {run_dir}\n", out)
    assert err == ""
    fake_registry.script = {"fold-1": ["exit_3"]}
    run_dir = tmp_path / "r2"
    assert run_cli(["run", plan_file, "--run-dir", run_dir], capsys)[0] == 1
    fake_registry.script = {}
    code, out, err = run_cli(
        ["run", plan_file, "--run-dir", run_dir, "--retry-failed", "-q"], capsys
    )
    assert code == 0, err
    assert err == ""
    assert out.startswith("4 tasks: 4 succeeded")


@pytest.mark.parametrize("argv", [["check"], ["run", "--dry-run"]])
def test_check_json_prints_the_plan_errors_as_json(
    fake_registry, plan_file, tmp_path, capsys, argv
):
    """Issue 23: `check --json` printed no JSON on a plan error."""
    bad = tmp_path / "bad.toml"
    bad.write_text(
        plan_file.read_text().replace('labels = { task = "fold-1" }', "resources = { count = 0 }")
    )
    code, out, _ = run_cli([*argv, bad, "--json"], capsys)
    assert code == 2
    data = json.loads(out)
    assert data["ok"] is False
    assert data["problems"] == [
        f"{bad}: tasks[1].resources.count: resource count must be at least 1, got 0"
    ]


@pytest.mark.parametrize("name", ["missing", "a-file"])
def test_runs_on_a_missing_directory_is_an_error(tmp_path, capsys, name):
    """Issue 23: `altar runs TYPO` said "no runs" and exited 0."""
    (tmp_path / "a-file").write_text("x")
    code, out, err = run_cli(["runs", tmp_path / name], capsys)
    assert (code, out) == (2, "")
    what = "does not exist" if name == "missing" else "is not a directory"
    assert err == f"altar: error: {tmp_path / name} {what}; name a directory of run directories\n"


def test_a_run_dir_that_is_a_file_is_refused_before_the_banner(
    fake_registry, plan_file, tmp_path, capsys
):
    """Issue 23: `--run-dir FILE` printed the banner, then "File exists"."""
    path = tmp_path / "notes.txt"
    path.write_text("mine")
    code, out, err = run_cli(["run", plan_file, "--run-dir", path], capsys)
    assert (code, out) == (2, "")
    assert err == (
        f"altar: error: --run-dir {path} is a file, not a directory; name a new directory to "
        "start a run or an existing run directory to resume it\n"
    )
    assert path.read_text() == "mine"


BROKEN_PLAN = """\
colour = "blue"
[backend]
type = "fake"

[[tasks]]
kind = "a"
image = "i"
command = []
resources = { count = 0 }

[[tasks]]
kind = "b"
image = "i"

[[tasks]]
kind = "c"
image = "i"
command = []
"""


@pytest.mark.parametrize("command", ["check", "run"])
def test_every_plan_error_is_reported_at_once(fake_registry, tmp_path, capsys, command):
    """Issue 23: a plan's errors came one per run; now all of them, one line each, exit 2."""
    path = tmp_path / "bad.toml"
    path.write_text(BROKEN_PLAN)
    code, out, err = run_cli([command, path], capsys)
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        f"altar: error: {path}: colour: unknown field (expected one of: "
        + err.split("(expected one of: ")[1].split("\n")[0],
        f"altar: error: {path}: tasks[0].resources.count: resource count must be at least 1, got 0",
        f"altar: error: {path}: tasks[1].command: required",
    ]


def test_a_refused_resource_names_the_plan_field(fake_registry, tmp_path, capsys, monkeypatch):
    """Issue 23: a refused memory limit was blamed on tasks[0].memory."""
    from altar.execution import registry as registry_module

    backend_class = registry_module.get_backend_class("fake")

    async def check_spec(self, spec):
        raise UnsupportedCapabilityError("too little memory", capability="memory")

    monkeypatch.setattr(backend_class, "check_spec", check_spec)
    path = tmp_path / "p.toml"
    path.write_text(
        BROKEN_PLAN.split("[[tasks]]")[0].replace('colour = "blue"\n', "")
        + '[[tasks]]\nkind = "a"\nimage = "i"\ncommand = []\nresources = { memory_gb = 0.001 }\n'
    )
    code, _, err = run_cli(["check", path], capsys)
    assert code == 2
    assert (
        f"{path}: tasks[0].resources.memory_gb: backend 'fake' refuses it: too little memory" in err
    )
