"""ModalExecutionBackend against the in-memory Modal (FakeModalRuntime)."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import importlib.metadata
import os
import re
from pathlib import Path

import pytest
from altar.backends.modal import ModalExecutionBackend, SandboxResult
from altar.backends.modal.fake import FakeModalRuntime
from altar.backends.modal.runtime import ModalRuntime, SandboxRequest
from altar.execution import (
    EXECUTION_BACKEND_GROUP,
    BackendUnavailableError,
    ContainerTaskSpec,
    ResourceRequest,
    TaskHandle,
    TaskState,
    Transfer,
    TransferIntegrityError,
    UnsupportedCapabilityError,
)
from altar.execution.atomic import temp_owner

SANDBOX_ID = re.compile(r"sb-[A-Za-z0-9]{22}")


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def fake(clock: Clock) -> FakeModalRuntime:
    return FakeModalRuntime(clock=clock)


@pytest.fixture
def backend(fake: FakeModalRuntime) -> ModalExecutionBackend:
    return ModalExecutionBackend(runtime=fake, app_name="app", volume_name="vol")


def _spec(**changes: object) -> ContainerTaskSpec:
    fields: dict[str, object] = {
        "kind": "score",
        "image": "busybox:1.36",
        "command": ["sh", "-c", "echo hi"],
        "labels": {"job_id": "J"},
    }
    fields.update(changes)
    return ContainerTaskSpec(**fields)  # type: ignore[arg-type]


def test_fake_implements_the_runtime_protocol(fake: FakeModalRuntime) -> None:
    assert isinstance(fake, ModalRuntime)


def test_entry_point_names_the_backend() -> None:
    (entry,) = [
        e
        for e in importlib.metadata.entry_points(group=EXECUTION_BACKEND_GROUP)
        if e.name == "modal"
    ]
    assert entry.load() is ModalExecutionBackend
    assert ModalExecutionBackend.name == "modal"
    assert ModalExecutionBackend.input_digest_verification == "staging"


def test_options_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALTAR_MODAL_APP", "from-env-app")
    monkeypatch.setenv("ALTAR_MODAL_VOLUME", "from-env-volume")
    backend = ModalExecutionBackend(runtime=FakeModalRuntime())
    assert (backend.app_name, backend.volume_name) == ("from-env-app", "from-env-volume")
    monkeypatch.delenv("ALTAR_MODAL_APP")
    monkeypatch.delenv("ALTAR_MODAL_VOLUME")
    backend = ModalExecutionBackend(runtime=FakeModalRuntime())
    assert (backend.app_name, backend.volume_name) == ("altar-exec", "altar-data")


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="max_concurrency"):
        ModalExecutionBackend(runtime=FakeModalRuntime(), max_concurrency=0)
    with pytest.raises(ValueError, match="without a count"):
        ModalExecutionBackend(runtime=FakeModalRuntime(), pool_accelerators={"gpu": "A100:2"})


async def _finish(backend: ModalExecutionBackend, fake: FakeModalRuntime, code: int):
    handle = await backend.submit(_spec())
    fake.finish(handle.external_id, code)
    (status,) = await backend.poll([handle])
    return handle, status


@pytest.mark.asyncio
async def test_submit_creates_one_sandbox_with_the_mapped_request(
    backend: ModalExecutionBackend, fake: FakeModalRuntime
) -> None:
    spec = _spec(
        resources=ResourceRequest(gpu="gpu", count=2, memory_gb=2, cpu=4),
        env={"A": "1"},
        timeout_s=600,
    )
    handle = await backend.submit(spec)
    assert SANDBOX_ID.fullmatch(handle.external_id)
    assert (handle.backend, handle.labels) == ("modal", {"job_id": "J"})
    request = fake.sandboxes[handle.external_id].request
    assert request.command == ("sh", "-c", "echo hi")
    assert (request.cpu, request.memory_mib, request.gpu) == ((4.0, 4.0), (2048, 2048), "A10G:2")
    assert (request.timeout_s, request.env, request.tags) == (600, {"A": "1"}, {"job_id": "J"})
    assert (request.app_name, request.volume_name, request.mount_root) == (
        "app",
        "vol",
        "/mnt/volume",
    )
    assert backend.path_resolver().resolve("jobs/J/x") == "/mnt/volume/jobs/J/x"


@pytest.mark.asyncio
async def test_unsupported_specs_create_nothing(
    backend: ModalExecutionBackend, fake: FakeModalRuntime
) -> None:
    with pytest.raises(UnsupportedCapabilityError):
        await backend.submit(_spec(resources=ResourceRequest(gpu="tpu")))
    with pytest.raises(UnsupportedCapabilityError):
        await backend.submit(_spec(timeout_s=86401))
    assert fake.sandboxes == {}
    assert "create_sandbox" not in fake.calls


@pytest.mark.asyncio
async def test_running_success_and_exit_codes(
    backend: ModalExecutionBackend, fake: FakeModalRuntime
) -> None:
    handle = await backend.submit(_spec())
    assert [s.state for s in await backend.poll([handle])] == [TaskState.RUNNING]
    fake.finish(handle.external_id, 0)
    (status,) = await backend.poll([handle])
    assert (status.state, status.failure) == (TaskState.SUCCEEDED, None)
    _, failed = await _finish(backend, fake, 124)
    assert failed.failure is not None
    assert (failed.failure.reason, failed.failure.exit_code) == ("exit_124", 124)


@pytest.mark.asyncio
async def test_timeout_oom_and_eviction_come_from_the_result_status(
    backend: ModalExecutionBackend, fake: FakeModalRuntime
) -> None:
    expired, oom, evicted = [await backend.submit(_spec()) for _ in range(3)]
    fake.expire(expired.external_id)
    fake.oom_kill(oom.external_id)
    fake.evict(evicted.external_id)
    statuses = await backend.poll([expired, oom, evicted])
    assert [s.failure.reason for s in statuses if s.failure] == [
        "timeout",
        "oom_killed",
        "oom_killed",
    ]


@pytest.mark.asyncio
async def test_modal_enforces_the_deadline_without_anyone_polling(
    backend: ModalExecutionBackend, fake: FakeModalRuntime, clock: Clock
) -> None:
    handle = await backend.submit(_spec(timeout_s=60))
    clock.now += 61
    (status,) = await backend.poll([handle])
    assert status.failure is not None
    assert status.failure.reason == "timeout"


@pytest.mark.asyncio
async def test_unknown_sandbox_is_a_terminal_container_missing(
    backend: ModalExecutionBackend,
) -> None:
    handle = TaskHandle("modal", "sb-" + "Z" * 22, {"job_id": "J"})
    (status,) = await backend.poll([handle])
    assert status.state is TaskState.FAILED
    assert status.failure is not None
    assert (status.failure.reason, status.failure.deterministic) == ("container_missing", False)


@pytest.mark.asyncio
async def test_unreachable_modal_is_transient_never_missing(
    backend: ModalExecutionBackend, fake: FakeModalRuntime
) -> None:
    handle = await backend.submit(_spec())
    fake.unreachable = True
    with pytest.raises(BackendUnavailableError):
        await backend.poll([handle, handle, handle])
    with pytest.raises(BackendUnavailableError):
        await backend.cleanup([handle])
    with pytest.raises(BackendUnavailableError):
        await backend.submit(_spec())
    assert await backend.failure_detail(handle) is None
    fake.unreachable = False
    assert [s.state for s in await backend.poll([handle])] == [TaskState.RUNNING]


@pytest.mark.asyncio
async def test_poll_keeps_order_and_a_fresh_backend_polls_old_handles(
    backend: ModalExecutionBackend, fake: FakeModalRuntime
) -> None:
    handles = [await backend.submit(_spec(labels={"shard": str(i)})) for i in range(5)]
    for i, handle in enumerate(handles):
        fake.finish(handle.external_id, i)
    reopened = ModalExecutionBackend(runtime=fake, app_name="app", volume_name="vol")
    statuses = await reopened.poll(list(reversed(handles)))
    assert [s.handle.labels["shard"] for s in statuses] == ["4", "3", "2", "1", "0"]
    assert [s.failure.exit_code if s.failure else 0 for s in statuses] == [4, 3, 2, 1, 0]


class CountingRuntime(FakeModalRuntime):
    def __init__(self) -> None:
        super().__init__(latency_s=0.01)
        self.in_flight = 0
        self.most = 0

    async def sandbox_result(self, sandbox_id: str) -> SandboxResult:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            return await super().sandbox_result(sandbox_id)
        finally:
            self.in_flight -= 1


@pytest.mark.asyncio
async def test_polls_run_concurrently_within_the_bound() -> None:
    fake = CountingRuntime()
    backend = ModalExecutionBackend(runtime=fake, max_concurrency=4)
    handles = [await backend.submit(_spec()) for _ in range(12)]
    for handle in handles:  # finished sandboxes are not listed: each is asked about by id
        fake.finish(handle.external_id, 0)
    assert len(await backend.poll(handles)) == 12
    assert fake.most == 4


@pytest.mark.asyncio
async def test_cancel_terminates_and_is_idempotent(
    backend: ModalExecutionBackend, fake: FakeModalRuntime
) -> None:
    handle = await backend.submit(_spec())
    await backend.cancel(handle)
    await backend.cancel(handle)
    await backend.cancel(TaskHandle("modal", "sb-" + "Q" * 22))
    assert fake.running() == []
    (status,) = await backend.poll([handle])
    assert status.failure is not None
    assert status.failure.reason == "cancelled"


@pytest.mark.asyncio
async def test_cancel_after_finish_keeps_the_outcome(
    backend: ModalExecutionBackend, fake: FakeModalRuntime
) -> None:
    handle, _ = await _finish(backend, fake, 0)
    await backend.cancel(handle)
    assert [s.state for s in await backend.poll([handle])] == [TaskState.SUCCEEDED]


@pytest.mark.asyncio
async def test_cleanup_terminates_every_running_sandbox_of_the_run(
    backend: ModalExecutionBackend, fake: FakeModalRuntime
) -> None:
    handles = [await backend.submit(_spec()) for _ in range(3)]
    other = await backend.submit(_spec(labels={"job_id": "other"}))
    fake.finish(handles[0].external_id, 0)
    missing = TaskHandle("modal", "sb-" + "M" * 22)
    await backend.cleanup([*handles, missing])
    await backend.cleanup(handles)
    assert fake.running() == [other.external_id]


@pytest.mark.asyncio
async def test_failure_detail_is_the_output_tail(
    backend: ModalExecutionBackend, fake: FakeModalRuntime
) -> None:
    handle = await backend.submit(_spec())
    fake.write_output(handle.external_id, [f"log line {i}" for i in range(100)])
    fake.finish(handle.external_id, 3)
    detail = await backend.failure_detail(handle)
    assert detail is not None
    lines = detail.splitlines()
    assert (len(lines), lines[-1], lines[0]) == (20, "log line 99", "log line 80")
    assert await backend.failure_detail(TaskHandle("modal", "sb-" + "N" * 22)) is None


# -- staging ---------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_staging_uploads_verified_inputs_and_records_them(
    backend: ModalExecutionBackend, fake: FakeModalRuntime, tmp_path: Path
) -> None:
    weights = tmp_path / "weights bin's $(x)"
    weights.write_bytes(b"model weights")
    transfer = Transfer(str(weights), "models/m/weights.bin", digest=_digest(b"model weights"))
    await backend.stage_inputs([transfer])
    volume = fake.volumes["vol"]
    assert volume["models/m/weights.bin"].data == b"model weights"
    record = volume["models/m/weights.bin.sha256-staged"].data.decode()
    assert record == f"staged-file/1 {transfer.digest} size=13 mtime=1800000000\n"


@pytest.mark.asyncio
async def test_a_second_staging_uploads_nothing(
    backend: ModalExecutionBackend, fake: FakeModalRuntime, tmp_path: Path
) -> None:
    source = tmp_path / "ref.fa"
    source.write_bytes(b">chr1\nACGT\n")
    transfer = Transfer(source.as_uri(), "refs/ref.fa", digest=_digest(b">chr1\nACGT\n"))
    await backend.stage_inputs([transfer])
    uploads = len(fake.uploads)
    await backend.stage_inputs([transfer])
    assert len(fake.uploads) == uploads


@pytest.mark.asyncio
async def test_a_rewritten_volume_file_is_staged_again(
    backend: ModalExecutionBackend, fake: FakeModalRuntime, tmp_path: Path, clock: Clock
) -> None:
    source = tmp_path / "ref.fa"
    source.write_bytes(b"ACGT")
    transfer = Transfer(str(source), "refs/ref.fa", digest=_digest(b"ACGT"))
    await backend.stage_inputs([transfer])
    clock.now += 5
    fake.put("vol", "refs/ref.fa", b"TTTT")  # someone overwrote it on the volume
    await backend.stage_inputs([transfer])
    assert fake.volumes["vol"]["refs/ref.fa"].data == b"ACGT"


@pytest.mark.asyncio
async def test_without_trusting_records_every_staging_uploads(
    fake: FakeModalRuntime, tmp_path: Path
) -> None:
    backend = ModalExecutionBackend(runtime=fake, trust_verification_records=False)
    source = tmp_path / "x"
    source.write_bytes(b"x")
    transfer = Transfer(str(source), "x", digest=_digest(b"x"))
    await backend.stage_inputs([transfer])
    await backend.stage_inputs([transfer])
    assert fake.uploads.count("x") == 2
    assert "x.sha256-staged" in fake.volumes["altar-data"]


@pytest.mark.asyncio
async def test_a_mismatch_is_rejected_before_anything_is_uploaded(
    backend: ModalExecutionBackend, fake: FakeModalRuntime, tmp_path: Path
) -> None:
    source = tmp_path / "weights.bin"
    source.write_bytes(b"actual bytes")
    bad = Transfer(str(source), "models/w.bin", digest=_digest(b"expected bytes"))
    with pytest.raises(TransferIntegrityError, match="has digest"):
        await backend.stage_inputs([bad])
    assert fake.uploads == []


@pytest.mark.asyncio
async def test_a_digest_on_a_directory_or_missing_file_is_rejected(
    backend: ModalExecutionBackend, fake: FakeModalRuntime, tmp_path: Path
) -> None:
    (tmp_path / "dir").mkdir()
    for uri, message in ((tmp_path / "dir", "regular file"), (tmp_path / "missing", "not exist")):
        with pytest.raises(TransferIntegrityError, match=message):
            await backend.stage_inputs([Transfer(str(uri), "m/w", digest=_digest(b""))])
    assert fake.uploads == []


@pytest.mark.asyncio
async def test_inputs_without_digest_upload_files_and_directories(
    backend: ModalExecutionBackend, fake: FakeModalRuntime, tmp_path: Path
) -> None:
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "sub" / "a.txt").write_bytes(b"a")
    (tmp_path / "f.txt").write_bytes(b"f")
    await backend.stage_inputs(
        [Transfer(str(tmp_path / "d"), "in/d"), Transfer(str(tmp_path / "f.txt"), "in/f.txt")]
    )
    assert sorted(fake.volumes["vol"]) == ["in/d/sub/a.txt", "in/f.txt"]
    with pytest.raises(FileNotFoundError, match="does not exist"):
        await backend.stage_inputs([Transfer(str(tmp_path / "nope"), "in/nope")])


@pytest.mark.asyncio
async def test_remote_uris_are_refused(backend: ModalExecutionBackend) -> None:
    for uri in ("gs://bucket/w.bin", "file://otherhost/w.bin"):
        with pytest.raises(UnsupportedCapabilityError, match="Modal backend"):
            await backend.stage_inputs([Transfer(uri, "w.bin")])


@pytest.mark.asyncio
async def test_an_input_changing_during_upload_is_removed_and_refused(
    fake: FakeModalRuntime, tmp_path: Path
) -> None:
    source = tmp_path / "w.bin"
    source.write_bytes(b"v1")

    class RacingRuntime(FakeModalRuntime):
        async def upload(self, volume_name: str, remote_path: str, source_: object) -> None:
            await super().upload(volume_name, remote_path, source_)  # type: ignore[arg-type]
            source.write_bytes(b"v2 longer")

    racing = RacingRuntime()
    backend = ModalExecutionBackend(runtime=racing, volume_name="vol")
    with pytest.raises(TransferIntegrityError, match="changed while it was uploaded"):
        await backend.stage_inputs([Transfer(str(source), "w.bin", digest=_digest(b"v1"))])
    assert "w.bin" not in racing.volumes["vol"]


@pytest.mark.asyncio
async def test_submit_removes_stale_outputs_and_collect_outputs_renames_into_place(
    backend: ModalExecutionBackend, fake: FakeModalRuntime, tmp_path: Path
) -> None:
    fake.put("vol", "jobs/J/out.tsv", b"stale")
    destination = tmp_path / "results" / "out.tsv"
    output = Transfer(str(destination), "jobs/J/out.tsv")
    handle = await backend.submit(_spec(outputs=[output]))
    assert "jobs/J/out.tsv" not in fake.volumes["vol"]
    fake.put("vol", "jobs/J/out.tsv", b"fresh result\n")
    fake.finish(handle.external_id, 0)
    await backend.collect_outputs([output])
    assert destination.read_bytes() == b"fresh result\n"
    assert _names(destination.parent) == ["out.tsv"]


@pytest.mark.asyncio
async def test_collect_outputs_verifies_a_declared_output_digest(
    backend: ModalExecutionBackend, fake: FakeModalRuntime, tmp_path: Path
) -> None:
    destination = tmp_path / "results" / "scores.tsv"
    destination.parent.mkdir()
    destination.write_bytes(b"previous run's scores\n")
    output = Transfer(str(destination), "jobs/J/scores.tsv", digest=_digest(b"expected scores\n"))
    fake.put("vol", "jobs/J/scores.tsv", b"truncated sco")
    with pytest.raises(TransferIntegrityError, match=r"scores\.tsv"):
        await backend.collect_outputs([output])
    # nothing half-written and the previous file untouched
    assert _names(destination.parent) == ["scores.tsv"]
    assert destination.read_bytes() == b"previous run's scores\n"
    fake.put("vol", "jobs/J/scores.tsv", b"expected scores\n")
    await backend.collect_outputs([output])
    assert destination.read_bytes() == b"expected scores\n"
    assert _names(destination.parent) == ["scores.tsv"]


@pytest.mark.asyncio
async def test_a_missing_output_leaves_no_partial_file(
    backend: ModalExecutionBackend, tmp_path: Path
) -> None:
    destination = tmp_path / "out.tsv"
    destination.write_bytes(b"previous")
    with pytest.raises(FileNotFoundError, match="jobs/J/none"):
        await backend.collect_outputs([Transfer(str(destination), "jobs/J/none")])
    assert _names(tmp_path) == ["out.tsv"]
    assert destination.read_bytes() == b"previous"


@pytest.mark.asyncio
async def test_resubmitting_a_spec_launches_a_fresh_sandbox(
    backend: ModalExecutionBackend, fake: FakeModalRuntime
) -> None:
    first, second = await asyncio.gather(backend.submit(_spec()), backend.submit(_spec()))
    assert first.external_id != second.external_id
    fake.finish(first.external_id, 1)
    assert [s.state for s in await backend.poll([first, second])] == [
        TaskState.FAILED,
        TaskState.RUNNING,
    ]


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "change",
    [
        {"timeout_s": 86401},
        {"timeout_s": 0},
        {"cpu": (2.0, 1.0)},
        {"memory_mib": (1024, 512)},
        {"gpu": "A100:0"},
        {"gpu": ":2"},
    ],
)
async def test_the_fake_refuses_what_modal_would(fake: FakeModalRuntime, change: dict) -> None:
    request = SandboxRequest(app_name="a", image="busybox:1.36", command=("true",), timeout_s=60)
    await fake.create_sandbox(request)
    with pytest.raises(ValueError, match=r"timeout|limit|GPU"):
        await fake.create_sandbox(dataclasses.replace(request, **change))
    assert len(fake.sandboxes) == 1


@pytest.mark.asyncio
async def test_a_tilde_in_a_transfer_uri_is_a_directory_name_as_on_every_backend(
    backend: ModalExecutionBackend,
    fake: FakeModalRuntime,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    (home / "x").parent.mkdir()
    (home / "x").write_bytes(b"from $HOME")
    (work / "~").mkdir(parents=True)
    (work / "~" / "x").write_bytes(b"from the working directory")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    await backend.stage_inputs([Transfer("~/x", "in/x")])
    assert fake.volumes["vol"]["in/x"].data == b"from the working directory"


@pytest.mark.asyncio
async def test_downloads_use_altars_one_temporary_name_and_leave_none_behind(
    tmp_path: Path,
) -> None:
    seen: list[Path] = []

    class Recording(FakeModalRuntime):
        async def download(self, volume_name: str, remote_path: str, destination: Path) -> None:
            seen.append(destination)
            await asyncio.to_thread(destination.write_bytes, b"partial")
            if remote_path == "jobs/J/broken":
                raise BackendUnavailableError("connection lost mid-download")
            await super().download(volume_name, remote_path, destination)

    fake = Recording()
    backend = ModalExecutionBackend(runtime=fake, volume_name="vol")
    fake.put("vol", "jobs/J/out", b"scores")
    await backend.collect_outputs([Transfer(str(tmp_path / "out"), "jobs/J/out")])
    with pytest.raises(BackendUnavailableError):
        await backend.collect_outputs([Transfer(str(tmp_path / "broken"), "jobs/J/broken")])
    assert [temp_owner(path.name) for path in seen] == [os.getpid(), os.getpid()]
    assert _names(tmp_path) == ["out"]
