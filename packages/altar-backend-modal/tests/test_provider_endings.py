"""Provider endings and limits (issue 22): what Modal reports for a lost or preempted worker
and for RESOURCE_EXHAUSTED, through the seam fake and through the unmodified SDK on the wire.

A worker lost or preempted is ``GENERIC_STATUS_INTERNAL_FAILURE`` (the SDK's own comment:
"lost inputs or worker preemption"): ``job_failed`` as before, with ``provider_ending``. A
RESOURCE_EXHAUSTED answer (rate limit, quota, no capacity) is ProviderLimitError, with the
server's ``RPCRetryPolicy`` wait as ``retry_after_s`` once the SDK's own waits ran out.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import grpclib
import modal
import pytest
from altar.backends.modal import ModalExecutionBackend
from altar.backends.modal.fake import FakeModalRuntime
from altar.backends.modal.sdk_runtime import ModalSdkRuntime, limit_error
from altar.execution import (
    ContainerTaskSpec,
    ProviderLimitError,
    TaskHandle,
    TaskState,
    TaskStatus,
)
from modal_proto import api_pb2

from .modal_control_plane import ControlPlane

TOKEN_ID = "ak-altarfaketoken0000000"
TOKEN_SECRET = "as-altarfakesecret000000"
on_the_wire = pytest.mark.skipif(
    not modal.__version__.startswith("1.6."),
    reason=f"the fake control plane speaks modal 1.6's wire protocol; {modal.__version__} is in",
)


def _spec(command: list[str], fold: str = "0") -> ContainerTaskSpec:
    return ContainerTaskSpec(
        kind="wire",
        image="busybox:1.36",
        command=command,
        labels={"job_id": "J", "fold": fold},
    )


async def _until_terminal(backend: ModalExecutionBackend, handle: TaskHandle) -> TaskStatus:
    deadline = time.monotonic() + 15
    while True:
        (status,) = await backend.poll([handle])
        if status.state.is_terminal or time.monotonic() > deadline:
            return status
        await asyncio.sleep(0.05)


@pytest.mark.parametrize(
    ("ending", "reason", "words"),
    [
        ("preempted", "job_failed", "Worker preempted"),
        ("node_lost", "job_failed", "INTERNAL_FAILURE"),
        ("evicted", "oom_killed", "memory manager"),
    ],
)
@pytest.mark.asyncio
async def test_each_provider_ending_of_the_seam_fake_is_classified(
    ending: str, reason: str, words: str
) -> None:
    fake = FakeModalRuntime()
    backend = ModalExecutionBackend(runtime=fake)
    handle = await backend.submit(_spec(["sleep", "60"]))
    fake.end_by_provider(handle.external_id, ending)
    (status,) = await backend.poll([handle])
    assert status.state is TaskState.FAILED
    assert status.failure is not None
    assert (status.failure.reason, status.failure.provider_ending) == (reason, ending)
    assert status.failure.deterministic is False
    assert status.failure.detail is not None
    assert status.failure.detail.startswith(f"{ending}: ")
    assert words in status.failure.detail
    # the task's own ends carry none
    other = await backend.submit(_spec(["sh", "-c", "exit 137"], fold="1"))
    fake.finish(other.external_id, 137)
    (status,) = await backend.poll([other])
    assert status.failure is not None
    assert (status.failure.reason, status.failure.provider_ending) == ("exit_137", None)


def test_what_resource_exhausted_says_names_the_limit() -> None:
    capacity = limit_error(
        modal.exception.ResourceExhaustedError("Insufficient capacity to create sandbox.")
    )
    assert capacity.limit == "Modal capacity"
    assert capacity.retry_after_s is None
    raw = grpclib.GRPCError(
        grpclib.Status.RESOURCE_EXHAUSTED,
        "Sandbox creation rate limit exceeded",
        [api_pb2.RPCRetryPolicy(retry_after_secs=4.0)],
    )
    limited = limit_error(raw)
    assert limited.limit == "Modal rate limit or quota (RESOURCE_EXHAUSTED)"
    assert limited.retry_after_s == 4.0
    assert "rate limit exceeded" in str(limited)


# -- on the wire: the unmodified modal client against the fake control plane ---------------


@pytest.fixture
def control_plane(monkeypatch: pytest.MonkeyPatch) -> Iterator[ControlPlane]:
    with ControlPlane() as plane:
        monkeypatch.setenv("MODAL_SERVER_URL", plane.url)
        monkeypatch.setenv("MODAL_TOKEN_ID", TOKEN_ID)
        monkeypatch.setenv("MODAL_TOKEN_SECRET", TOKEN_SECRET)
        monkeypatch.setenv("MODAL_SANDBOX_V2", "0")
        yield plane


@on_the_wire
@pytest.mark.parametrize(
    ("ending", "reason"),
    [("preempted", "job_failed"), ("node_lost", "job_failed"), ("evicted", "oom_killed")],
)
@pytest.mark.asyncio
async def test_what_the_sdk_reports_for_a_lost_or_preempted_worker(
    control_plane: ControlPlane, ending: str, reason: str
) -> None:
    client = await modal.Client.from_credentials.aio(TOKEN_ID, TOKEN_SECRET)
    try:
        backend = ModalExecutionBackend(runtime=ModalSdkRuntime(client=client))
        handle = await backend.submit(_spec(["sleep", "30"]))
        control_plane.end_by_provider(handle.external_id, ending)
        status = await _until_terminal(backend, handle)
        assert status.failure is not None
        assert (status.failure.reason, status.failure.provider_ending) == (reason, ending)
        assert status.failure.deterministic is False
    finally:
        await client.close.aio()


@on_the_wire
@pytest.mark.asyncio
async def test_resource_exhausted_on_create_is_a_limit_and_nothing_runs(
    control_plane: ControlPlane,
) -> None:
    client = await modal.Client.from_credentials.aio(TOKEN_ID, TOKEN_SECRET)
    try:
        backend = ModalExecutionBackend(runtime=ModalSdkRuntime(client=client))
        servicer = control_plane.servicer
        servicer.exhaust_create = [("Sandbox creation rate limit exceeded", None)]
        with pytest.raises(ProviderLimitError, match="rate limit exceeded") as raised:
            await backend.submit(_spec(["true"]))
        assert raised.value.limit == "Modal rate limit or quota (RESOURCE_EXHAUSTED)"
        assert servicer.sandboxes == {}
        handle = await backend.submit(_spec(["true"]))  # lifted: the next submit runs
        assert (await _until_terminal(backend, handle)).state is TaskState.SUCCEEDED
    finally:
        await client.close.aio()


@on_the_wire
@pytest.mark.asyncio
async def test_the_sdk_waits_out_a_retry_policy_and_what_escapes_carries_it(
    control_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = await modal.Client.from_credentials.aio(TOKEN_ID, TOKEN_SECRET)
    try:
        backend = ModalExecutionBackend(runtime=ModalSdkRuntime(client=client))
        servicer = control_plane.servicer
        # two refusals with a policy: the SDK sleeps and retries on its own, the submit passes
        servicer.exhaust_create = [("slow down", 0.1), ("slow down", 0.1)]
        handle = await backend.submit(_spec(["true"]))
        assert handle.external_id in servicer.sandboxes
        # refused past MODAL_MAX_THROTTLE_WAIT: the limit escapes with the server's wait
        monkeypatch.setenv("MODAL_MAX_THROTTLE_WAIT", "1")
        servicer.exhaust_create = [("slow down", 0.3)] * 50
        with pytest.raises(ProviderLimitError) as raised:
            await backend.submit(_spec(["true"], fold="1"))
        assert raised.value.retry_after_s == pytest.approx(0.3)
        assert len(servicer.sandboxes) == 1
    finally:
        await client.close.aio()


def test_every_shape_of_resource_exhausted_the_sdk_lets_escape_is_a_limit() -> None:
    from altar.backends.modal.sdk_runtime import _modal_errors
    from altar.execution import BackendUnavailableError
    from modal._utils.grpc_utils import RetryTimeoutError

    exhausted = modal.exception.ResourceExhaustedError("Sandbox concurrency limit reached")
    raw = grpclib.GRPCError(grpclib.Status.RESOURCE_EXHAUSTED, "rate limit exceeded")
    for error in (exhausted, raw, RetryTimeoutError(exhausted)):
        with pytest.raises(ProviderLimitError), _modal_errors():
            raise error
    # the SDK's retries timing out on a server error is unreachable, not a limit
    with pytest.raises(BackendUnavailableError) as raised, _modal_errors():
        raise RetryTimeoutError(modal.exception.ServiceError("unavailable"))
    assert not isinstance(raised.value, ProviderLimitError)
    # a sandbox's own timeout is not a request's, and passes through
    with pytest.raises(modal.exception.SandboxTimeoutError), _modal_errors():
        raise modal.exception.SandboxTimeoutError()


@on_the_wire
@pytest.mark.asyncio
async def test_a_run_through_the_sdk_reruns_a_preempted_sandbox_without_a_retry(
    control_plane: ControlPlane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from altar.execution.plans.plan import Plan, PlanTask
    from altar.execution.run import holding
    from altar.execution.run.runner import run_plan

    monkeypatch.setattr(holding, "PAUSE_S", 0.02)
    monkeypatch.setattr(holding, "LIMIT_PAUSE_S", 0.02)
    servicer = control_plane.servicer
    servicer.exhaust_create = [("Sandbox creation rate limit exceeded", None)]
    preempted: list[str] = []

    async def modal_preempts_the_first() -> None:
        while not preempted:
            for sandbox_id, sandbox in list(servicer.sandboxes.items()):
                if sandbox.result is None:
                    control_plane.end_by_provider(sandbox_id, "preempted")
                    preempted.append(sandbox_id)
            await asyncio.sleep(0.01)

    client = await modal.Client.from_credentials.aio(TOKEN_ID, TOKEN_SECRET)
    driver = asyncio.ensure_future(modal_preempts_the_first())
    try:
        backend = ModalExecutionBackend(runtime=ModalSdkRuntime(client=client))
        plan = Plan("modal", {}, [PlanTask("f0", _spec(["sleep", "0.5"]))], max_retries=0)
        run = run_plan(
            plan, backend, run_dir=tmp_path / "run", poll_interval_s=0.05, max_poll_interval_s=0.2
        )
        result = await asyncio.wait_for(run, 120)
    finally:
        driver.cancel()
        await client.close.aio()
    (task,) = result.tasks
    assert (task.status, task.attempts) == ("succeeded", 2)
    assert task.provider_endings == {"preempted": 1}
    assert len(servicer.sandboxes) == 2  # the refused create made none
