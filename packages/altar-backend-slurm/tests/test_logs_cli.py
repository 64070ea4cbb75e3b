"""``altar logs`` on real Slurm (issue 23 item 4): ``--follow`` prints a running job's output
as it comes and ends when the job ends; after success ``altar logs`` prints its stdout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from altar.execution.state.journal import Journal

pytestmark = [pytest.mark.slurm, pytest.mark.docker]

WAIT_S = 240  # the job may queue behind other helpers' jobs on the 2-CPU node


def _altar() -> str:
    return shutil.which("altar", path=os.path.dirname(sys.executable)) or "altar"


def _plan(tmp_path: Path, docker_host: str, partition: str, data: Path) -> Path:
    # "first", then wait for the test to open the gate (a file on the bound data root), then
    # "second": the follow must show "first" while the job still runs.
    script = (
        "echo first; i=0; while [ ! -e /mnt/volume/gate ] && [ $i -lt 600 ]; do sleep 0.2; "
        "i=$((i+1)); done; echo second; echo to-stderr >&2"
    )
    image = os.environ.get("ALTAR_TEST_IMAGE", "busybox:latest")
    plan = tmp_path / "plan.toml"
    plan.write_text(
        '[backend]\ntype = "slurm"\n\n[backend.options]\ncontainer_runtime = "docker"\n'
        f"runtime_options = {json.dumps(['-H', docker_host])}\n"
        f"partition = {json.dumps(partition)}\ndata_root = {json.dumps(str(data))}\n\n"
        f'[[tasks]]\nid = "t"\nkind = "k"\nimage = {json.dumps(image)}\n'
        f"command = {json.dumps(['sh', '-c', script])}\n"
    )
    return plan


def _submitted(run_dir: Path, deadline: float) -> None:
    while time.monotonic() < deadline:
        if Journal.exists(run_dir):
            record = Journal.load(run_dir).tasks["t"]
            if record.attempts and record.attempts[-1].handle is not None:
                return
        time.sleep(0.2)
    raise AssertionError("the task was not submitted in time")


def test_logs_follow_a_running_slurm_job_until_it_ends_then_serve_its_stdout(
    tmp_path: Path, docker_host: str, slurm_cluster: dict[str, str]
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    plan = _plan(tmp_path, docker_host, slurm_cluster["partition"], data)
    run_dir = tmp_path / "run"
    run = subprocess.Popen(
        [_altar(), "run", str(plan), "--run-dir", str(run_dir), "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    follow: subprocess.Popen[str] | None = None
    try:
        deadline = time.monotonic() + WAIT_S
        _submitted(run_dir, deadline)
        follow = subprocess.Popen(
            [_altar(), "logs", str(run_dir), "t", "--follow"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert follow.stdout is not None
        first = follow.stdout.readline()  # blocks until the job printed it (queue wait too)
        assert first == "first\n"
        assert follow.poll() is None, "follow ended while the job was still running"
        (data / "gate").touch()
        out, err = follow.communicate(timeout=WAIT_S)  # ends because the job ended
        assert follow.returncode == 0, err
        assert out == "second\n"
        assert err == "to-stderr\n"
        run_out, run_err = run.communicate(timeout=WAIT_S)
        assert run.returncode == 0, run_out + run_err
    finally:
        (data / "gate").touch()
        for child in (follow, run):
            if child is not None and child.poll() is None:
                child.kill()
                child.communicate()

    # after success (and the job directory's cleanup): its stdout and stderr, exactly
    done = subprocess.run(
        [_altar(), "logs", str(run_dir), "t"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert (done.stdout, done.stderr) == ("first\nsecond\n", "to-stderr\n")
    assert not list(data.glob(".altar-slurm/jobs/*")), "the job directory was left behind"
