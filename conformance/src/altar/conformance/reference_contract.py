"""The contract hooks for :class:`InProcessExecutionBackend`: a worked example of hooks.

Each hook scripts the :class:`InProcessFabric` directly, never through the backend, the way
a fake provider is scripted for any backend. ``test_reference_conformance.py`` subclasses it
to prove the reference backend, and the broken-backend tests subclass it to prove the suite
fails what it should.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import pytest
from altar.conformance import ExecutionBackendContract
from altar.conformance.launched import LaunchedTask, ProviderTask
from altar.conformance.reference import InProcessExecutionBackend, InProcessFabric
from altar.execution import (
    LABEL_SUBMISSION,
    ContainerTaskSpec,
    ExecutionBackend,
    ResourceRequest,
    TaskHandle,
)

__all__ = ["InProcessBackendContract"]


def _fabric_of(backend: ExecutionBackend) -> InProcessFabric:
    assert isinstance(backend, InProcessExecutionBackend)
    assert isinstance(backend.fabric, InProcessFabric), "the hooks script an InProcessFabric"
    return backend.fabric


class InProcessBackendContract(ExecutionBackendContract):
    """The suite's hooks for the in-process reference; subclass it as ``Test...`` to run it.

    ``backend_class`` and ``backend_options`` choose what the ``backend`` fixture builds.
    """

    __test__ = False

    backend_class: ClassVar[type[InProcessExecutionBackend]] = InProcessExecutionBackend
    backend_options: ClassVar[dict[str, Any]] = {}

    @pytest.fixture
    def backend(self, tmp_path: Any) -> ExecutionBackend:
        # runtime None: tasks run until the hooks script the fabric.
        options = {"runtime": None, "max_timeout_s": self.timeout_cap(), **self.backend_options}
        return self.backend_class(data_root=tmp_path / "in-process-data", **options)

    def finish_task(self, backend: ExecutionBackend, handle: TaskHandle, *, exit_code: int) -> None:
        _fabric_of(backend).finish(handle.external_id, exit_code)

    def expire_task(self, backend: ExecutionBackend, handle: TaskHandle) -> None:
        _fabric_of(backend).expire(handle.external_id)

    def launched_timeout(self, backend: ExecutionBackend, handle: TaskHandle) -> int | None:
        task = _fabric_of(backend).inspect(handle.external_id)
        assert task is not None, (
            f"the fabric holds no task {handle.external_id}, expected it launched"
        )
        return task.timeout_s

    def fail_input_verification(self, backend: ExecutionBackend, handle: TaskHandle) -> None:
        _fabric_of(backend).fail_input_verification(handle.external_id)

    def write_task_log(
        self, backend: ExecutionBackend, handle: TaskHandle, lines: list[str]
    ) -> bool:
        _fabric_of(backend).write_log(handle.external_id, lines)
        return True

    def launched_task(self, backend: ExecutionBackend, handle: TaskHandle) -> LaunchedTask | None:
        task = _fabric_of(backend).inspect(handle.external_id)
        assert task is not None, (
            f"the fabric holds no task {handle.external_id}, expected it launched"
        )
        return task.launched

    def reopen(self, backend: ExecutionBackend) -> ExecutionBackend | None:
        assert isinstance(backend, InProcessExecutionBackend)
        return backend.reopen()

    def provider_task(self, backend: ExecutionBackend, handle: TaskHandle) -> ProviderTask | None:
        # The fabric is the provider: what it recorded is what it runs and limits.
        task = _fabric_of(backend).inspect(handle.external_id)
        assert task is not None, (
            f"the fabric holds no task {handle.external_id}, expected it launched"
        )
        held = task.launched
        return ProviderTask(image=held.image, cpu=held.cpu, memory_bytes=held.memory_bytes)

    def leave_task_created(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec, key: str
    ) -> str | None:
        # The fabric's own create (it mints the id and files the task under its key), as a
        # submit killed before its start leaves it; nothing here goes through the backend.
        assert spec.labels.get(LABEL_SUBMISSION) == key, "the suite passes the spec's own key"
        fabric = _fabric_of(backend)
        workdir = Path(backend.path_resolver().mount_root)  # unused: the task has no runtime
        launched = LaunchedTask.of(spec)
        return fabric.launch(spec, launched, spec.timeout_s, None, workdir, start=False)

    def oom_kill_task(self, backend: ExecutionBackend, handle: TaskHandle) -> bool:
        _fabric_of(backend).oom_kill(handle.external_id)
        return True

    def end_by_provider(self, backend: ExecutionBackend, handle: TaskHandle) -> str | None:
        # What runs the task dies (the fabric's supervisor): the provider ended it.
        _fabric_of(backend).lose_supervisor(handle.external_id)
        return "engine_lost"

    def make_provider_unreachable(self, backend: ExecutionBackend) -> bool:
        _fabric_of(backend).reachable = False
        return True

    def unsupported_specs(self, spec: ContainerTaskSpec) -> list[ContainerTaskSpec]:
        gpus = int(self.backend_options.get("gpus", 0))
        too_many = ResourceRequest(gpu="gpu", count=gpus + 1)
        return [replace(spec, resources=too_many)]
