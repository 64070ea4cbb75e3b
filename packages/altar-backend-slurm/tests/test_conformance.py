"""The altar-conformance suite against the backend on the fake Slurm login node."""

from __future__ import annotations

from dataclasses import replace

import pytest
from altar.backends.slurm import SlurmExecutionBackend
from altar.backends.slurm.fake import FakeLoginNode
from altar.conformance import ExecutionBackendContract, LaunchedTask, ProviderTask
from altar.execution import ContainerTaskSpec, ExecutionBackend, ResourceRequest, TaskHandle

from .conftest import MAX_TIME_S
from .launched import launched_task, provider_task


def _node(backend: ExecutionBackend) -> FakeLoginNode:
    assert isinstance(backend, SlurmExecutionBackend)
    assert isinstance(backend.node, FakeLoginNode)
    return backend.node


class TestSlurmBackendContract(ExecutionBackendContract):
    # A job without --time gets the partition's limit, which is also the longest allowed.
    unlimited_timeout_s = MAX_TIME_S
    max_timeout_s = MAX_TIME_S

    @pytest.fixture
    def backend(self, backend: SlurmExecutionBackend) -> SlurmExecutionBackend:
        return backend

    def finish_task(self, backend: ExecutionBackend, handle: TaskHandle, *, exit_code: int) -> None:
        _node(backend).finish(handle.external_id, exit_code)

    def expire_task(self, backend: ExecutionBackend, handle: TaskHandle) -> None:
        _node(backend).expire(handle.external_id)

    def launched_timeout(self, backend: ExecutionBackend, handle: TaskHandle) -> int | None:
        return _node(backend).job(handle.external_id).time_limit_s

    def write_task_log(
        self, backend: ExecutionBackend, handle: TaskHandle, lines: list[str]
    ) -> bool:
        _node(backend).write_log(handle.external_id, lines)
        return True

    def fail_input_verification(self, backend: ExecutionBackend, handle: TaskHandle) -> None:
        script = _node(backend).job(handle.external_id).script
        assert "altar-verify-inputs" in script, "a digest input must be checked in the job"
        _node(backend).fail_verification(handle.external_id)

    def launched_task(self, backend: ExecutionBackend, handle: TaskHandle) -> LaunchedTask:
        return launched_task(_node(backend).launched(handle.external_id))

    def provider_task(self, backend: ExecutionBackend, handle: TaskHandle) -> ProviderTask:
        # What sbatch was given: the allocation Slurm makes (whole cores, --mem in MiB) and
        # the image the job's container runs.
        return provider_task(_node(backend).launched(handle.external_id))

    def reopen(self, backend: ExecutionBackend) -> ExecutionBackend:
        assert isinstance(backend, SlurmExecutionBackend)
        return SlurmExecutionBackend(
            data_root=backend.data_root,
            container_runtime="docker",
            runtime=_node(backend),
            gpu_types={"gpu": None, "a100": "a100"},
            cancel_wait_s=0,
        )

    def oom_kill_task(self, backend: ExecutionBackend, handle: TaskHandle) -> bool:
        _node(backend).oom_kill(handle.external_id)
        return True

    def end_by_provider(self, backend: ExecutionBackend, handle: TaskHandle) -> str | None:
        # A higher-tier job takes the node (PreemptMode=CANCEL): the job reads PREEMPTED, its
        # script's TERM trap recorded 143; the suite's provider-ending checks (issue 22).
        _node(backend).preempt(handle.external_id, record=143)
        return "preempted"

    def make_provider_unreachable(self, backend: ExecutionBackend) -> bool:
        _node(backend).available = False
        return True

    def unsupported_specs(self, spec: ContainerTaskSpec) -> list[ContainerTaskSpec]:
        return [
            replace(spec, resources=ResourceRequest(gpu="tpu", count=1)),  # no such pool
            replace(spec, resources=ResourceRequest(gpu="a100", count=3)),  # cluster has 2
            replace(spec, env={"CR": "a\r\nb"}),  # a batch script cannot carry \r
        ]
