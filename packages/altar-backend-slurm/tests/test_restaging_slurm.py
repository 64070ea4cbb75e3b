"""The stale-bytes case on real Slurm: a retried job runs on what the plan names now (issue 23)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest
from altar.backends.slurm import SlurmExecutionBackend
from altar.execution import ContainerTaskSpec, Transfer
from altar.execution.plans.plan import Plan, plan_from_specs
from altar.execution.run.retrying import reopen_failed_in
from altar.execution.run.runner import StagingError, run_plan

pytestmark = [pytest.mark.slurm, pytest.mark.docker]

IMAGE = os.environ.get("ALTAR_TEST_IMAGE", "busybox:latest")


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def plan_reading(tmp_path: Path, source: Path, data: bytes | None) -> Plan:
    task = ContainerTaskSpec(
        kind="restage",
        image=IMAGE,
        command=["sh", "-c", "cd {altar:mount_root} && grep -q good in/d.txt && cp in/d.txt o.txt"],
        inputs=[Transfer(str(source), "in/d.txt", digest=None if data is None else sha(data))],
        outputs=[Transfer(str(tmp_path / "out.txt"), "o.txt")],
    )
    return plan_from_specs([task], backend_type="slurm")


async def run(tmp_path: Path, plan: Plan, options: dict[str, Any]) -> bool:
    backend = SlurmExecutionBackend(**options)
    result = await run_plan(plan, backend, run_dir=tmp_path / "run", max_retries=0)
    return result.ok


@pytest.fixture
def options(tmp_path: Path, docker_host: str, slurm_cluster: dict[str, str]) -> dict[str, Any]:
    return {
        "data_root": str(tmp_path / "data"),
        "partition": slurm_cluster["partition"],
        "container_runtime": "docker",
        "runtime_options": ["-H", docker_host],
    }


@pytest.mark.asyncio
async def test_a_fixed_input_file_reaches_the_retried_job(
    tmp_path: Path, options: dict[str, Any]
) -> None:
    source = tmp_path / "d.txt"
    source.write_bytes(b"bad\n")
    plan = plan_reading(tmp_path, source, None)
    assert not await run(tmp_path, plan, options)
    source.write_bytes(b"good\n")
    reopen_failed_in(tmp_path / "run", plan)
    assert await run(tmp_path, plan, options)
    assert (tmp_path / "out.txt").read_bytes() == b"good\n"


@pytest.mark.asyncio
async def test_an_edited_digest_reaches_the_retried_job_or_is_refused(
    tmp_path: Path, options: dict[str, Any]
) -> None:
    source = tmp_path / "d.txt"
    source.write_bytes(b"bad\n")
    assert not await run(tmp_path, plan_reading(tmp_path, source, b"bad\n"), options)
    source.write_bytes(b"good\n")
    stale = plan_reading(tmp_path, source, b"bad\n")  # the file fixed, its digest not
    reopen_failed_in(tmp_path / "run", stale)
    with pytest.raises(StagingError, match="changed since it was staged"):
        await run(tmp_path, stale, options)
    fixed = plan_reading(tmp_path, source, b"good\n")
    reopen_failed_in(tmp_path / "run", fixed)
    assert await run(tmp_path, fixed, options)
    assert (tmp_path / "out.txt").read_bytes() == b"good\n"
