"""KubernetesExecutionBackend on the in-memory seam fake: fast unit tests of its rules."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from altar.backends.kubernetes import KubernetesExecutionBackend
from altar.backends.kubernetes.fake import FakeKubernetesRuntime
from altar.backends.kubernetes.naming import parse_external_id
from altar.execution import (
    BackendUnavailableError,
    ContainerTaskSpec,
    TaskHandle,
    TaskState,
    Transfer,
)

Make = Callable[..., KubernetesExecutionBackend]
pytestmark = pytest.mark.asyncio
DIGEST = "sha256:" + "0" * 64


def spec(**overrides: Any) -> ContainerTaskSpec:
    values: dict[str, Any] = {
        "kind": "score",
        "image": "busybox:local",
        "command": ["sh", "-c", "echo hi"],
        "labels": {"job_id": "J"},
        "timeout_s": 60,
    }
    values.update(overrides)
    return ContainerTaskSpec(**values)


def name_of(handle: TaskHandle) -> str:
    return parse_external_id(handle.external_id)[0]


async def test_outcomes_map_to_states_and_reasons(
    make_seam_backend: Make, seam: FakeKubernetesRuntime
) -> None:
    backend = make_seam_backend()
    ok, code, oom, late, bad = [
        await backend.submit(spec(command=["run", str(i)], inputs=inputs))
        for i, inputs in enumerate([[], [], [], [], [Transfer("gs://b/w", "w", digest=DIGEST)]])
    ]
    seam.finish(name_of(ok))
    seam.finish(name_of(code), exit_code=3, log="one\ntwo\nthree\n")
    seam.finish(name_of(oom), exit_code=137, reason="OOMKilled")
    seam.expire(name_of(late))
    seam.fail_verification(name_of(bad), log="w: FAILED\n")
    statuses = await backend.poll([ok, code, oom, late, bad])
    assert statuses[0].state is TaskState.SUCCEEDED
    reasons = [s.failure.reason if s.failure else None for s in statuses[1:]]
    assert reasons == ["exit_3", "oom_killed", "timeout", "input_digest_mismatch"]
    assert await backend.failure_detail(code) == "one\ntwo\nthree"
    assert await backend.failure_detail(bad) == "w: FAILED"


async def test_poll_lists_jobs_once_and_pods_only_for_new_failures(
    make_seam_backend: Make, seam: FakeKubernetesRuntime
) -> None:
    backend = make_seam_backend()
    handles = [await backend.submit(spec(command=["run", str(i)])) for i in range(3)]
    seam.finish(name_of(handles[0]), exit_code=1)
    seam.calls.clear()
    await backend.poll(handles)
    await backend.poll(handles)
    assert seam.calls == {"list_jobs": 2, "list_pods": 1}


async def test_an_unreachable_api_is_transient_never_missing(
    make_seam_backend: Make, seam: FakeKubernetesRuntime
) -> None:
    backend = make_seam_backend()
    handle = await backend.submit(spec())
    seam.down = True
    with pytest.raises(BackendUnavailableError):
        await backend.poll([handle])
    with pytest.raises(BackendUnavailableError):
        await backend.submit(spec(command=["other"]))
    seam.down = False
    [status] = await backend.poll([handle])
    assert status.state is TaskState.RUNNING


async def test_cancel_then_capacity_does_not_count_the_job_being_deleted(
    make_seam_backend: Make, seam: FakeKubernetesRuntime
) -> None:
    backend = make_seam_backend(max_slots={"cpu": 2}, delete_propagation="Foreground")
    one = await backend.submit(spec(command=["1"]))
    await backend.submit(spec(command=["2"]))
    assert (await backend.capacity()).pools == {"cpu": 0}
    await backend.cancel(one)
    assert seam.job(name_of(one)).deleting
    assert (await backend.capacity()).pools == {"cpu": 1}
    [status] = await backend.poll([one])
    assert status.failure is not None
    assert status.failure.reason == "cancelled"


async def test_cleanup_deletes_only_finished_attempts(
    make_seam_backend: Make, seam: FakeKubernetesRuntime
) -> None:
    backend = make_seam_backend()
    done = await backend.submit(spec(command=["done"]))
    running = await backend.submit(spec(command=["running"]))
    seam.finish(name_of(done))
    await backend.cleanup([done, running])
    assert [job.name for job in seam.jobs.values()] == [name_of(running)]
