"""The premise of ``queue_filling.py`` on the real Slurm: a job of a test that fills the queue
is ordered after a job submitted later without ``--nice``."""

from __future__ import annotations

import subprocess

import pytest

from .queue_filling import LOW_PRIORITY, NICE

pytestmark = [pytest.mark.slurm]


def _sbatch(*options: str) -> str:
    # --begin keeps both pending (a held job's priority reads 0), so their priorities compare.
    argv = ["sbatch", "--parsable", "--begin=now+600", "--job-name=altar-test-nice"]
    argv += ["--output=/dev/null", *options, "--wrap", "true"]
    done = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60)
    return done.stdout.strip().split(";")[0]


def _priority(job_id: str) -> int:
    done = subprocess.run(
        ["squeue", "-h", "-j", job_id, "-o", "%Q"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return int(done.stdout.strip())


def test_a_queue_filling_job_starts_after_a_plain_job_submitted_later(
    slurm_cluster: dict[str, str],
) -> None:
    (option, value), *_ = LOW_PRIORITY.items()
    filling = _sbatch(f"{option}={value}", f"--partition={slurm_cluster['partition']}")
    try:
        plain = _sbatch(f"--partition={slurm_cluster['partition']}")
        try:
            assert _priority(filling) < _priority(plain), (NICE, filling, plain)
        finally:
            subprocess.run(["scancel", plain], check=False, timeout=60)
    finally:
        subprocess.run(["scancel", filling], check=False, timeout=60)
