"""The tutorial's example backend (docs/examples/subprocess_backend.py) passes the suite.

The suite runs it on a fake runtime; a few more tests run real processes through the real
runtime. The tutorial (docs/extending/writing-a-backend.md) includes parts of this file.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from altar.conformance import ExecutionBackendContract, LaunchedTask, ProviderTask
from altar.execution import (
    BackendUnavailableError,
    ContainerTaskSpec,
    ExecutionBackend,
    ResourceRequest,
    TaskHandle,
    TaskState,
    TaskStatus,
)
from subprocess_backend import ProcessRecord, SubprocessExecutionBackend


# --8<-- [start:fake]
@dataclass
class FakeProcess:
    image: str
    argv: list[str]
    env: dict[str, str]
    labels: dict[str, str]
    timeout_s: int | None
    started_at: float = field(default_factory=time.time)
    exit_code: int | None = None
    finished_at: float | None = None
    ended_by: str | None = None
    log: list[str] = field(default_factory=list)


class FakeProcesses:
    """An in-memory ProcessRuntime: processes run until a test says how they end."""

    def __init__(self) -> None:
        self.processes: dict[str, FakeProcess] = {}
        self.reachable = True  # False: every call fails, as when the state volume is gone

    def _reachable(self) -> None:
        if not self.reachable:
            raise BackendUnavailableError("task state directory is not available")

    def start(
        self,
        task_id: str,
        image: str,
        argv: list[str],
        env: dict[str, str],
        labels: dict[str, str],
        cwd: str,
        timeout_s: int | None,
    ) -> None:
        self._reachable()
        if task_id in self.processes:
            raise FileExistsError(task_id)  # like mkdir of an existing task directory
        self.processes[task_id] = FakeProcess(image, list(argv), dict(env), dict(labels), timeout_s)

    def inspect(self, task_id: str) -> ProcessRecord | None:
        self._reachable()
        p = self.processes.get(task_id)
        if p is None:
            return None
        running = p.exit_code is None and p.ended_by is None
        return ProcessRecord(
            p.image, p.argv, p.env, p.labels, p.timeout_s, p.started_at, running, p.exit_code,
            p.finished_at, p.ended_by,
        )  # fmt: skip

    def stop(self, task_id: str, reason: str) -> None:
        p = self.processes.get(task_id)
        if p is not None and p.exit_code is None and p.ended_by is None:
            p.ended_by = reason

    def remove(self, task_id: str) -> None:
        self.processes.pop(task_id, None)

    def log_tail(self, task_id: str, lines: int) -> list[str]:
        p = self.processes.get(task_id)
        return p.log[-lines:] if p else []


# --8<-- [end:fake]


# --8<-- [start:contract]
def fake(backend: ExecutionBackend) -> FakeProcesses:
    """The fake under a backend the fixture built (hooks receive the backend under test)."""
    assert isinstance(backend, SubprocessExecutionBackend)
    assert isinstance(backend.runtime, FakeProcesses)
    return backend.runtime


class TestSubprocessBackend(ExecutionBackendContract):
    @pytest.fixture
    def backend(self, tmp_path: Path) -> SubprocessExecutionBackend:
        return SubprocessExecutionBackend(data_root=tmp_path, runtime=FakeProcesses())

    def finish_task(self, backend: ExecutionBackend, handle: TaskHandle, *, exit_code: int) -> None:
        process = fake(backend).processes[handle.external_id]
        process.exit_code, process.finished_at = exit_code, time.time()

    def expire_task(self, backend: ExecutionBackend, handle: TaskHandle) -> None:
        process = fake(backend).processes[handle.external_id]
        assert process.timeout_s is not None, "the suite expires only tasks with a timeout"
        process.started_at -= process.timeout_s + 5  # as if it started that long ago

    def launched_timeout(self, backend: ExecutionBackend, handle: TaskHandle) -> int | None:
        return fake(backend).processes[handle.external_id].timeout_s

    def write_task_log(
        self, backend: ExecutionBackend, handle: TaskHandle, lines: list[str]
    ) -> bool:
        fake(backend).processes[handle.external_id].log.extend(lines)
        return True

    def launched_task(self, backend: ExecutionBackend, handle: TaskHandle) -> LaunchedTask:
        # What the fake received, never what the backend was configured with: a backend
        # that dropped or hard-coded the image must fail the image checks.
        process = fake(backend).processes[handle.external_id]
        return LaunchedTask(process.image, process.argv, process.env, process.labels)

    def provider_task(self, backend: ExecutionBackend, handle: TaskHandle) -> ProviderTask:
        # The image the fake will "run"; it limits neither CPU nor memory (those are refused).
        return ProviderTask(image=fake(backend).processes[handle.external_id].image)

    def reopen(self, backend: ExecutionBackend) -> ExecutionBackend:
        assert isinstance(backend, SubprocessExecutionBackend)
        return SubprocessExecutionBackend(data_root=backend.data_root, runtime=fake(backend))

    def make_provider_unreachable(self, backend: ExecutionBackend) -> bool:
        fake(backend).reachable = False
        return True

    def unsupported_specs(self, spec: ContainerTaskSpec) -> list[ContainerTaskSpec]:
        return [
            replace(spec, image="python:3.12"),
            replace(spec, resources=ResourceRequest(gpu="gpu")),
            replace(spec, resources=ResourceRequest(memory_gb=2)),
            replace(spec, resources=ResourceRequest(cpu=2)),
        ]


# --8<-- [end:contract]


# --- the real runtime: real processes --------------------------------------------------


async def _settle(backend: ExecutionBackend, handle: TaskHandle) -> TaskStatus:
    for _ in range(500):
        (status,) = await backend.poll([handle])
        if status.state.is_terminal:
            return status
        await asyncio.sleep(0.02)
    raise AssertionError(f"{handle.external_id} never finished")


def _spec(command: list[str], env: dict[str, str] | None = None) -> ContainerTaskSpec:
    return ContainerTaskSpec(kind="example", image="busybox:latest", command=command, env=env or {})


@pytest.mark.asyncio
async def test_a_real_process_runs_with_its_argv_env_and_exit_code(tmp_path: Path) -> None:
    hostile = "a b 'c' $(touch injected) ; exit 9"
    command = [
        sys.executable,
        "-c",
        "import os, sys; open('out.txt', 'w').write(sys.argv[1] + '|' + os.environ['V']);"
        " print('the end'); sys.exit(3)",
        hostile,
    ]
    backend = SubprocessExecutionBackend(data_root=tmp_path)
    handle = await backend.submit(_spec(command, env={"V": "$HOME\nline"}))
    status = await _settle(backend, handle)
    assert status.failure is not None
    assert status.failure.reason == "exit_3"
    assert (tmp_path / "out.txt").read_text() == hostile + "|$HOME\nline"
    assert not (tmp_path / "injected").exists()
    assert await backend.failure_detail(handle) == "the end"


@pytest.mark.asyncio
async def test_a_fresh_instance_polls_a_task_started_by_another(tmp_path: Path) -> None:
    first = SubprocessExecutionBackend(data_root=tmp_path)
    handle = await first.submit(_spec([sys.executable, "-c", "pass"]))
    fresh = SubprocessExecutionBackend(data_root=tmp_path)
    assert (await _settle(fresh, handle)).state is TaskState.SUCCEEDED


@pytest.mark.asyncio
async def test_cancel_kills_a_real_process(tmp_path: Path) -> None:
    backend = SubprocessExecutionBackend(data_root=tmp_path)
    handle = await backend.submit(_spec([sys.executable, "-c", "import time; time.sleep(60)"]))
    await backend.cancel(handle)
    await backend.cancel(handle)
    status = await _settle(backend, handle)
    assert status.failure is not None
    assert status.failure.reason == "cancelled"
    await backend.cleanup([handle])
    (gone,) = await backend.poll([handle])
    assert gone.failure is not None
    assert gone.failure.reason == "container_missing"


@pytest.mark.asyncio
async def test_a_vanished_state_directory_is_an_outage_not_missing_tasks(tmp_path: Path) -> None:
    backend = SubprocessExecutionBackend(data_root=tmp_path / "volume")
    handle = await backend.submit(_spec([sys.executable, "-c", "pass"]))
    await _settle(backend, handle)
    (tmp_path / "volume").rename(tmp_path / "unmounted")
    with pytest.raises(BackendUnavailableError, match="is its volume mounted"):
        await backend.poll([handle])
