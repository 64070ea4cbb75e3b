"""examples/routing (issue 26): local Docker and in-process in one run, equal to one backend."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from altar.execution.errors import JournalError
from altar.execution.state.journal import Journal

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "routing"
ALTAR = str(Path(sys.executable).parent / "altar")


def _altar(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ALTAR, *argv], capture_output=True, text=True, timeout=600, check=False, cwd=cwd
    )


@pytest.mark.docker
def test_the_routing_example_moves_its_scores_and_matches_one_backend(
    docker_host: str, tmp_path: Path
) -> None:
    example = tmp_path / "routing"
    shutil.copytree(EXAMPLE, example, ignore=shutil.ignore_patterns("results"))
    plan = str(example / "plan.toml")
    dry = _altar("run", plan, "--dry-run", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert "transfer routing/low.tsv: score-low@cpu -> summary@host" in dry.stdout
    assert not (example / "results").exists()
    routed = _altar("run", plan, "--run-dir", str(tmp_path / "routed"), "--json", cwd=tmp_path)
    assert routed.returncode == 0, routed.stderr
    moved = json.loads(routed.stdout)["transfers"]
    sizes = sum((example / "results" / n).stat().st_size for n in ("low.tsv", "high.tsv"))
    assert (moved["files"], moved["bytes"]) == (2, sizes)
    assert (example / "results/summary.txt").read_text().split() == ["2", "1"]
    journal = json.loads((tmp_path / "routed/journal.json").read_text())
    backends = {t: r["attempts"][-1]["handle"]["backend"] for t, r in journal["tasks"].items()}
    assert backends == {"score-low": "local", "score-high": "local", "summary": "in-process"}
    one = _altar("run", plan, "--backend", "cpu", "--run-dir", str(tmp_path / "one"), cwd=tmp_path)
    assert one.returncode == 0, one.stderr
    assert "moved" not in one.stdout  # one backend: nothing moves
    compared = _altar(
        "compare", str(tmp_path / "routed"), str(tmp_path / "one"), "--json", cwd=tmp_path
    )
    assert compared.returncode == 0, compared.stdout + compared.stderr
    assert json.loads(compared.stdout)["differences"] == []


@pytest.mark.docker
def test_a_routed_run_killed_mid_run_resumes_each_task_once_and_leaves_nothing(
    docker_host: str, tmp_path: Path
) -> None:
    """SIGKILL while the Docker lane's tasks run; the same ``altar run`` again finishes every
    task in one attempt (adopted, not relaunched) and no container of the run is left."""
    import os
    import signal
    import time

    example = tmp_path / "routing"
    shutil.copytree(EXAMPLE, example, ignore=shutil.ignore_patterns("results"))
    plan_path = example / "plan.toml"
    plan_path.write_text(plan_path.read_text().replace("awk '$2", "sleep 3; awk '$2"))
    argv = [ALTAR, "run", str(plan_path), "--run-dir", str(tmp_path / "run")]
    first = subprocess.Popen(
        argv, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if _handles(tmp_path / "run") >= 2:  # both containers launched and journaled
            break
        time.sleep(0.05)
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    again = _altar(*argv[1:], cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    journal = Journal.load(tmp_path / "run")
    assert {t: len(r.attempts) for t, r in journal.tasks.items()} == {
        "score-low": 1,
        "score-high": 1,
        "summary": 1,
    }
    assert (example / "results/summary.txt").read_text().split() == ["2", "1"]
    left = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=altar.run={journal.run_id}"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert left.stdout.strip() == ""


def _handles(run_dir: Path) -> int:
    try:
        tasks = Journal.load(run_dir).tasks
    except (OSError, ValueError, JournalError):
        return 0  # not written yet
    return sum(1 for r in tasks.values() for a in r.attempts if a.handle is not None)


@pytest.mark.docker
def test_status_and_cancel_of_a_routed_run_reach_both_backends(
    docker_host: str, tmp_path: Path
) -> None:
    """A task in a container on local Docker and one on the in-process backend, both running:
    ``altar status`` shows each on its backend, ``altar cancel`` ends both, nothing is left."""
    import time
    import uuid

    marker = f"routed-cancel-{uuid.uuid4().hex[:12]}"
    plan = tmp_path / "plan.toml"
    plan.write_text(
        f"""
[backends.cpu]
type = "local"
options = {{ network = "none" }}

[backends.host]
type = "in-process"

[[tasks]]
id = "boxed"
kind = "k"
image = "busybox:latest"
command = ["sh", "-c", "sleep 120; echo {marker}"]
resources = {{ cpu = 0.25, memory_gb = 0.0625 }}

[[tasks]]
id = "hosted"
kind = "k"
backend = "host"
image = "busybox:latest"
command = ["sh", "-c", "sleep 120; echo {marker}"]
"""
    )
    run_dir = tmp_path / "run"
    argv = [ALTAR, "run", str(plan), "--run-dir", str(run_dir)]
    runner = subprocess.Popen(
        argv, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and _handles(run_dir) < 2:
            time.sleep(0.1)
        assert _handles(run_dir) == 2
        status = _altar("status", str(run_dir), "--json", cwd=tmp_path)
        tasks = {t["id"]: t for t in json.loads(status.stdout)["tasks"]}
        assert {t: tasks[t]["status"] for t in tasks} == {"boxed": "running", "hosted": "running"}
        cancelled = _altar("cancel", str(run_dir), cwd=tmp_path)
        assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
        runner.wait(timeout=60)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
    journal = Journal.load(run_dir)
    assert {t: r.state for t, r in journal.tasks.items()} == {
        "boxed": "cancelled",
        "hosted": "cancelled",
    }
    left = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=altar.run={journal.run_id}"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert left.stdout.strip() == ""
    alive = [
        p for p in Path("/proc").iterdir()
        if p.name.isdigit() and marker.encode() in _cmdline(p)
    ]  # fmt: skip
    assert alive == []


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""  # gone meanwhile
