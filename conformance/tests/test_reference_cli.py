"""``altar run`` with the in-process backend, as a user runs it: the installed command."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

PLAN = """
[backend]
type = "in-process"
{options}

[[tasks]]
id = "hello"
kind = "hello"
image = "busybox:latest"
command = ["sh", "-c", "mkdir -p jobs && printf 'hello %s' \\"$WHO\\" > jobs/hello.txt"]
env = {{ WHO = "world" }}
outputs = [{{ uri = "out/hello.txt", logical_path = "jobs/hello.txt" }}]
"""


def _altar() -> str:
    found = shutil.which("altar", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.skip("the altar command is not installed next to this interpreter")
    return found


def _run(plan: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALTAR_")}
    return subprocess.run(
        [_altar(), "run", str(plan), "--run-dir", str(cwd / "run")],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize("options", ["", 'options = { data_root = "data" }'])
def test_a_plan_runs_its_commands_as_local_processes_by_default(
    tmp_path: Path, options: str
) -> None:
    project = tmp_path / "project"
    elsewhere = tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    plan = project / "plan.toml"
    plan.write_text(PLAN.format(options=options))
    result = _run(plan, elsewhere)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (project / "out" / "hello.txt").read_text() == "hello world"
    if options:
        # data_root = "data" names the plan's folder's data, not the current directory's
        assert (project / "data" / "jobs" / "hello.txt").is_file()
        assert not (elsewhere / "data").exists()


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ('options = { slots = "many" }', "slots must be a whole number of 1 or more, got 'many'"),
        ("options = { slots = 0 }", "slots must be a whole number of 1 or more, got 0"),
        ("options = { gpus = true }", "gpus must be zero or more, got True"),
        ("options = { max_timeout_s = 1.5 }", "max_timeout_s must be a positive number"),
    ],
)
def test_an_option_of_the_wrong_type_is_refused_by_check_before_anything_runs(
    tmp_path: Path, options: str, named: str
) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN.format(options=options))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALTAR_")}
    for command in (["check", str(plan)], ["run", str(plan), "--run-dir", str(tmp_path / "r")]):
        result = subprocess.run(
            [_altar(), *command],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 2, result.stdout + result.stderr
        assert named in result.stderr
        assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def _crash_plan(tasks: int) -> str:
    parts = ['max_parallel = 6\n[backend]\ntype = "in-process"\noptions = { data_root = "data" }\n']
    for i in range(tasks):
        script = f"echo start-t{i} >> ledger; sleep 0.5; echo done-t{i} >> ledger"
        parts.append(
            f'[[tasks]]\nid = "t{i}"\nkind = "k"\nimage = "busybox:latest"\n'
            f'command = ["sh", "-c", "{script}"]\n'
        )
    return "\n".join(parts)


def test_a_run_killed_again_and_again_runs_every_task_exactly_once(tmp_path: Path) -> None:
    # SIGKILL at moments spread over start-up, submits, polls and collection (where each kill
    # lands depends on the machine; what is asserted does not): every resume adopts what the
    # killed runs left, by handle or by submission key.
    tasks = 16
    plan = tmp_path / "plan.toml"
    plan.write_text(_crash_plan(tasks))
    command = [_altar(), "run", str(plan), "--run-dir", str(tmp_path / "run")]
    for delay in (0.6, 0.9, 1.2, 1.5, 1.8, 2.1):
        killed = subprocess.Popen(
            command, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            killed.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            killed.send_signal(signal.SIGKILL)
            killed.wait()
    final = _run(plan, tmp_path)
    assert final.returncode == 0, final.stdout + final.stderr
    ledger = (tmp_path / "data" / "ledger").read_text().split()
    for i in range(tasks):
        assert ledger.count(f"start-t{i}") == 1, f"t{i} ran {ledger.count(f'start-t{i}')} times"
        assert ledger.count(f"done-t{i}") == 1
    records = tmp_path / "data" / ".altar-in-process" / "tasks"
    assert not list(records.iterdir()), "records left behind after the run ended"
