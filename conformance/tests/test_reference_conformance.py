"""The in-process reference backend passes the suite, in every configuration it offers."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from altar.conformance import ExecutionBackendContract, LaunchedTask, ProviderTask
from altar.conformance.processes import ProcessFabric, external_id_for_key
from altar.conformance.reference import InProcessExecutionBackend, InProcessTaskVerifyingBackend
from altar.conformance.reference_contract import InProcessBackendContract
from altar.conformance.supervisor import DEADLINE, LOG, OUTCOME, STARTED, process_start_ticks
from altar.execution import (
    ContainerTaskSpec,
    ExecutionBackend,
    ResourceRequest,
    TaskHandle,
    atomic_write,
)


class TestInProcessBackend(InProcessBackendContract):
    """CPU only: GPU requests are refused explicitly; no lifetime cap."""


class TestInProcessBackendWithGpus(InProcessBackendContract):
    """A host with 4 devices: GPU counts are launched exactly; 5 are refused."""

    backend_options = {"gpus": 4}


class TestInProcessBackendWithLifetimeCap(InProcessBackendContract):
    """A capped provider: no limit means the maximum; a longer explicit limit is refused."""

    unlimited_timeout_s = 3600
    max_timeout_s = 3600


class TestInProcessBackendVerifyingInTask(InProcessBackendContract):
    """ "task" verification: a wrong input fails the task with input_digest_mismatch."""

    backend_class = InProcessTaskVerifyingBackend


# ---------------------------------------------------------------- supervised local processes

# The lifecycle tests' command: it runs until its test says how it ends, through a file in the
# task's own record directory (the supervisor tells the task where that is).
AWAIT_EXIT = (
    'while [ ! -e "$ALTAR_IN_PROCESS_TASK_DIR/exit-request" ]; do sleep 0.02; done; '
    'exit "$(cat "$ALTAR_IN_PROCESS_TASK_DIR/exit-request")"'
)


def _records(backend: ExecutionBackend) -> ProcessFabric:
    assert isinstance(backend, InProcessExecutionBackend)
    assert isinstance(backend.fabric, ProcessFabric)
    return backend.fabric


def _task_dir(backend: ExecutionBackend, handle: TaskHandle) -> Path:
    return _records(backend).tasks / handle.external_id


def _await_outcome(directory: Path) -> None:
    """Block until the supervisor recorded how the task ended (a guard, not a timing test)."""
    for _ in range(3000):
        if (directory / OUTCOME).exists():
            return
        time.sleep(0.01)
    raise AssertionError(f"no outcome recorded in {directory}")


class TestInProcessBackendWithProcesses(ExecutionBackendContract):
    """The default runtime, real processes and records: the hooks script the task itself."""

    @pytest.fixture
    def spec(self) -> ContainerTaskSpec:
        return ContainerTaskSpec(
            kind="conformance",
            image="busybox:latest",
            command=["sh", "-c", AWAIT_EXIT],
            labels={"job_id": "J", "kind": "conformance"},
        )

    @pytest.fixture
    def backend(self, tmp_path: Path) -> Iterator[ExecutionBackend]:
        backend = InProcessExecutionBackend(data_root=tmp_path / "in-process-data")
        yield backend
        records = _records(backend).tasks
        unmounted = records.with_name("tasks.unmounted")
        if unmounted.exists():
            unmounted.rename(records)
        for directory in records.iterdir():  # no supervisor outlives its test
            _records(backend).kill(directory.name)

    def finish_task(self, backend: ExecutionBackend, handle: TaskHandle, *, exit_code: int) -> None:
        directory = _task_dir(backend, handle)
        atomic_write(directory / "exit-request", str(exit_code).encode())
        _await_outcome(directory)

    def expire_task(self, backend: ExecutionBackend, handle: TaskHandle) -> None:
        # The supervisor enforces the deadline: move it into the past, as time passing would.
        directory = _task_dir(backend, handle)
        for _ in range(3000):  # the supervisor writes it when it starts the command
            if (directory / DEADLINE).exists():
                break
            time.sleep(0.01)
        atomic_write(directory / DEADLINE, str(time.time() - 1).encode())
        _await_outcome(directory)

    def launched_timeout(self, backend: ExecutionBackend, handle: TaskHandle) -> int | None:
        task = _records(backend).inspect(handle.external_id)
        assert task is not None
        return task.timeout_s

    def launched_task(self, backend: ExecutionBackend, handle: TaskHandle) -> LaunchedTask | None:
        task = _records(backend).inspect(handle.external_id)
        assert task is not None
        return task.launched

    def write_task_log(
        self, backend: ExecutionBackend, handle: TaskHandle, lines: list[str]
    ) -> bool:
        with open(_task_dir(backend, handle) / LOG, "a", encoding="utf-8") as log:
            log.write("".join(f"{line}\n" for line in lines))
        return True

    def reopen(self, backend: ExecutionBackend) -> ExecutionBackend | None:
        assert isinstance(backend, InProcessExecutionBackend)
        return backend.reopen()

    def make_provider_unreachable(self, backend: ExecutionBackend) -> bool:
        records = _records(backend).tasks
        records.rename(records.with_name("tasks.unmounted"))
        return True

    def unsupported_specs(self, spec: ContainerTaskSpec) -> list[ContainerTaskSpec]:
        return [replace(spec, resources=ResourceRequest(gpu="gpu", count=1))]

    def leave_task_created(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec, key: str
    ) -> str | None:
        # The records' own create, as a submit killed before its start leaves it; the id it
        # files the task under is the documented naming rule for the key.
        created = _records(backend).launch(
            spec, LaunchedTask.of(spec), spec.timeout_s, [], start=False
        )
        assert created == external_id_for_key(key)
        return created

    def end_by_provider(self, backend: ExecutionBackend, handle: TaskHandle) -> str | None:
        # SIGKILL of the task's supervisor (what runs it), once it has claimed the task; the
        # command dies with it (PR_SET_PDEATHSIG).
        started = _task_dir(backend, handle) / STARTED
        for _ in range(3000):
            if started.exists():
                break
            time.sleep(0.01)
        pid = int(json.loads(started.read_text())["pid"])
        os.kill(pid, signal.SIGKILL)
        for _ in range(3000):  # gone (or a zombie nobody reaps): no longer the task's
            if process_start_ticks(pid) is None:
                break
            time.sleep(0.01)
        return "engine_lost"

    def provider_task(self, backend: ExecutionBackend, handle: TaskHandle) -> ProviderTask | None:
        # The records name the image; the host runs the process without CPU or memory limits.
        task = _records(backend).inspect(handle.external_id)
        assert task is not None
        return ProviderTask(image=task.launched.image)
