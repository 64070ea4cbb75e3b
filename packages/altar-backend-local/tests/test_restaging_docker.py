"""The stale-bytes case on real Docker: a retry runs on what the plan names now (issue 23)."""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path

import pytest
from altar.backends.local import LocalDockerExecutionBackend
from altar.execution import ContainerTaskSpec, Transfer
from altar.execution.plans.plan import plan_from_specs
from altar.execution.run.retrying import reopen_failed_in
from altar.execution.run.runner import StagingError, run_plan

pytestmark = [pytest.mark.docker, pytest.mark.integration]

IMAGE = os.environ.get("ALTAR_TEST_IMAGE", "busybox:latest")
MARK = uuid.uuid4().hex[:12]


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def plan_reading(tmp_path: Path, source: Path, data: bytes | None):  # type: ignore[no-untyped-def]
    task = ContainerTaskSpec(
        kind="test",
        image=IMAGE,
        command=[
            "sh",
            "-c",
            "cd /mnt/volume && grep -q good in/data.txt && cp in/data.txt out.txt",
        ],
        labels={"altar-test": MARK},
        inputs=[Transfer(str(source), "in/data.txt", digest=None if data is None else sha(data))],
        outputs=[Transfer(str(tmp_path / "out.txt"), "out.txt")],
    )
    return plan_from_specs([task], backend_type="local")


async def run(tmp_path: Path, plan) -> bool:  # type: ignore[no-untyped-def]
    backend = LocalDockerExecutionBackend(data_root=tmp_path / "data", watchdog=False)
    try:
        result = await run_plan(plan, backend, run_dir=tmp_path / "run", max_retries=0)
    finally:
        backend.close()
    return result.ok


@pytest.mark.asyncio
async def test_a_fixed_input_file_reaches_the_retried_container(
    tmp_path: Path, docker_host: str
) -> None:
    source = tmp_path / "data.txt"
    source.write_bytes(b"bad\n")
    plan = plan_reading(tmp_path, source, None)
    assert not await run(tmp_path, plan)
    source.write_bytes(b"good\n")
    reopen_failed_in(tmp_path / "run", plan)
    assert await run(tmp_path, plan)
    assert (tmp_path / "out.txt").read_bytes() == b"good\n"


@pytest.mark.asyncio
async def test_an_edited_digest_reaches_the_retried_container_or_is_refused(
    tmp_path: Path, docker_host: str
) -> None:
    source = tmp_path / "data.txt"
    source.write_bytes(b"bad\n")
    assert not await run(tmp_path, plan_reading(tmp_path, source, b"bad\n"))
    source.write_bytes(b"good\n")
    stale = plan_reading(tmp_path, source, b"bad\n")  # the file fixed, the digest not
    reopen_failed_in(tmp_path / "run", stale)
    with pytest.raises(StagingError, match="changed since it was staged"):
        await run(tmp_path, stale)
    assert not (tmp_path / "out.txt").exists()
    fixed = plan_reading(tmp_path, source, b"good\n")  # and now the digest too
    reopen_failed_in(tmp_path / "run", fixed)
    assert await run(tmp_path, fixed)
    assert (tmp_path / "out.txt").read_bytes() == b"good\n"
