"""Job arrays on the real Slurm of ``scripts/services``: one sbatch, every task read exactly."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from altar.backends.slurm import CommandResult, LocalLoginNode, SlurmExecutionBackend
from altar.backends.slurm.arrays import SUBMIT_ARRAY_PROGRAM
from altar.backends.slurm.commands import SUBMIT_PROGRAM
from altar.execution import ContainerTaskSpec, ResourceRequest, TaskHandle, TaskStatus
from altar.execution.labels import submission_labels
from altar.execution.plans.plan import plan_from_specs
from altar.execution.run.runner import run_plan

from .queue_filling import LOW_PRIORITY, QUEUE_FILLING

pytestmark = [pytest.mark.slurm, pytest.mark.docker, pytest.mark.slow]

TASKS = 100
WAIT_S = 900


def _spec(run: str, task: str, command: list[str]) -> ContainerTaskSpec:
    return ContainerTaskSpec(
        kind="arrays",
        image=os.environ.get("ALTAR_TEST_IMAGE", "busybox:latest"),
        command=command,
        labels=submission_labels(run, task, 1),
        resources=ResourceRequest(memory_gb=0.125),  # equal for all: one array
    )


async def _all_ended(backend: SlurmExecutionBackend, handles: list[TaskHandle]) -> list[TaskStatus]:
    deadline = time.monotonic() + WAIT_S
    while True:
        statuses = await backend.poll(handles)
        if all(s.state.is_terminal for s in statuses):
            return statuses
        assert time.monotonic() < deadline, [s.state for s in statuses]
        await asyncio.sleep(1)


@QUEUE_FILLING
@pytest.mark.asyncio
async def test_an_array_of_100_reads_a_failure_an_oom_and_a_cancel_exactly(
    tmp_path: Path, docker_host: str, slurm_cluster: dict[str, str]
) -> None:
    backend = SlurmExecutionBackend(
        data_root=str(tmp_path / "data"),
        partition=slurm_cluster["partition"],
        container_runtime="docker",
        runtime_options=["-H", docker_host],
        queue_interval_s=5,
        extra_directives=LOW_PRIORITY,  # 100 queued jobs: other tests' jobs go first
    )
    run = f"arrays-{os.getpid()}-{time.monotonic_ns()}"
    special = {
        "t007": ["sh", "-c", "exit 3"],
        "t042": ["dd", "if=/dev/zero", "of=/dev/null", "bs=400M", "count=1"],
        "t077": ["sleep", "600"],
    }
    ids = [f"t{i:03d}" for i in range(TASKS)]
    specs = [_spec(run, t, special.get(t, ["true"])) for t in ids]
    handles = list(await asyncio.gather(*(backend.submit(s) for s in specs)))
    jobs = [h.external_id.split(":", 1)[0] for h in handles]
    # one array (the cluster's MaxArraySize is above 100), one element per task
    assert len({j.split("_", 1)[0] for j in jobs}) == 1, jobs
    assert sorted(int(j.split("_", 1)[1]) for j in jobs) == list(range(TASKS))
    try:
        await backend.cancel(handles[ids.index("t077")])
        statuses = dict(zip(ids, await _all_ended(backend, handles), strict=True))
    except BaseException:  # never leave the array behind on a shared cluster
        for handle in handles:
            await backend.cancel(handle)
        raise
    reasons = {t: (s.failure.reason if s.failure else None) for t, s in statuses.items()}
    assert reasons["t007"] == "exit_3"
    assert reasons["t042"] == "oom_killed"
    assert reasons["t077"] == "cancelled"
    others = {t: r for t, r in reasons.items() if t not in special}
    assert set(others.values()) == {None}, {t: r for t, r in others.items() if r}
    # every task is its own submission, adopted by its key, listed with its labels
    again = SlurmExecutionBackend(
        data_root=str(tmp_path / "data"),
        partition=slurm_cluster["partition"],
        container_runtime="docker",
        runtime_options=["-H", docker_host],
    )
    adopted = await asyncio.gather(*(again.submit(s) for s in specs[:5]))
    assert [h.external_id for h in adopted] == [h.external_id for h in handles[:5]]
    listed = await again.list_submissions(run)
    assert listed is not None
    assert sorted(h.external_id for h in listed) == sorted(h.external_id for h in handles)
    detail = await backend.failure_detail(handles[ids.index("t007")])
    assert detail is None or "exit" not in detail  # its own (empty) logs, not another's
    await backend.cleanup(handles[:50])  # the array's directory stays while a task keeps its own
    assert len(list((tmp_path / "data" / ".altar-slurm" / "arrays").iterdir())) == 1
    await backend.cleanup(handles[50:])
    assert not list((tmp_path / "data" / ".altar-slurm" / "jobs").iterdir())
    assert not list((tmp_path / "data" / ".altar-slurm" / "arrays").iterdir())


class _CountingNode(LocalLoginNode):
    """This machine's login node, keeping the sbatch calls (single jobs and arrays)."""

    def __init__(self) -> None:
        super().__init__()
        self.sbatches: list[str] = []

    def run(self, argv: Sequence[str]) -> CommandResult:
        if list(argv[:2]) == ["sh", "-c"] and argv[2] in (SUBMIT_PROGRAM, SUBMIT_ARRAY_PROGRAM):
            self.sbatches.append(argv[2])
        return super().run(argv)


@QUEUE_FILLING
@pytest.mark.asyncio
async def test_the_runner_submits_80_ready_tasks_with_one_sbatch(
    tmp_path: Path, docker_host: str, slurm_cluster: dict[str, str]
) -> None:
    """More ready tasks than the runner's default submit window (64) go as one array: the
    Slurm backend opens the window to its array_max (adoption by key keeps them once)."""
    node = _CountingNode()
    backend = SlurmExecutionBackend(
        data_root=str(tmp_path / "data"),
        partition=slurm_cluster["partition"],
        container_runtime="docker",
        runtime_options=["-H", docker_host],
        extra_directives=LOW_PRIORITY,  # 80 queued jobs: other tests' jobs go first
        runtime=node,
    )
    image = os.environ.get("ALTAR_TEST_IMAGE", "busybox:latest")
    specs = [
        ContainerTaskSpec(kind="trivial", image=image, command=["true", str(i)]) for i in range(80)
    ]
    plan = plan_from_specs(specs, backend_type="slurm")
    result = await run_plan(plan, backend, run_dir=tmp_path / "run")
    assert result.ok, result.counts()
    assert node.sbatches == [SUBMIT_ARRAY_PROGRAM]  # the default window would take 2
