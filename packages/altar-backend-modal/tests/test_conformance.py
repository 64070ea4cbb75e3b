"""The Altar conformance suite against the Modal backend on the in-memory Modal."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from altar.backends.modal import ModalExecutionBackend
from altar.backends.modal.fake import FakeModalRuntime
from altar.execution import ContainerTaskSpec, ExecutionBackend, ResourceRequest, TaskHandle

conformance = pytest.importorskip("altar.conformance")
if not hasattr(conformance, "ExecutionBackendContract"):
    pytest.skip("altar-conformance has no ExecutionBackendContract yet", allow_module_level=True)

ExecutionBackendContract = conformance.ExecutionBackendContract
LaunchedTask = conformance.LaunchedTask
ProviderTask = conformance.ProviderTask


def _fake(backend: ExecutionBackend) -> FakeModalRuntime:
    assert isinstance(backend, ModalExecutionBackend)
    runtime = backend.runtime
    assert isinstance(runtime, FakeModalRuntime)
    return runtime


class TestModalBackendContract(ExecutionBackendContract):  # type: ignore[misc, valid-type]
    unlimited_timeout_s = 86400
    max_timeout_s = 86400

    @pytest.fixture
    def backend(self, tmp_path: Path) -> ExecutionBackend:
        return ModalExecutionBackend(
            runtime=FakeModalRuntime(), app_name="conformance", volume_name="conformance-data"
        )

    def finish_task(self, backend: ExecutionBackend, handle: TaskHandle, *, exit_code: int) -> None:
        _fake(backend).finish(handle.external_id, exit_code)

    def expire_task(self, backend: ExecutionBackend, handle: TaskHandle) -> None:
        _fake(backend).expire(handle.external_id)

    def launched_timeout(self, backend: ExecutionBackend, handle: TaskHandle) -> int | None:
        return _fake(backend).sandboxes[handle.external_id].request.timeout_s

    def write_task_log(
        self, backend: ExecutionBackend, handle: TaskHandle, lines: list[str]
    ) -> bool:
        _fake(backend).write_output(handle.external_id, lines)
        return True

    def launched_task(self, backend: ExecutionBackend, handle: TaskHandle) -> object:
        request = _fake(backend).sandboxes[handle.external_id].request
        return LaunchedTask(
            image=request.image,
            command=list(request.command),
            env=dict(request.env),
            labels=dict(request.tags),
            cpu=request.cpu[1] if request.cpu else None,
            memory_bytes=request.memory_mib[1] * 1024 * 1024 if request.memory_mib else None,
            gpu_count=int(request.gpu.rpartition(":")[2]) if request.gpu else 0,
        )

    def provider_task(self, backend: ExecutionBackend, handle: TaskHandle) -> object:
        # What the sandbox was created with: the image, and the CPU and memory limits Modal
        # enforces (the second of each (request, limit) pair).
        request = _fake(backend).sandboxes[handle.external_id].request
        return ProviderTask(
            image=request.image,
            cpu=request.cpu[1] if request.cpu else None,
            memory_bytes=request.memory_mib[1] * 1024 * 1024 if request.memory_mib else None,
        )

    def reopen(self, backend: ExecutionBackend) -> ExecutionBackend | None:
        assert isinstance(backend, ModalExecutionBackend)
        return ModalExecutionBackend(
            runtime=backend.runtime, app_name=backend.app_name, volume_name=backend.volume_name
        )

    def oom_kill_task(self, backend: ExecutionBackend, handle: TaskHandle) -> bool:
        _fake(backend).oom_kill(handle.external_id)
        return True

    def end_by_provider(self, backend: ExecutionBackend, handle: TaskHandle) -> str | None:
        # The sandbox's worker is preempted (what the SDK reports for it); the suite's
        # provider-ending checks (issue 22).
        _fake(backend).end_by_provider(handle.external_id, "preempted")
        return "preempted"

    def make_provider_unreachable(self, backend: ExecutionBackend) -> bool:
        _fake(backend).unreachable = True
        return True

    def unsupported_specs(self, spec: ContainerTaskSpec) -> list[ContainerTaskSpec]:
        return [
            dataclasses.replace(spec, resources=ResourceRequest(gpu="no-such-pool")),
            dataclasses.replace(spec, timeout_s=86401),
        ]
