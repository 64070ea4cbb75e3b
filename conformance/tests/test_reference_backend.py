"""The in-process reference backend running real Python callables, beyond the suite."""

from __future__ import annotations

import asyncio
import hashlib
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from altar.conformance import InProcessExecutionBackend, InProcessFabric
from altar.execution import (
    ContainerTaskSpec,
    ResourceRequest,
    TaskHandle,
    TaskState,
    TaskStatus,
    Transfer,
    TransferIntegrityError,
    UnsupportedCapabilityError,
)


def _spec(**changes: object) -> ContainerTaskSpec:
    fields: dict[str, object] = {"kind": "unit", "image": "python", "command": ["run"]}
    fields.update(changes)
    return ContainerTaskSpec(**fields)  # type: ignore[arg-type]


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


async def _settle(backend: InProcessExecutionBackend, handle: TaskHandle) -> TaskStatus:
    """Poll until the task's thread has finished (a guard against hangs, not a timing test)."""
    for _ in range(1000):
        (status,) = await backend.poll([handle])
        if status.state.is_terminal:
            return status
        await asyncio.sleep(0.01)
    raise AssertionError(f"task {handle.external_id} never finished")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.asyncio
async def test_submit_returns_while_the_callable_still_runs(tmp_path: Path) -> None:
    release = threading.Event()

    def runtime(spec: ContainerTaskSpec, workdir: Path) -> int:
        release.wait(30)
        return 0

    backend = InProcessExecutionBackend(runtime, data_root=tmp_path)
    first = await backend.submit(_spec())
    second = await backend.submit(_spec())  # resubmitting while active does not block or raise
    statuses = await backend.poll([first, second])
    assert [s.state for s in statuses] == [TaskState.RUNNING, TaskState.RUNNING]
    release.set()
    assert (await _settle(backend, first)).state is TaskState.SUCCEEDED
    assert (await _settle(backend, second)).state is TaskState.SUCCEEDED


@pytest.mark.asyncio
@pytest.mark.parametrize(("returned", "reason"), [(None, None), (0, None), (3, "exit_3")])
async def test_the_callables_return_value_is_the_exit_code(
    tmp_path: Path, returned: int | None, reason: str | None
) -> None:
    backend = InProcessExecutionBackend(lambda spec, workdir: returned, data_root=tmp_path)
    status = await _settle(backend, await backend.submit(_spec()))
    assert (status.failure.reason if status.failure else None) == reason


@pytest.mark.asyncio
async def test_an_exception_is_exit_1_with_the_traceback_as_log(tmp_path: Path) -> None:
    def runtime(spec: ContainerTaskSpec, workdir: Path) -> int:
        raise RuntimeError("model exploded")

    backend = InProcessExecutionBackend(runtime, data_root=tmp_path)
    handle = await backend.submit(_spec())
    status = await _settle(backend, handle)
    assert status.failure is not None
    assert status.failure.reason == "exit_1"
    detail = await backend.failure_detail(handle)
    assert detail is not None
    assert detail.splitlines()[-1] == "RuntimeError: model exploded"


@pytest.mark.asyncio
async def test_the_callable_sees_the_spec_and_writes_outputs_under_the_workdir(
    tmp_path: Path,
) -> None:
    def runtime(spec: ContainerTaskSpec, workdir: Path) -> int:
        text = (workdir / spec.inputs[0].logical_path).read_text()
        out = workdir / spec.outputs[0].logical_path
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text.upper() + spec.env["SUFFIX"])
        return 0

    source = tmp_path / "in.txt"
    source.write_text("variants")
    backend = InProcessExecutionBackend(runtime, data_root=tmp_path / "data")
    inputs = [Transfer(str(source), "jobs/J/in.txt", digest=_digest(b"variants"))]
    result = tmp_path / "results" / "out.txt"
    outputs = [Transfer(str(result), "jobs/J/out.txt")]
    await backend.stage_inputs(inputs)
    handle = await backend.submit(_spec(inputs=inputs, outputs=outputs, env={"SUFFIX": "!"}))
    assert (await _settle(backend, handle)).state is TaskState.SUCCEEDED
    await backend.collect_outputs(outputs)
    assert result.read_text() == "VARIANTS!"
    assert backend.path_resolver().resolve("jobs/J/in.txt") == str(tmp_path / "data/jobs/J/in.txt")


@pytest.mark.asyncio
async def test_a_missing_output_is_named(tmp_path: Path) -> None:
    backend = InProcessExecutionBackend(data_root=tmp_path)
    with pytest.raises(FileNotFoundError, match=r"jobs/J/never\.tsv"):
        await backend.collect_outputs([Transfer(str(tmp_path / "x"), "jobs/J/never.tsv")])


@pytest.mark.asyncio
async def test_a_deadline_is_enforced_without_a_poll(tmp_path: Path) -> None:
    clock = FakeClock()
    release = threading.Event()

    def runtime(spec: ContainerTaskSpec, workdir: Path) -> int:
        release.wait(30)
        return 0

    backend = InProcessExecutionBackend(
        runtime, data_root=tmp_path, fabric=InProcessFabric(clock=clock)
    )
    handle = await backend.submit(_spec(timeout_s=10))
    clock.now += 11  # past the deadline, and nobody polled
    release.set()  # the callable then "succeeds", too late
    status = await _settle(backend, handle)
    assert status.failure is not None
    assert status.failure.reason == "timeout"


@pytest.mark.asyncio
async def test_cancel_fails_the_task_and_ignores_its_late_result(tmp_path: Path) -> None:
    release = threading.Event()
    finished = threading.Event()

    def runtime(spec: ContainerTaskSpec, workdir: Path) -> int:
        release.wait(30)
        finished.set()
        return 0

    backend = InProcessExecutionBackend(runtime, data_root=tmp_path)
    handle = await backend.submit(_spec())
    await backend.cancel(handle)
    release.set()
    await asyncio.to_thread(finished.wait, 30)
    (status,) = await backend.poll([handle])
    assert status.failure is not None
    assert status.failure.reason == "cancelled"


@pytest.mark.asyncio
async def test_staging_verifies_while_copying_and_never_touches_the_source(tmp_path: Path) -> None:
    source = tmp_path / "weights.bin"
    source.write_bytes(b"actual")
    backend = InProcessExecutionBackend(data_root=tmp_path / "data")
    wrong = Transfer(str(source), "models/m/weights.bin", digest=_digest(b"expected"))
    with pytest.raises(TransferIntegrityError, match="expected sha256:"):
        await backend.stage_inputs([wrong])
    assert source.read_bytes() == b"actual"
    assert not (tmp_path / "data/models/m").exists() or not any(
        (tmp_path / "data/models/m").iterdir()
    ), "a rejected copy leaves nothing behind"
    await backend.stage_inputs([Transfer(f"file://{source}", "models/m/weights.bin")])
    assert (tmp_path / "data/models/m/weights.bin").read_bytes() == b"actual"


@pytest.mark.asyncio
async def test_an_input_already_in_place_is_verified_not_deleted(tmp_path: Path) -> None:
    backend = InProcessExecutionBackend(data_root=tmp_path)
    in_place = tmp_path / "models/m/weights.bin"
    in_place.parent.mkdir(parents=True)
    in_place.write_bytes(b"actual")
    wrong = Transfer(str(in_place), "models/m/weights.bin", digest=_digest(b"expected"))
    with pytest.raises(TransferIntegrityError):
        await backend.stage_inputs([wrong])
    assert in_place.read_bytes() == b"actual", "the caller's file must survive a mismatch"


@pytest.mark.asyncio
@pytest.mark.parametrize("logical", ["../escape.bin", "jobs/../../escape.bin"])
async def test_logical_paths_cannot_leave_the_data_root(tmp_path: Path, logical: str) -> None:
    source = tmp_path / "f.bin"
    source.write_bytes(b"x")
    backend = InProcessExecutionBackend(data_root=tmp_path / "data")
    with pytest.raises(ValueError, match="leaves the mount root"):
        await backend.stage_inputs([Transfer(str(source), logical)])
    assert not (tmp_path / "escape.bin").exists()


@pytest.mark.asyncio
async def test_remote_uris_are_refused_explicitly(tmp_path: Path) -> None:
    backend = InProcessExecutionBackend(data_root=tmp_path)
    with pytest.raises(UnsupportedCapabilityError, match="local paths"):
        await backend.stage_inputs([Transfer("gs://bucket/w.bin", "w.bin")])


@pytest.mark.asyncio
async def test_file_uris_with_localhost_and_escapes_name_the_local_file(tmp_path: Path) -> None:
    # file://localhost/... with %20: the host is this machine and the path is percent-decoded
    # (the 0.1 backend read it as the relative path 'localhost/.../a%20b').
    source = tmp_path / "a b" / "w.bin"
    source.parent.mkdir()
    source.write_bytes(b"weights")
    uri = "file://localhost" + str(source).replace(" ", "%20")
    backend = InProcessExecutionBackend(data_root=tmp_path / "data")
    await backend.stage_inputs([Transfer(uri, "in/w.bin", digest=_digest(b"weights"))])
    assert (tmp_path / "data" / "in" / "w.bin").read_bytes() == b"weights"
    collected = tmp_path / "out dir" / "w.bin"
    collected.parent.mkdir()
    out_uri = "file://localhost" + str(collected).replace(" ", "%20")
    await backend.collect_outputs([Transfer(out_uri, "in/w.bin")])
    assert collected.read_bytes() == b"weights"


@pytest.mark.asyncio
async def test_gpu_requests_beyond_the_hosts_devices_are_refused(tmp_path: Path) -> None:
    backend = InProcessExecutionBackend(data_root=tmp_path, gpus=2)
    await backend.submit(_spec(resources=ResourceRequest(gpu="a100", count=2)))
    with pytest.raises(UnsupportedCapabilityError, match="requires 3 GPU") as raised:
        await backend.submit(_spec(resources=ResourceRequest(gpu="a100", count=3)))
    assert raised.value.capability == "gpu"
    assert (await backend.capacity()).pools == {"cpu": 4, "gpu": 2}


def test_constructor_rejects_nonsense(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="gpus"):
        InProcessExecutionBackend(data_root=tmp_path, gpus=-1)
    with pytest.raises(ValueError, match="max_timeout_s"):
        InProcessExecutionBackend(data_root=tmp_path, max_timeout_s=0)


def test_loading_the_backend_does_not_import_pytest() -> None:
    # The registry loads the entry point in `altar` commands: no test machinery there.
    code = (
        "import sys\n"
        "from importlib.metadata import entry_points\n"
        "(ep,) = entry_points(group='altar.execution_backends', name='in-process')\n"
        "cls = ep.load()\n"
        "assert cls.name == 'in-process', cls\n"
        "print('pytest' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


@pytest.mark.asyncio
async def test_a_task_verifying_backend_fails_a_wrong_input_before_running(tmp_path: Path) -> None:
    from altar.conformance.reference import InProcessTaskVerifyingBackend

    calls: list[str] = []

    def runtime(spec: ContainerTaskSpec, workdir: Path) -> int:
        calls.append(spec.kind)
        return 0

    source = tmp_path / "weights.bin"
    source.write_bytes(b"actual")
    backend = InProcessTaskVerifyingBackend(runtime, data_root=tmp_path / "data")
    wrong = Transfer(str(source), "models/m/weights.bin", digest=_digest(b"expected"))
    await backend.stage_inputs([wrong])  # copied, not judged: the task judges
    handle = await backend.submit(_spec(inputs=[wrong]))
    status = await _settle(backend, handle)
    assert status.failure is not None
    assert status.failure.reason == "input_digest_mismatch"
    assert status.failure.deterministic
    assert "expected sha256:" in (status.failure.detail or "")
    assert calls == [], "the runtime must not run on a wrong input"
    right = replace_digest(wrong, b"actual")
    handle = await backend.submit(_spec(inputs=[right]))
    assert (await _settle(backend, handle)).state is TaskState.SUCCEEDED
    assert calls == ["unit"]


def replace_digest(transfer: Transfer, data: bytes) -> Transfer:
    return Transfer(transfer.uri, transfer.logical_path, digest=_digest(data))


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("command", "reason", "log"),
    [
        (["sh", "-c", 'printf "%s\\n" "$1"; exit 4', "sh", "$(id) 'q'"], "exit_4", "$(id) 'q'"),
        ([], "exit_127", "the task has an empty command; there is nothing to run"),
        (["/no/such/program"], "exit_127", "cannot run '/no/such/program'"),
    ],
)
async def test_run_command_locally_runs_argv_and_keeps_its_output(
    tmp_path: Path, command: list[str], reason: str, log: str
) -> None:
    from altar.conformance.reference import run_command_locally

    backend = InProcessExecutionBackend(run_command_locally, data_root=tmp_path)
    handle = await backend.submit(_spec(command=command))
    status = await _settle(backend, handle)
    assert status.failure is not None
    assert status.failure.reason == reason
    detail = await backend.failure_detail(handle)
    assert detail is not None
    assert detail.startswith(log)


@pytest.mark.asyncio
async def test_a_plan_names_the_runtime_by_import_path(tmp_path: Path) -> None:
    from altar.execution.registry import create_backend

    backend = create_backend(
        "in-process",
        {"runtime": "altar.conformance.reference:run_command_locally", "data_root": str(tmp_path)},
    )
    handle = await backend.submit(_spec(command=["sh", "-c", "exit 5"]))
    status = await _settle(backend, handle)  # type: ignore[arg-type]
    assert status.failure is not None
    assert status.failure.reason == "exit_5"


@pytest.mark.parametrize(
    ("runtime", "message"),
    [
        ("run_command_locally", "as 'module:function'"),
        ("altar.conformance.reference:no_such", "cannot be imported"),
        ("altar.conformance.reference:LOG_TAIL_LINES", "is not callable"),
    ],
)
def test_a_bad_runtime_name_is_one_clear_error(tmp_path: Path, runtime: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        InProcessExecutionBackend(runtime, data_root=tmp_path)
