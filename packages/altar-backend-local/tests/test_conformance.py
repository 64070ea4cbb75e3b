"""The shared conformance suite (altar-conformance) against the in-memory engine."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from altar.backends.local import LocalDockerExecutionBackend
from altar.backends.local.fake import FakeDockerRuntime
from altar.backends.local.render import timeout_from_labels
from altar.conformance import ExecutionBackendContract, LaunchedTask, ProviderTask
from altar.execution import ContainerTaskSpec, ExecutionBackend, ResourceRequest, TaskHandle


def _engine(backend: ExecutionBackend) -> FakeDockerRuntime:
    assert isinstance(backend, LocalDockerExecutionBackend)
    assert isinstance(backend.runtime, FakeDockerRuntime)
    return backend.runtime


class TestLocalBackendConformance(ExecutionBackendContract):
    @pytest.fixture
    def backend(self, tmp_path: Path) -> LocalDockerExecutionBackend:
        return LocalDockerExecutionBackend(
            data_root=tmp_path / "data", runtime=FakeDockerRuntime(gpu_devices=2), watchdog=False
        )

    def finish_task(self, backend: ExecutionBackend, handle: TaskHandle, *, exit_code: int) -> None:
        _engine(backend).finish(handle.external_id, exit_code)

    def expire_task(self, backend: ExecutionBackend, handle: TaskHandle) -> None:
        _engine(backend).expire(handle.external_id)

    def launched_timeout(self, backend: ExecutionBackend, handle: TaskHandle) -> int | None:
        labels = _engine(backend).containers[handle.external_id].request.labels
        return timeout_from_labels(labels)

    def write_task_log(
        self, backend: ExecutionBackend, handle: TaskHandle, lines: list[str]
    ) -> bool:
        _engine(backend).write_log(handle.external_id, lines)
        return True

    def launched_task(self, backend: ExecutionBackend, handle: TaskHandle) -> LaunchedTask | None:
        request = _engine(backend).containers[handle.external_id].request
        return LaunchedTask(
            image=request.image,
            command=list(request.command),
            env=dict(request.environment),
            labels=dict(request.labels),
            cpu=request.nano_cpus / 1e9 if request.nano_cpus is not None else None,
            memory_bytes=request.memory_bytes,
            gpu_count=request.gpu_count,
        )

    def provider_task(self, backend: ExecutionBackend, handle: TaskHandle) -> ProviderTask | None:
        # The create request the engine keeps: NanoCpus is the CFS quota it enforces, and
        # Memory (with MemorySwap) the limit its OOM killer applies.
        request = _engine(backend).containers[handle.external_id].request
        cpu = request.nano_cpus / 1e9 if request.nano_cpus is not None else None
        return ProviderTask(image=request.image, cpu=cpu, memory_bytes=request.memory_bytes)

    def reopen(self, backend: ExecutionBackend) -> ExecutionBackend | None:
        assert isinstance(backend, LocalDockerExecutionBackend)
        return LocalDockerExecutionBackend(
            data_root=backend.data_root, runtime=backend.runtime, watchdog=False
        )

    def oom_kill_task(self, backend: ExecutionBackend, handle: TaskHandle) -> bool:
        _engine(backend).oom_kill(handle.external_id)
        return True

    def end_by_provider(self, backend: ExecutionBackend, handle: TaskHandle) -> str | None:
        # The engine restarts (without live-restore) and stops the running container. The
        # real engine's restart is tested with an engine of its own (tests/crash).
        _engine(backend).restart_engine()
        return "engine_lost"

    def make_provider_unreachable(self, backend: ExecutionBackend) -> bool:
        _engine(backend).available = False
        return True

    def unsupported_specs(self, spec: ContainerTaskSpec) -> list[ContainerTaskSpec]:
        # The fake engine has two GPUs and two CPUs (our CI engine has no GPU at all).
        return [
            replace(spec, resources=ResourceRequest(gpu="gpu", count=3)),
            replace(spec, resources=ResourceRequest(cpu=64)),
        ]
