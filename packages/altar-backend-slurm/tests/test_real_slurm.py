"""The backend against the real Slurm on this machine (slurmctld, slurmd, slurmdbd), with real
Docker containers, on this login node and over the real sshd on 127.0.0.1.

Each test submits real jobs to the shared single-node cluster (2 CPUs), so jobs may queue
behind other helpers' work: waits are generous and nothing here asserts a duration.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from altar.backends.slurm import SlurmExecutionBackend
from altar.execution import (
    BackendUnavailableError,
    ContainerTaskSpec,
    ResourceRequest,
    TaskHandle,
    TaskState,
    TaskStatus,
    Transfer,
    UnsupportedCapabilityError,
)

pytestmark = [pytest.mark.slurm, pytest.mark.docker]

WAIT_S = 240  # a job may wait behind other helpers' jobs on the 2-CPU test node


def _backend(
    data_root: Path | str, docker_host: str, slurm_cluster: dict[str, str], **options: Any
) -> SlurmExecutionBackend:
    return SlurmExecutionBackend(
        data_root=str(data_root),
        partition=slurm_cluster["partition"],
        container_runtime="docker",
        runtime_options=["-H", docker_host],
        **options,
    )


@pytest.fixture
def local(tmp_path: Path, docker_host: str, slurm_cluster: dict[str, str]) -> SlurmExecutionBackend:
    return _backend(tmp_path / "data", docker_host, slurm_cluster)


def _spec(command: list[str], **changes: Any) -> ContainerTaskSpec:
    image = os.environ.get("ALTAR_TEST_IMAGE", "busybox:latest")
    spec = ContainerTaskSpec(kind="slurm-test", image=image, command=command, labels={"t": "1"})
    return replace(spec, **changes)


async def _finish(backend: SlurmExecutionBackend, handle: TaskHandle) -> TaskStatus:
    (status,) = await backend.await_completion(
        [handle], interval_s=0.5, max_interval_s=2, timeout_s=WAIT_S
    )
    return status


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@pytest.mark.asyncio
async def test_exit_code_and_log_tail(local: SlurmExecutionBackend) -> None:
    handle = await local.submit(_spec(["sh", "-c", "echo to-stdout; echo to-stderr >&2; exit 3"]))
    status = await _finish(local, handle)
    assert status.state is TaskState.FAILED
    assert status.failure is not None
    assert (status.failure.reason, status.failure.exit_code) == ("exit_3", 3)
    assert status.failure.deterministic
    detail = await local.failure_detail(handle)
    assert detail is not None
    assert "to-stdout" in detail
    assert "to-stderr" in detail


@pytest.mark.asyncio
@pytest.mark.parametrize("code", [0, 1, 2, 126, 127, 128, 129, 137, 143, 200, 255])
async def test_every_exit_status_reads_exactly(local: SlurmExecutionBackend, code: int) -> None:
    # sacct reports statuses above 128 modulo 128 (200 as 72); the job's own record does not.
    handle = await local.submit(_spec(["sh", "-c", f"exit {code}"]))
    status = await _finish(local, handle)
    if code == 0:
        assert (status.state, status.failure) == (TaskState.SUCCEEDED, None)
        return
    assert status.state is TaskState.FAILED
    assert status.failure is not None
    assert (status.failure.reason, status.failure.exit_code) == (f"exit_{code}", code)
    assert status.failure.deterministic is (code not in (137, 143))  # as the local backend
    path = Path(local._layout(handle.external_id.split(":")[1]).exit_record)
    record = await asyncio.to_thread(path.read_text)
    assert record.startswith(f"altar-exit/1 status={code} start=")


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("changes", "refusal"),
    [
        ({"env": {"A": "line\rfeed"}}, "carriage return"),
        ({"resources": ResourceRequest(gpu="a100", count=1)}, "GPU pool 'a100'"),
        ({"timeout_s": 10**12}, "timeout_s"),
    ],
)
async def test_check_spec_refuses_what_submit_refuses(
    local: SlurmExecutionBackend, changes: dict[str, Any], refusal: str
) -> None:
    spec = _spec(["true"], **changes)
    with pytest.raises(UnsupportedCapabilityError) as checked:
        await local.check_spec(spec)
    assert refusal in str(checked.value)
    with pytest.raises(UnsupportedCapabilityError) as submitted:
        await local.submit(spec)
    assert str(submitted.value) == str(checked.value)  # one validation, one text
    await local.check_spec(_spec(["true"]))  # an ordinary spec passes


@pytest.mark.asyncio
async def test_logs_of_a_succeeded_job_are_served_after_cleanup(
    local: SlurmExecutionBackend,
) -> None:
    handle = await local.submit(_spec(["sh", "-c", "echo out-line; echo err-line >&2"]))
    status = await _finish(local, handle)
    assert status.state is TaskState.SUCCEEDED
    # Times are the job's own (its exit record), not when the runner noticed.
    path = Path(local._layout(handle.external_id.split(":")[1]).exit_record)
    words = dict(w.partition("=")[::2] for w in (await asyncio.to_thread(path.read_text)).split())
    assert (status.started_at, status.finished_at) == (float(words["start"]), float(words["end"]))
    before = await local.task_logs(handle)
    assert before is not None
    assert (before.stdout, before.stderr) == ("out-line\n", "err-line\n")
    await local.cleanup([handle])
    assert not any((Path(local.data_root) / ".altar-slurm" / "jobs").iterdir())
    after = await local.task_logs(handle)
    assert after == before


@pytest.mark.asyncio
async def test_a_job_slurm_refuses_leaves_no_job_directory(local: SlurmExecutionBackend) -> None:
    # More memory than the test node has: sbatch refuses the job outright.
    too_big = _spec(["true"], resources=ResourceRequest(memory_gb=100_000))
    with pytest.raises(ValueError, match="sbatch refused the job"):
        await local.submit(too_big)
    jobs = Path(local.data_root) / ".altar-slurm" / "jobs"
    assert not jobs.exists() or not any(jobs.iterdir())


HOSTILE = ["two  spaces", "'q' \"d\" `t`", "$(touch /mnt/volume/injected) ${HOME}", "", "a\nb"]


@pytest.mark.asyncio
async def test_argv_env_and_outputs_are_exact(local: SlurmExecutionBackend, tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_bytes(b"input bytes\n")
    env = {"ALTAR_SPACES": "a b  c", "ALTAR_SUBST": "$(id) ${HOME} $$", "ALTAR_NL": "one\ntwo"}
    program = (
        'printf "%s\\0" "$@" > /mnt/volume/out/argv; '
        'printf "%s\\0" "$ALTAR_SPACES" "$ALTAR_SUBST" "$ALTAR_NL" > /mnt/volume/out/env; '
        "cat /mnt/volume/in/in.txt > /mnt/volume/out/copy"
    )
    spec = _spec(
        ["sh", "-c", f"mkdir -p /mnt/volume/out; {program}", "argv0", *HOSTILE],
        env=env,
        inputs=[Transfer(str(source), "in/in.txt", digest=_digest(b"input bytes\n"))],
        outputs=[
            Transfer(str(tmp_path / "got" / name), f"out/{name}")
            for name in ("argv", "env", "copy")
        ],
        resources=ResourceRequest(cpu=0.5, memory_gb=0.25),
        timeout_s=600,
    )
    await local.stage_inputs(spec.inputs)
    handle = await local.submit(spec)
    status = await _finish(local, handle)
    assert status.state is TaskState.SUCCEEDED, (status.failure, await local.failure_detail(handle))
    await local.collect_outputs(spec.outputs)
    got = tmp_path / "got"
    assert (got / "argv").read_bytes().split(b"\0")[:-1] == [h.encode() for h in HOSTILE]
    assert (got / "env").read_bytes().split(b"\0")[:-1] == [v.encode() for v in env.values()]
    assert (got / "copy").read_bytes() == b"input bytes\n"
    assert not (Path(local.data_root) / "injected").exists()
    await local.cleanup([handle])
    assert not any((Path(local.data_root) / ".altar-slurm" / "jobs").iterdir())


@pytest.mark.asyncio
async def test_input_digest_mismatch_fails_before_the_task(
    local: SlurmExecutionBackend, tmp_path: Path
) -> None:
    source = tmp_path / "w.bin"
    source.write_bytes(b"actual")
    transfer = Transfer(str(source), "w/w.bin", digest=_digest(b"expected"))
    await local.stage_inputs([transfer])
    spec = _spec(["sh", "-c", "touch /mnt/volume/ran"], inputs=[transfer])
    status = await _finish(local, await local.submit(spec))
    assert status.failure is not None
    assert status.failure.reason == "input_digest_mismatch"
    assert not (Path(local.data_root) / "ran").exists()


@pytest.mark.parametrize(
    "command",
    [
        ["dd", "if=/dev/zero", "of=/dev/null", "bs=400M", "count=1"],
        # a child is killed and the main process exits 0: still an OOM kill, never COMPLETED
        ["sh", "-c", "dd if=/dev/zero of=/dev/null bs=400M count=1; exit 0"],
    ],
    ids=["main", "child"],
)
@pytest.mark.asyncio
async def test_container_over_its_memory_is_oom_killed(
    local: SlurmExecutionBackend, command: list[str]
) -> None:
    spec = _spec(command, resources=ResourceRequest(memory_gb=0.125))
    status = await _finish(local, await local.submit(spec))
    assert status.failure is not None
    assert status.failure.reason == "oom_killed", status.failure


@pytest.mark.asyncio
async def test_cancel_stops_the_job_and_its_container(
    local: SlurmExecutionBackend, docker_host: str
) -> None:
    handle = await local.submit(_spec(["sleep", "300"]))
    for _ in range(WAIT_S * 2):
        (status,) = await local.poll([handle])
        if status.state is TaskState.RUNNING:
            break
        await asyncio.sleep(0.5)
    token = handle.external_id.split(":", 1)[1]
    for _ in range(60):  # the container starts a moment after the job does
        listed = await asyncio.to_thread(_containers, docker_host, token)
        if listed.strip():
            break
        await asyncio.sleep(0.5)
    await local.cancel(handle)
    await local.cancel(handle)
    status = await _finish(local, handle)
    assert status.failure is not None
    assert status.failure.reason == "cancelled"
    fresh = replace_backend(local)
    (elsewhere,) = await fresh.poll([handle])
    assert elsewhere.failure is not None
    assert elsewhere.failure.reason == "cancelled"
    listed = await asyncio.to_thread(_containers, docker_host, token, all_states=True)
    assert listed.strip() == "", "scancel must stop the container, not only the job"


def _containers(docker_host: str, token: str, *, all_states: bool = False) -> str:
    flags = ["ps", "-aq"] if all_states else ["ps", "-q"]
    return subprocess.run(
        ["docker", "-H", docker_host, *flags, "--filter", f"name=altar-{token}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def replace_backend(backend: SlurmExecutionBackend) -> SlurmExecutionBackend:
    return SlurmExecutionBackend(
        data_root=backend.data_root,
        partition=backend.placement.partition,
        container_runtime=backend.container_runtime,
        runtime_options=backend.runtime_options,
    )


@pytest.mark.slow
@pytest.mark.asyncio
async def test_time_limit_reads_as_timeout(local: SlurmExecutionBackend) -> None:
    # Slurm's resolution is a minute, checked about every 30 s: this takes 60-100 s.
    status = await _finish(local, await local.submit(_spec(["sleep", "600"], timeout_s=5)))
    assert status.failure is not None
    assert status.failure.reason == "timeout", status.failure


@pytest.mark.asyncio
async def test_keyed_resubmit_adopts_the_job_from_a_new_instance(
    local: SlurmExecutionBackend,
) -> None:
    key = hashlib.sha256(os.urandom(8)).hexdigest()[:32]
    spec = _spec(["sh", "-c", "exit 0"], labels={"altar.run": "r1", "altar.submission": key})
    first = await local.submit(spec)
    # The runner died before journaling the handle; a new process submits the key again.
    again = await replace_backend(local).submit(spec)
    assert again.external_id == first.external_id
    assert (await _finish(local, first)).state is TaskState.SUCCEEDED
    # Finished: still adopted, never run a second time.
    after = await replace_backend(local).submit(spec)
    assert after.external_id == first.external_id
    listed = await local.list_submissions("r1")
    assert listed is not None
    assert [h.external_id for h in listed] == [first.external_id]
    assert listed[0].labels["altar.submission"] == key


@pytest.mark.asyncio
async def test_an_unreachable_controller_is_an_outage(
    local: SlurmExecutionBackend,
    tmp_path: Path,
    docker_host: str,
    slurm_cluster: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Real squeue/sacct error texts, without stopping the slurmctld other tests share:
    the clients are pointed at ports nothing listens on."""
    handle = await local.submit(_spec(["sleep", "5"]))  # no record yet when polled
    # A later run's backend: it has never seen the job, so its first poll asks the queue.
    local = _backend(local.data_root, docker_host, slurm_cluster)
    conf = await asyncio.to_thread(Path(slurm_cluster["conf"]).read_text)
    broken = tmp_path / "slurm.conf"
    broken.write_text(
        conf.replace("SlurmctldPort=6817", "SlurmctldPort=9").replace(
            "AccountingStoragePort=6819", "AccountingStoragePort=9"
        )
    )
    monkeypatch.setenv("SLURM_CONF", str(broken))
    with pytest.raises(BackendUnavailableError, match="Slurm cannot be reached"):
        await local.poll([handle])
    monkeypatch.setenv("SLURM_CONF", slurm_cluster["conf"])
    assert (await _finish(local, handle)).state is TaskState.SUCCEEDED


@pytest.mark.ssh
@pytest.mark.asyncio
async def test_over_ssh_with_rsync_staging(
    ssh_target: Any, docker_host: str, slurm_cluster: dict[str, str], tmp_path: Path
) -> None:
    remote_root = tmp_path / "remote root $x"  # the login node's filesystem (same machine)
    backend = _backend(
        remote_root,
        docker_host,
        slurm_cluster,
        ssh_host=ssh_target.host,
        ssh_config=ssh_target.config,
    )
    source = tmp_path / "in.txt"
    source.write_bytes(b"over ssh\n")
    spec = _spec(
        ["sh", "-c", "cat /mnt/volume/in.txt > /mnt/volume/out.txt; echo bye; exit 3"],
        inputs=[Transfer(str(source), "in.txt", digest=_digest(b"over ssh\n"))],
        outputs=[Transfer(str(tmp_path / "back" / "out.txt"), "out.txt")],
    )
    await backend.stage_inputs(spec.inputs)
    handle = await backend.submit(spec)
    status = await _finish(backend, handle)
    assert status.failure is not None
    assert status.failure.reason == "exit_3"
    assert "bye" in (await backend.failure_detail(handle) or "")
    await backend.collect_outputs(spec.outputs)
    assert (tmp_path / "back" / "out.txt").read_bytes() == b"over ssh\n"


@pytest.fixture
def podman(
    tmp_path: Path, service_env: dict[str, str], slurm_cluster: dict[str, str]
) -> SlurmExecutionBackend:
    conf = service_env.get("ALTAR_TEST_PODMAN_CONF", "")
    if not conf or not Path(conf).is_file():
        message = "rootful Podman is not set up; run `scripts/services up`"
        if os.environ.get("ALTAR_REQUIRE_SERVICES") == "1":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return SlurmExecutionBackend(
        data_root=str(tmp_path / "data"),
        partition=slurm_cluster["partition"],
        container_runtime="podman",
        runtime_options=[
            "--storage-driver=vfs",
            "--root",
            service_env["ALTAR_TEST_PODMAN_ROOT"],
            "--runroot",
            service_env["ALTAR_TEST_PODMAN_RUNROOT"],
        ],
        runtime_env={"CONTAINERS_CONF": conf},
    )


@pytest.mark.podman
@pytest.mark.asyncio
async def test_podman_runs_the_argv_exactly_and_reports_exit_codes(
    podman: SlurmExecutionBackend, tmp_path: Path
) -> None:
    env = {"ALTAR_SUBST": "$(id) ${HOME} 'q'", "ALTAR_NL": "one\ntwo"}
    program = 'printf "%s\\0" "$@" "$ALTAR_SUBST" "$ALTAR_NL" > /mnt/volume/out; exit 3'
    spec = _spec(
        ["sh", "-c", program, "argv0", *HOSTILE],
        env=env,
        outputs=[Transfer(str(tmp_path / "got"), "out")],
        resources=ResourceRequest(cpu=0.5, memory_gb=0.25),
    )
    handle = await podman.submit(spec)
    status = await _finish(podman, handle)
    assert status.failure is not None, await podman.failure_detail(handle)
    assert status.failure.reason == "exit_3", await podman.failure_detail(handle)
    await podman.collect_outputs(spec.outputs)
    words = (tmp_path / "got").read_bytes().split(b"\0")[:-1]
    assert words == [w.encode() for w in [*HOSTILE, *env.values()]]


@pytest.mark.podman
@pytest.mark.asyncio
async def test_podman_container_over_its_memory_is_oom_killed(
    podman: SlurmExecutionBackend,
) -> None:
    spec = _spec(
        ["dd", "if=/dev/zero", "of=/dev/null", "bs=400M", "count=1"],
        resources=ResourceRequest(memory_gb=0.125),
    )
    status = await _finish(podman, await podman.submit(spec))
    assert status.failure is not None
    assert status.failure.reason == "oom_killed", status.failure
