"""Provider times (issue 15): a Job's status.startTime and its end reach TaskStatus."""

from __future__ import annotations

import datetime as dt

import pytest
from altar.backends.kubernetes import KubernetesExecutionBackend, parse_external_id
from altar.backends.kubernetes.testing import FakeApiServer
from altar.backends.kubernetes.wire import job_info_from_object
from altar.execution import ContainerTaskSpec, TaskState


def epoch(value: str) -> float:
    return dt.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp()


def test_a_jobs_start_and_completion_are_read_from_its_status() -> None:
    job = {
        "metadata": {"name": "j", "uid": "u"},
        "status": {
            "startTime": "2026-12-01T22:00:00Z",
            "completionTime": "2026-12-01T22:00:04Z",
            "conditions": [{"type": "Complete", "status": "True"}],
        },
    }
    info = job_info_from_object(job)
    assert (info.start_time, info.end_time) == (
        epoch("2026-12-01T22:00:00Z"),
        epoch("2026-12-01T22:00:04Z"),
    )
    failed = job_info_from_object(
        {
            "metadata": {"name": "j"},
            "status": {
                "startTime": "bogus",
                "conditions": [
                    {
                        "type": "Failed",
                        "status": "True",
                        "lastTransitionTime": "2026-12-01T22:00:09Z",
                    }
                ],
            },
        }
    )
    assert (failed.start_time, failed.end_time) == (None, epoch("2026-12-01T22:00:09Z"))


@pytest.mark.asyncio
@pytest.mark.parametrize("exit_code", [0, 3])
async def test_poll_reports_the_jobs_own_times(
    backend: KubernetesExecutionBackend, fake_apiserver: FakeApiServer, exit_code: int
) -> None:
    spec = ContainerTaskSpec(kind="k", image="busybox", command=["true"])
    handle = await backend.submit(spec)
    name, _ = parse_external_id(handle.external_id)
    [running] = await backend.poll([handle])
    job = fake_apiserver.job(name)
    assert job is not None
    assert running.started_at == epoch(job["status"]["startTime"])
    assert running.finished_at is None
    fake_apiserver.finish_job(job["metadata"]["name"], exit_code=exit_code)
    [done] = await backend.poll([handle])
    assert done.state is (TaskState.SUCCEEDED if exit_code == 0 else TaskState.FAILED)
    job = fake_apiserver.job(job["metadata"]["name"])
    assert job is not None
    end = job["status"].get("completionTime") or next(
        c["lastTransitionTime"] for c in job["status"]["conditions"] if c["type"] == "Failed"
    )
    assert done.finished_at == epoch(end)
    assert done.started_at == epoch(job["status"]["startTime"])
