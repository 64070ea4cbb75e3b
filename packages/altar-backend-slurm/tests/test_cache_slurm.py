"""The task cache on real Slurm with real Docker (issue 25): the demo plan cached on ``local``
hits on ``slurm``, and a job whose tag was resolved runs the resolved bytes even if the tag
moves before the job starts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from altar.backends.slurm import SlurmExecutionBackend
from altar.execution import ContainerTaskSpec, TaskState

pytestmark = [pytest.mark.slurm, pytest.mark.docker]

DEMO = Path(__file__).resolve().parents[3] / "examples" / "demo"
WAIT_S = 240  # jobs may queue behind other helpers' work on the 2-CPU node


def _altar(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    altar = shutil.which("altar", path=os.path.dirname(sys.executable)) or "altar"
    return subprocess.run(
        [altar, *args], capture_output=True, text=True, check=False, timeout=900, cwd=cwd
    )


def _docker(docker_host: str, *args: str) -> str:
    done = subprocess.run(
        ["docker", "-H", docker_host, *args], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def _remove(docker_host: str, *commands: list[str]) -> None:
    for words in filter(None, commands):  # this test's own container and images only
        subprocess.run(["docker", "-H", docker_host, *words], capture_output=True, check=False)


@pytest.mark.slow
def test_the_demo_cached_on_local_hits_on_slurm(
    tmp_path: Path, docker_host: str, slurm_cluster: dict[str, str]
) -> None:
    shutil.copytree(DEMO, tmp_path / "demo", ignore=shutil.ignore_patterns("results"))
    plan, store = tmp_path / "demo" / "plan.toml", tmp_path / "store"
    local = _altar(
        "run", str(plan), "--cache", str(store), "--run-dir", str(tmp_path / "local"),
        "--option", f"data_root={tmp_path / 'volume'}", "--json", "--quiet", cwd=tmp_path,
    )  # fmt: skip
    assert local.returncode == 0, local.stderr
    assert {t["status"] for t in json.loads(local.stdout)["tasks"]} == {"succeeded"}
    results = {p.name: p.read_bytes() for p in (plan.parent / "results").iterdir()}
    shutil.rmtree(plan.parent / "results")

    slurm = _altar(
        "run", str(plan), "--backend", "slurm", "--cache", str(store),
        "--run-dir", str(tmp_path / "slurm"), "--json", "--quiet",
        "--option", 'container_runtime="docker"',
        "--option", f"runtime_options={json.dumps(['-H', docker_host])}",
        "--option", "shared_engine=true",
        "--option", f"partition={json.dumps(slurm_cluster['partition'])}",
        "--option", f"data_root={json.dumps(str(tmp_path / 'cluster'))}",
        cwd=tmp_path,
    )  # fmt: skip
    assert slurm.returncode == 0, slurm.stdout + slurm.stderr
    tasks = json.loads(slurm.stdout)["tasks"]
    assert [(t["status"], t["attempts"]) for t in tasks] == [("cached", 0)] * len(tasks)
    assert {p.name: p.read_bytes() for p in (plan.parent / "results").iterdir()} == results


@pytest.mark.asyncio
async def test_a_resolved_tag_runs_its_bytes_though_the_tag_moves(
    tmp_path: Path, docker_host: str, slurm_cluster: dict[str, str]
) -> None:
    tag = f"altar-cache-test:{uuid.uuid4().hex[:12]}"
    image = os.environ.get("ALTAR_TEST_IMAGE", "busybox:latest")
    _docker(docker_host, "tag", image, tag)
    maker = f"altar-cache-moved-{uuid.uuid4().hex[:12]}"
    moved: str | None = None
    try:
        backend = SlurmExecutionBackend(
            data_root=str(tmp_path / "data"),
            partition=slurm_cluster["partition"],
            container_runtime="docker",
            runtime_options=["-H", docker_host],
            shared_engine=True,
        )
        resolved = await backend.image_digest(tag)
        assert resolved == _docker(docker_host, "image", "inspect", "--format", "{{.Id}}", tag)
        # the tag now names other bytes: an image with /moved in it
        _docker(docker_host, "run", "--name", maker, "--network=none", image, "touch", "/moved")
        moved = _docker(docker_host, "commit", maker)
        _docker(docker_host, "tag", moved, tag)
        assert _docker(docker_host, "run", "--rm", "--network=none", tag, "ls", "/moved")
        spec = ContainerTaskSpec(
            kind="t", image=tag, command=["sh", "-c", "test ! -e /moved"], timeout_s=120
        )
        handle = await backend.submit(spec)
        (status,) = await backend.await_completion(
            [handle], interval_s=0.5, max_interval_s=2, timeout_s=WAIT_S
        )
        assert status.state is TaskState.SUCCEEDED, status.failure
        await backend.cleanup([handle])
    finally:
        _remove(docker_host, ["rm", "-f", maker], ["rmi", tag], ["rmi", moved] if moved else [])
