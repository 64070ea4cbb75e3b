"""The tutorial's example backend (docs/examples/subprocess_backend.py) passes the suite.

The suite runs it on a fake runtime; a few more tests run real processes through the real
runtime. The tutorial (docs/extending/writing-a-backend.md) includes parts of this file.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from altar.conformance import ExecutionBackendContract, LaunchedTask
from altar.execution import ContainerTaskSpec, ResourceRequest, TaskHandle, TaskState, TaskStatus

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "subprocess_backend.py"


def _load_example():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("subprocess_backend", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


example = _load_example()
SubprocessExecutionBackend = example.SubprocessExecutionBackend
ProcessRecord = example.ProcessRecord


# --8<-- [start:fake]
@dataclass
class FakeProcess:
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

    def start(self, task_id, argv, env, labels, cwd, timeout_s):  # type: ignore[no-untyped-def]
        if task_id in self.processes:
            raise FileExistsError(task_id)  # like mkdir of an existing task directory
        self.processes[task_id] = FakeProcess(list(argv), dict(env), dict(labels), timeout_s)

    def inspect(self, task_id):  # type: ignore[no-untyped-def]
        p = self.processes.get(task_id)
        if p is None:
            return None
        running = p.exit_code is None and p.ended_by is None
        return ProcessRecord(
            p.argv, p.env, p.labels, p.timeout_s, p.started_at, running, p.exit_code,
            p.finished_at, p.ended_by,
        )  # fmt: skip

    def stop(self, task_id, reason):  # type: ignore[no-untyped-def]
        p = self.processes.get(task_id)
        if p is not None and p.exit_code is None and p.ended_by is None:
            p.ended_by = reason

    def remove(self, task_id):  # type: ignore[no-untyped-def]
        self.processes.pop(task_id, None)

    def log_tail(self, task_id, lines):  # type: ignore[no-untyped-def]
        p = self.processes.get(task_id)
        return p.log[-lines:] if p else []


# --8<-- [end:fake]


# --8<-- [start:contract]
class TestSubprocessBackend(ExecutionBackendContract):
    @pytest.fixture
    def backend(self, tmp_path):  # type: ignore[no-untyped-def]
        return SubprocessExecutionBackend(data_root=tmp_path, runtime=FakeProcesses())

    def finish_task(self, backend, handle, *, exit_code):  # type: ignore[no-untyped-def]
        process = backend.runtime.processes[handle.external_id]
        process.exit_code, process.finished_at = exit_code, time.time()

    def expire_task(self, backend, handle):  # type: ignore[no-untyped-def]
        process = backend.runtime.processes[handle.external_id]
        process.started_at -= process.timeout_s + 5

    def launched_timeout(self, backend, handle):  # type: ignore[no-untyped-def]
        return backend.runtime.processes[handle.external_id].timeout_s

    def write_task_log(self, backend, handle, lines):  # type: ignore[no-untyped-def]
        backend.runtime.processes[handle.external_id].log.extend(lines)
        return True

    def launched_task(self, backend, handle):  # type: ignore[no-untyped-def]
        process = backend.runtime.processes[handle.external_id]
        # The machine is the image, and nothing else can be requested (see submit).
        return LaunchedTask(backend.host_image, process.argv, process.env, process.labels)

    def reopen(self, backend):  # type: ignore[no-untyped-def]
        return SubprocessExecutionBackend(data_root=backend.data_root, runtime=backend.runtime)

    def unsupported_specs(self, spec):  # type: ignore[no-untyped-def]
        return [
            replace(spec, image="python:3.12"),
            replace(spec, resources=ResourceRequest(gpu="gpu")),
            replace(spec, resources=ResourceRequest(memory_gb=2)),
            replace(spec, resources=ResourceRequest(cpu=2)),
        ]


# --8<-- [end:contract]


# --- the real runtime: real processes --------------------------------------------------


async def _settle(backend, handle: TaskHandle) -> TaskStatus:  # type: ignore[no-untyped-def]
    for _ in range(500):
        (status,) = await backend.poll([handle])
        if status.state.is_terminal:
            return status
        await asyncio.sleep(0.02)
    raise AssertionError(f"{handle.external_id} never finished")


def _spec(command: list[str], **changes: object) -> ContainerTaskSpec:
    return replace(
        ContainerTaskSpec(kind="example", image="busybox:latest", command=command), **changes
    )


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
