"""A runner killed while it submits, then resumed: every task runs as exactly one Slurm job."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .queue_filling import NICE, QUEUE_FILLING

pytestmark = [pytest.mark.slurm, pytest.mark.docker, pytest.mark.slow]

TASKS = 3


def _plan(path: Path, image: str, count: int) -> Path:
    # a few sleeping tasks, or many trivial ones (one array, the runner's window wide open)
    command = '["sleep", "15"]' if count == TASKS else '["true"]'
    tasks = "".join(
        f'[[tasks]]\nid = "t{i}"\nkind = "sleep"\nimage = "{image}"\n'
        f'command = {command}\nlabels = {{ n = "{i}" }}\n\n'
        for i in range(count)
    )
    path.write_text(f'max_parallel = {count}\n\n[backend]\ntype = "slurm"\n\n{tasks}')
    return path


def _our_jobs(scratch: str) -> list[tuple[str, str]]:
    out = subprocess.run(
        ["sacct", "-n", "-X", "-P", "-S", "now-1hour", "-o", "JobID,State,WorkDir"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = [line.split("|", 2) for line in out.splitlines()]
    return [(r[0], r[1]) for r in rows if len(r) == 3 and r[2].startswith(scratch)]


def _queued(scratch: str) -> int:
    out = subprocess.run(
        ["squeue", "-h", "--me", "-o", "%Z"], capture_output=True, text=True, check=True
    ).stdout
    return sum(1 for line in out.splitlines() if line.startswith(scratch))


def _marked(jobs_dir: Path) -> bool:
    """Whether an array submit has begun: some task's array marker is written."""
    return any(jobs_dir.glob("*/array"))


@pytest.mark.parametrize(
    ("kill_when", "count"),
    [
        ("queued", TASKS),
        ("array-marked", TASKS),
        ("arrays-off", TASKS),
        pytest.param("queued", 200, marks=QUEUE_FILLING),
    ],
)
def test_a_runner_killed_during_submit_resumes_without_a_second_job(
    tmp_path: Path, docker_host: str, slurm_cluster: dict[str, str], kill_when: str, count: int
) -> None:
    """Killed once Slurm has a job, or once an array's markers are written (before or just
    after its sbatch), or with arrays off: the resumed run adopts, never submits twice. With
    200 ready tasks all go in one array (the runner's window is Slurm's array_max)."""
    image = os.environ.get("ALTAR_TEST_IMAGE", "busybox:latest")
    plan = _plan(tmp_path / "plan.toml", image, count)
    data_root = tmp_path / "data"
    scratch = f"{data_root}/.altar-slurm/"  # single jobs' dirs (jobs/) and arrays' (arrays/)
    altar = shutil.which("altar", path=os.path.dirname(sys.executable)) or "altar"
    argv = [
        altar, "run", str(plan), "--run-dir", str(tmp_path / "run"),
        "--option", 'container_runtime="docker"',
        "--option", f"runtime_options={json.dumps(['-H', docker_host])}",
        "--option", f"partition={json.dumps(slurm_cluster['partition'])}",
        "--option", f"data_root={json.dumps(str(data_root))}",
        *(["--option", "arrays=false"] if kill_when == "arrays-off" else []),
        # a queue of 200: other tests' jobs go first
        *(["--option", f'extra_directives={{ --nice = "{NICE}" }}'] if count > TASKS else []),
    ]  # fmt: skip
    first = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        jobs_dir = data_root / ".altar-slurm" / "jobs"
        while first.poll() is None and (
            not _marked(jobs_dir) if kill_when == "array-marked" else _queued(scratch) == 0
        ):
            assert time.monotonic() < deadline, "the runner submitted nothing"
            time.sleep(0.05)
    finally:
        first.send_signal(signal.SIGKILL)  # mid-submit: some jobs queued, maybe not journaled
        first.wait()
    resumed = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=600)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    deadline = time.monotonic() + 60
    while len(jobs := _our_jobs(scratch)) < count and time.monotonic() < deadline:
        time.sleep(1)  # accounting learns of the last end a moment later
    assert len(jobs) == count, f"expected one job per task, Slurm ran {jobs}"
    assert {state for _, state in jobs} == {"COMPLETED"}
    assert _queued(scratch) == 0  # nothing left behind on the shared node
