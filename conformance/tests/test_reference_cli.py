"""``altar run`` with the in-process backend, as a user runs it: the installed command."""

from __future__ import annotations

import os
import shutil
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
