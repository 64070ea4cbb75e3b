"""The real runtime and the UNMODIFIED modal client against a fake control plane on 127.0.0.1.

This is the one test that catches drift in the SDK: the wire messages it sends for cpu,
memory, gpu, timeout and tags, and the private result layout the runtime reads. It is valid
only for the SDK line it was written against, and skips for any other.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import modal
import pytest
from altar.backends.modal import ModalExecutionBackend
from altar.backends.modal.fake import FakeModalRuntime
from altar.backends.modal.runtime import SandboxExistsError, SandboxRequest
from altar.backends.modal.sdk_runtime import ModalSdkRuntime
from altar.execution import (
    BackendUnavailableError,
    ContainerTaskSpec,
    ResourceRequest,
    TaskHandle,
    TaskState,
    TaskStatus,
    Transfer,
    TransferIntegrityError,
    UnsupportedCapabilityError,
)
from altar.execution.labels import submission_labels
from modal_proto import api_pb2

from .modal_control_plane import ControlPlane

pytestmark = pytest.mark.skipif(
    not modal.__version__.startswith("1.6."),
    reason=f"the fake control plane speaks modal 1.6's wire protocol; modal {modal.__version__} "
    "is installed",
)

TOKEN_ID = "ak-altarfaketoken0000000"
TOKEN_SECRET = "as-altarfakesecret000000"


@pytest.fixture
def control_plane(monkeypatch: pytest.MonkeyPatch) -> Iterator[ControlPlane]:
    with ControlPlane() as plane:
        monkeypatch.setenv("MODAL_SERVER_URL", plane.url)
        monkeypatch.setenv("MODAL_TOKEN_ID", TOKEN_ID)
        monkeypatch.setenv("MODAL_TOKEN_SECRET", TOKEN_SECRET)
        monkeypatch.setenv("MODAL_SANDBOX_V2", "0")
        yield plane


async def _until_terminal(
    backend: ModalExecutionBackend, handle: TaskHandle, deadline_s: float = 15
) -> TaskStatus:
    deadline = time.monotonic() + deadline_s
    while True:
        (status,) = await backend.poll([handle])
        if status.state.is_terminal or time.monotonic() > deadline:
            return status
        await asyncio.sleep(0.1)


async def _eventually(condition: Callable[[], bool], within_s: float = 10) -> None:
    for _ in range(int(within_s / 0.05)):
        if condition():
            return
        await asyncio.sleep(0.05)


def _spec(command: list[str], **changes: object) -> ContainerTaskSpec:
    fields: dict[str, object] = {
        "kind": "wire",
        "image": "busybox:1.36",
        "command": command,
        "labels": {"job_id": "J", "fold": "0"},
    }
    fields.update(changes)
    return ContainerTaskSpec(**fields)  # type: ignore[arg-type]


@pytest.mark.asyncio
async def test_sdk_runtime_against_a_fake_control_plane(control_plane: ControlPlane) -> None:
    client = await modal.Client.from_credentials.aio(TOKEN_ID, TOKEN_SECRET)
    try:
        backend = ModalExecutionBackend(
            runtime=ModalSdkRuntime(client=client),
            app_name="altar-wire",
            volume_name="altar-wire-data",
            pool_accelerators={"a100": "A100"},
        )
        servicer = control_plane.servicer

        # create: cpu, memory (request and limit), gpu with its exact count, timeout, tags
        spec = _spec(
            ["sh", "-c", "exit 7"],
            resources=ResourceRequest(gpu="a100", count=2, memory_gb=0.5, cpu=1.5),
            timeout_s=30,
            env={"ALTAR_WIRE": "yes"},
        )
        failing = await backend.submit(spec)
        created = [r for name, r in servicer.requests if name == "SandboxCreate"][-1]
        definition = created.definition
        assert failing.external_id == servicer.sandboxes[failing.external_id].sandbox_id
        assert list(definition.entrypoint_args) == ["sh", "-c", "exit 7"]
        resources = definition.resources
        assert (resources.milli_cpu, resources.milli_cpu_max) == (1500, 1500)
        assert (resources.memory_mb, resources.memory_mb_max) == (512, 512)
        assert (resources.gpu_config.gpu_type, resources.gpu_config.count) == ("A100", 2)
        assert definition.timeout_secs == 30
        assert {t.tag_name: t.tag_value for t in created.tags} == {"job_id": "J", "fold": "0"}
        assert [m.mount_path for m in definition.volume_mounts] == ["/mnt/volume"]
        secrets = [r for name, r in servicer.requests if name == "SecretGetOrCreate"]
        assert any(dict(r.env_dict) == {"ALTAR_WIRE": "yes"} for r in secrets)
        images = [r for name, r in servicer.requests if name == "ImageGetOrCreate"]
        assert any("FROM busybox:1.36" in str(r) for r in images)

        # the output tail of a failed task
        chatty = await backend.submit(
            _spec(["sh", "-c", 'for i in $(seq 0 99); do echo "log line $i"; done; exit 3'])
        )
        status = await _until_terminal(backend, chatty)
        assert status.failure is not None
        assert status.failure.reason == "exit_3"
        detail = await backend.failure_detail(chatty)
        assert detail is not None
        assert detail.splitlines()[-1] == "log line 99"
        assert "log line 0\n" not in detail + "\n"
        assert len(detail.splitlines()) == 20

        # poll (through from_id, on a fresh runtime: the id alone is enough) → exit_7
        reopened = ModalExecutionBackend(
            runtime=ModalSdkRuntime(client=client), app_name="altar-wire"
        )
        status = await _until_terminal(reopened, failing)
        assert status.failure is not None
        assert (status.failure.reason, status.failure.exit_code) == ("exit_7", 7)

        # success, and no limit → Modal's 24 h maximum on the wire
        succeeding = await backend.submit(_spec(["true"]))
        assert servicer.sandboxes[succeeding.external_id].definition.timeout_secs == 86400
        assert (await _until_terminal(backend, succeeding)).state is TaskState.SUCCEEDED

        # running, then terminate (twice: idempotent) → cancelled, not exit_137
        sleeping = await backend.submit(_spec(["sleep", "30"]))
        assert [s.state for s in await backend.poll([sleeping])] == [TaskState.RUNNING]
        await backend.cancel(sleeping)
        await backend.cancel(sleeping)
        status = await _until_terminal(backend, sleeping)
        assert status.failure is not None
        assert status.failure.reason == "cancelled"
        terminates = [r for name, r in servicer.requests if name == "SandboxTerminate"]
        assert [r.sandbox_id for r in terminates] == [sleeping.external_id] * 2

        # the timeout result → timeout (the SDK's returncode would say 124)
        expiring = await backend.submit(_spec(["sleep", "30"], timeout_s=1))
        status = await _until_terminal(backend, expiring)
        assert status.failure is not None
        assert status.failure.reason == "timeout"

        # a kernel OOM kill → oom_killed (the SDK's returncode would say a plain 137)
        hungry = await backend.submit(
            _spec(["sleep", "30"], resources=ResourceRequest(memory_gb=1))
        )
        control_plane.oom_kill(hungry.external_id)
        status = await _until_terminal(backend, hungry)
        assert status.failure is not None
        assert (status.failure.reason, status.failure.exit_code) == ("oom_killed", 137)

        # an id Modal does not know → container_missing
        missing = TaskHandle("modal", "sb-" + "x" * 22)
        (status,) = await backend.poll([missing])
        assert status.failure is not None
        assert status.failure.reason == "container_missing"
        await backend.cancel(missing)
    finally:
        await client.close.aio()


@pytest.mark.asyncio
async def test_volume_staging_and_collection_through_the_sdk(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    client = await modal.Client.from_credentials.aio(TOKEN_ID, TOKEN_SECRET)
    servicer = control_plane.servicer

    def puts() -> int:
        return sum(1 for name, _ in servicer.requests if name == "VolumePutFiles2")

    try:
        backend = ModalExecutionBackend(
            runtime=ModalSdkRuntime(client=client), volume_name="altar-wire-data"
        )
        data = bytes(range(256)) * 64 + b"weights\n"
        weights = tmp_path / "weights v1 'quoted'.bin"
        weights.write_bytes(data)
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        transfer = Transfer(str(weights), "models/m/weights.bin", digest=digest)

        await backend.stage_inputs([transfer])
        assert servicer.volume_file("altar-wire-data", "models/m/weights.bin") == data
        record = servicer.volume_file("altar-wire-data", "models/m/weights.bin.sha256-staged")
        assert record is not None
        assert record.decode().startswith(f"staged-file/1 {digest} size={len(data)} mtime=")

        # the record vouches for the bytes: a second staging uploads nothing
        before = puts()
        await backend.stage_inputs([transfer])
        assert puts() == before

        # a mismatch uploads nothing either
        bad = Transfer(str(weights), "models/m/other.bin", digest="sha256:" + "0" * 64)
        with pytest.raises(TransferIntegrityError):
            await backend.stage_inputs([bad])
        assert puts() == before
        assert servicer.volume_file("altar-wire-data", "models/m/other.bin") is None

        # a directory without a digest is uploaded file by file
        (tmp_path / "dir" / "sub").mkdir(parents=True)
        (tmp_path / "dir" / "sub" / "a.txt").write_bytes(b"a\n")
        await backend.stage_inputs([Transfer(str(tmp_path / "dir"), "inputs/dir")])
        assert servicer.volume_file("altar-wire-data", "inputs/dir/sub/a.txt") == b"a\n"

        # submit removes a stale output; collect_outputs brings the new one back
        servicer.put_volume_file("altar-wire-data", "jobs/J/out.tsv", b"stale\n")
        destination = tmp_path / "results" / "out.tsv"
        output = Transfer(str(destination), "jobs/J/out.tsv")
        handle = await backend.submit(_spec(["true"], outputs=[output]))
        assert servicer.volume_file("altar-wire-data", "jobs/J/out.tsv") is None
        servicer.put_volume_file("altar-wire-data", "jobs/J/out.tsv", b"score\t1.0\n")
        assert (await _until_terminal(backend, handle)).state is TaskState.SUCCEEDED
        await backend.collect_outputs([output])
        assert destination.read_bytes() == b"score\t1.0\n"
        with pytest.raises(FileNotFoundError):
            await backend.collect_outputs([Transfer(str(tmp_path / "x"), "jobs/J/none.tsv")])
    finally:
        await client.close.aio()


@pytest.mark.asyncio
async def test_a_submit_cancelled_while_waiting_for_scheduling_leaves_nothing_running(
    control_plane: ControlPlane,
) -> None:
    client = await modal.Client.from_credentials.aio(TOKEN_ID, TOKEN_SECRET)
    try:
        backend = ModalExecutionBackend(runtime=ModalSdkRuntime(client=client))
        servicer = control_plane.servicer
        servicer.schedule_delay_s = 30
        submit = asyncio.ensure_future(backend.submit(_spec(["sleep", "30"])))
        await _eventually(lambda: bool(servicer.sandboxes))
        (sandbox_id,) = servicer.sandboxes
        submit.cancel()
        with pytest.raises(asyncio.CancelledError):
            await submit
        await _eventually(lambda: servicer.sandboxes[sandbox_id].result is not None)
        result = servicer.sandboxes[sandbox_id].result
        assert result is not None
        assert result.status == api_pb2.GenericResult.GENERIC_STATUS_TERMINATED
    finally:
        await client.close.aio()


@pytest.mark.asyncio
async def test_the_default_backend_uses_the_environments_credentials(
    control_plane: ControlPlane,
) -> None:
    backend = ModalExecutionBackend(app_name="altar-wire-env")  # as `altar run` builds it
    try:
        handle = await backend.submit(_spec(["sh", "-c", "exit 4"]))
        status = await _until_terminal(backend, handle)
        assert status.failure is not None
        assert status.failure.exit_code == 4
        assert "altar-wire-env" in control_plane.servicer.apps
    finally:
        client = await modal.Client.from_env.aio()
        await client.close.aio()  # also forgets the process-wide client


@pytest.mark.asyncio
async def test_an_unavailable_control_plane_is_backend_unavailable(
    control_plane: ControlPlane,
) -> None:
    client = await modal.Client.from_credentials.aio(TOKEN_ID, TOKEN_SECRET)
    try:
        backend = ModalExecutionBackend(runtime=ModalSdkRuntime(client=client))
        control_plane.servicer.unavailable = True
        with pytest.raises(BackendUnavailableError, match="server error"):
            await backend.poll([TaskHandle("modal", "sb-" + "u" * 22)])
    finally:
        await client.close.aio()


@pytest.mark.asyncio
async def test_a_sandbox_modal_refuses_is_a_refused_spec_not_a_retryable_error(
    control_plane: ControlPlane,
) -> None:
    client = await modal.Client.from_credentials.aio(TOKEN_ID, TOKEN_SECRET)
    try:
        backend = ModalExecutionBackend(runtime=ModalSdkRuntime(client=client))
        control_plane.servicer.refuse_create = "GPU type 'A10X' is not supported"
        # The runner fails a ValueError deterministically; any other error would be retried,
        # and Modal refuses the same request again.
        with pytest.raises(UnsupportedCapabilityError, match="A10X") as refused:
            await backend.submit(_spec(["true"]))
        assert isinstance(refused.value.__cause__, modal.exception.InvalidError)
    finally:
        await client.close.aio()


class _ListingBackend(ModalExecutionBackend):
    LIST_FROM = 2


_SANDBOX_RPCS = ("SandboxList", "SandboxWait", "SandboxCreate", "SandboxGetTaskId")


def _sandbox_rpcs(names: list[str]) -> Counter[str]:
    return Counter(name for name in names if name in _SANDBOX_RPCS)


@pytest.mark.asyncio
async def test_a_poll_lists_running_sandboxes_with_the_requests_the_fake_counts(
    control_plane: ControlPlane,
) -> None:
    client = await modal.Client.from_credentials.aio(TOKEN_ID, TOKEN_SECRET)
    servicer = control_plane.servicer
    servicer.list_page_size = 3
    fake = FakeModalRuntime(list_page_size=3)
    try:
        backends = [
            _ListingBackend(runtime=ModalSdkRuntime(client=client), app_name="altar-wire-list"),
            _ListingBackend(runtime=fake, app_name="altar-wire-list"),
        ]
        counted = []
        for backend in backends:
            done = await backend.submit(_spec(["true"], labels={"altar.run": "W"}))
            if backend.runtime is fake:
                fake.finish(done.external_id, 0)
            assert (await _until_terminal(backend, done)).state is TaskState.SUCCEEDED
            running = [
                await backend.submit(_spec(["sleep", "30"], labels={"altar.run": "W"}))
                for _ in range(7)
            ]
            servicer.rpcs.clear()
            fake.rpcs.clear()
            statuses = await backend.poll([done, *running])
            assert [s.state for s in statuses] == [TaskState.SUCCEEDED] + [TaskState.RUNNING] * 7
            counted.append(
                _sandbox_rpcs(servicer.rpcs if backend.runtime is not fake else fake.rpcs)
            )
            # all seen: paging stops before the empty page
            servicer.rpcs.clear()
            fake.rpcs.clear()
            await backend.poll(running)
            counted.append(
                _sandbox_rpcs(servicer.rpcs if backend.runtime is not fake else fake.rpcs)
            )
            await backend.cleanup(running)
        wire_mixed, wire_running, fake_mixed, fake_running = counted
        # 7 running at 3 a page: 3 pages and the empty one, then a wait for the finished one
        assert wire_mixed == fake_mixed == Counter({"SandboxList": 4, "SandboxWait": 1})
        assert wire_running == fake_running == Counter({"SandboxList": 3})
        listed = [r for name, r in servicer.requests if name == "SandboxList"]
        assert {r.include_finished for r in listed} == {False}
        assert {tuple((t.tag_name, t.tag_value) for t in r.tags) for r in listed} == {
            (("altar.run", "W"),)
        }
    finally:
        await client.close.aio()


@pytest.mark.asyncio
async def test_the_fake_costs_a_create_what_the_sdk_sends(control_plane: ControlPlane) -> None:
    client = await modal.Client.from_credentials.aio(TOKEN_ID, TOKEN_SECRET)
    servicer = control_plane.servicer
    fake = FakeModalRuntime()
    try:
        real = ModalSdkRuntime(client=client)
        request = SandboxRequest(
            app_name="altar-wire-cost",
            image="busybox:1.36",
            command=("sleep", "30"),
            timeout_s=60,
            env={"A": "1"},
            tags={"k": "v"},
            volume_name="altar-wire-cost",
        )
        costs: list[Counter[str]] = []

        def cost(rpcs: list[str]) -> Counter[str]:
            # The SDK resolves a create's dependencies concurrently (any order) and looks the
            # environment up once per process, so compare counts without it.
            counts = Counter(rpcs)
            del counts["EnvironmentGetOrCreate"]
            rpcs.clear()
            return counts

        for runtime, rpcs in ((real, servicer.rpcs), (fake, fake.rpcs)):
            for _ in range(2):  # the first create also looks up the app and the volume
                rpcs.clear()
                sandbox_id = await runtime.create_sandbox(request)
                costs.append(cost(rpcs))
            await runtime.sandbox_result(sandbox_id)
            costs.append(cost(rpcs))
            await runtime.sandbox_tags(sandbox_id)
            costs.append(cost(rpcs))
            await runtime.terminate_sandbox(sandbox_id)
            costs.append(cost(rpcs))
        assert costs[:5] == costs[5:]
        assert costs[1] == Counter(
            ["ImageGetOrCreate", "SecretGetOrCreate", "SandboxCreate", "SandboxGetTaskId"]
        )
    finally:
        await client.close.aio()


@pytest.mark.asyncio
async def test_a_submit_cut_off_after_modal_accepted_it_is_adopted_on_resubmit(
    control_plane: ControlPlane,
) -> None:
    client = await modal.Client.from_credentials.aio(TOKEN_ID, TOKEN_SECRET)
    servicer = control_plane.servicer
    run = "0123456789abcdef0123456789abcdef"
    labels = submission_labels(run, "fold-0", 1)
    spec = _spec(["sleep", "30"], labels=labels)
    try:
        # The runner dies while Modal's answer to SandboxCreate is on its way: the sandbox
        # exists and runs, the SDK never learnt its id (so it could not terminate it).
        servicer.create_answer_delay_s = 30
        first = ModalExecutionBackend(runtime=ModalSdkRuntime(client=client), app_name="altar-kill")
        submit = asyncio.ensure_future(first.submit(spec))
        await _eventually(lambda: bool(servicer.sandboxes))
        submit.cancel()
        with pytest.raises(asyncio.CancelledError):
            await submit
        (created,) = servicer.sandboxes
        servicer.create_answer_delay_s = 0

        # The resumed runner submits the same spec (the journaled key) from a new runtime.
        resumed = ModalExecutionBackend(
            runtime=ModalSdkRuntime(client=client), app_name="altar-kill"
        )
        handle = await resumed.submit(spec)
        assert handle.external_id == created
        assert [name for name, _ in servicer.requests].count("SandboxCreate") == 1
        assert servicer.sandboxes[created].definition.name == "altar-" + labels["altar.submission"]
        assert servicer.sandboxes[created].tags == labels

        listed = await resumed.list_submissions(run)
        assert listed is not None
        assert [(h.external_id, h.labels) for h in listed] == [(created, labels)]
        assert await resumed.list_submissions("f" * 32) == []

        # a second create under the same name is refused by Modal while the first runs
        runtime = ModalSdkRuntime(client=client)
        request = SandboxRequest(
            app_name="altar-kill",
            image="busybox:1.36",
            command=("true",),
            timeout_s=60,
            name="altar-" + labels["altar.submission"],
        )
        with pytest.raises(SandboxExistsError, match="already named"):
            await runtime.create_sandbox(request)
        await resumed.cleanup([handle])
        assert await resumed.list_submissions(run) == []
    finally:
        await client.close.aio()
