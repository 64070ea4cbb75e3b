"""What a run costs the controller: job queries (sdiag's REQUEST_JOB_INFO) per minute.

A counting login node (the fake Slurm) runs a simulated five minutes of a 60-task array on a
node that starts two jobs at a time, polled every 2 s as the runner does, with a cancel of a
running and of a pending task, and the run's closing ``list_submissions``. ``squeue`` and
``scontrol show job`` are what ask the controller for jobs; sbatch, sacct (slurmdbd) and the
records (the shared filesystem) do not.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from altar.backends.slurm import SlurmExecutionBackend
from altar.backends.slurm.fake import FakeLoginNode
from altar.execution import ContainerTaskSpec, ResourceRequest, TaskHandle
from altar.execution.labels import submission_labels

TASKS = 60
RUNNING_AT_ONCE = 2
JOB_S = 10.0  # each job runs this long
POLL_S = 2.0  # the backend's max_poll_interval_s


def _job_queries(node: FakeLoginNode) -> int:
    """Calls that cost the controller a REQUEST_JOB_INFO (squeue, scontrol show job)."""
    count = 0
    for call in node.calls:
        words = call[3:] if call[0] == "timeout" else call
        if words[0] == "squeue" or words[:3] == ["scontrol", "show", "job"]:
            count += 1
    return count


@pytest.mark.asyncio
async def test_a_run_asks_the_controller_about_jobs_at_most_once_a_minute(
    tmp_path: Path,
) -> None:
    now = [0.0]
    node = FakeLoginNode()
    node.start_jobs = False  # jobs wait for the node's two CPUs
    backend = SlurmExecutionBackend(
        data_root=tmp_path / "data",
        container_runtime="docker",
        runtime=node,
        clock=lambda: now[0],
        cancel_wait_s=0,
    )
    specs = [
        ContainerTaskSpec(
            kind="t",
            image="busybox:latest",
            command=["true"],
            labels=submission_labels("run-q", f"t{i:02d}", 1),
            resources=ResourceRequest(memory_gb=0.125),
        )
        for i in range(TASKS)
    ]
    handles: list[TaskHandle] = list(await asyncio.gather(*(backend.submit(s) for s in specs)))
    jobs = [h.external_id.split(":", 1)[0] for h in handles]
    assert len({j.split("_", 1)[0] for j in jobs}) == 1  # one array
    started: dict[str, float] = {}
    open_handles = list(handles)
    cancelled = False
    while open_handles:
        for job_id, since in list(started.items()):
            if now[0] - since >= JOB_S and node.job(job_id).state == "RUNNING":
                node.finish(job_id, 0)
                del started[job_id]
        waiting = [j for j in jobs if node.job(j).state == "PENDING"]
        for job_id in waiting[: max(0, RUNNING_AT_ONCE - len(started))]:
            node.start(job_id)
            started[job_id] = now[0]
        if not cancelled and now[0] >= 100:
            cancelled = True
            await backend.cancel(handles[jobs.index(next(iter(started)))])  # a running one
            await backend.cancel(handles[jobs.index(waiting[-1])])  # a pending one
            started = {j: s for j, s in started.items() if node.job(j).state == "RUNNING"}
        statuses = await backend.poll(open_handles)
        open_handles = [s.handle for s in statuses if not s.state.is_terminal]
        now[0] += POLL_S
        node.advance(POLL_S)
    assert await backend.list_submissions("run-q") is not None
    minutes = now[0] / 60
    assert minutes > 4  # a run of about five minutes
    assert _job_queries(node) <= minutes, (now[0], _job_queries(node))
    configs = [c for c in node.calls if c[-3:] == ["scontrol", "show", "config"]]
    assert len(configs) == 1  # MaxArraySize, read once for all the submits
