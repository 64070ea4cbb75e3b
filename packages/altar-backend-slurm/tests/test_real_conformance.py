"""The altar-conformance suite against the real Slurm on this machine, with real Docker
containers: on this login node, and over the real sshd on 127.0.0.1.

The hooks act on the cluster the way the world would: ``finish_task`` tells the running
container its exit code (``docker exec``), ``expire_task`` shortens the job's time limit with
``scontrol`` so Slurm itself ends it (about a minute), ``oom_kill_task`` makes a process in the
container allocate past its memory limit, and ``make_provider_unreachable`` points the Slurm
clients at ports nothing listens on (the shared slurmctld keeps running for other tests).
Every job a test leaves behind is cancelled when the test ends.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from altar.backends.slurm import CommandResult, LocalLoginNode, SlurmExecutionBackend
from altar.backends.slurm.fake import read_script
from altar.backends.slurm.runtime import LoginNode
from altar.backends.slurm.sdk_runtime import SshLoginNode
from altar.conformance import ExecutionBackendContract, LaunchedTask, ProviderTask
from altar.execution import ContainerTaskSpec, ExecutionBackend, ResourceRequest, TaskHandle

from .launched import launched_task

pytestmark = [pytest.mark.slurm, pytest.mark.docker, pytest.mark.slow]

WAIT_S = 300
# Waits for its exit code in /tmp/exit (written by finish_task), for ten minutes at most, then
# prints the log lines write_task_log left in /tmp/log (to the job's stdout, as a task would).
WAITING = (
    'i=0; while [ ! -e /tmp/exit ] && [ "$i" -lt 3000 ]; do sleep 0.2; i=$((i+1)); done; '
    'cat /tmp/log 2>/dev/null; exit "$(cat /tmp/exit 2>/dev/null || echo 0)"'
)


class Breakable:
    """A login node whose Slurm clients can be pointed at a controller that is not there."""

    def __init__(self, inner: LoginNode, broken_conf: str) -> None:
        self.inner = inner
        self.remote = inner.remote
        self.broken_conf = broken_conf
        self.broken = False

    def run(self, argv: Sequence[str]) -> CommandResult:
        if self.broken:
            argv = ["env", f"SLURM_CONF={self.broken_conf}", *argv]
        return self.inner.run(argv)

    def push(self, local: str, remote: str) -> None:
        self.inner.push(local, remote)

    def pull(self, remote: str, local: str) -> None:
        self.inner.pull(remote, local)


def _run(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=False).stdout


def _job(handle: TaskHandle) -> tuple[str, str]:
    job_id, token = handle.external_id.split(":", 1)
    return job_id, token


def _active(job_id: str) -> bool:
    state = _run(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"]).strip()
    return state in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "")


def _wait_until_done(job_id: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while _active(job_id):
        if time.monotonic() > deadline:
            pytest.fail(f"job {job_id} did not end within {WAIT_S} s")
        time.sleep(0.3)
    # sacct learns about the end a moment after squeue does
    while time.monotonic() < deadline:
        if _run(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State"]).strip() not in (
            "",
            "RUNNING",
            "PENDING",
        ):
            return
        time.sleep(0.3)


class _RealSlurmContract(ExecutionBackendContract):
    __test__ = False
    unlimited_timeout_s = None  # the test partition's MaxTime is UNLIMITED
    max_timeout_s = None

    def make_node(self, request: pytest.FixtureRequest) -> LoginNode:
        raise NotImplementedError

    @pytest.fixture
    def backend(
        self,
        request: pytest.FixtureRequest,
        tmp_path: Path,
        docker_host: str,
        slurm_cluster: dict[str, str],
    ) -> Iterator[SlurmExecutionBackend]:
        conf = Path(slurm_cluster["conf"]).read_text()
        broken = tmp_path / "unreachable-slurm.conf"
        broken.write_text(
            conf.replace("SlurmctldPort=6817", "SlurmctldPort=9").replace(
                "AccountingStoragePort=6819", "AccountingStoragePort=9"
            )
        )
        node = Breakable(self.make_node(request), str(broken))
        self._options = {
            "data_root": str(tmp_path / "data"),
            "partition": slurm_cluster["partition"],
            "container_runtime": "docker",
            "runtime_options": ["-H", docker_host],
            "runtime": node,
            # the contract bounds a poll at 5 s; with slurmctld gone squeue takes ~18 s to say so
            "query_timeout_s": 3,
        }
        self._docker_host = docker_host
        backend = SlurmExecutionBackend(**self._options)
        yield backend
        node.broken = False
        scratch = f"{backend.scratch}/"
        mine = [
            line.split("|", 1)[0]
            for line in _run(["squeue", "-h", "--me", "-o", "%i|%Z"]).splitlines()
            if line.split("|", 1)[-1].startswith(scratch)
        ]
        if mine:
            subprocess.run(["scancel", *mine], check=False)

    @pytest.fixture
    def spec(self) -> ContainerTaskSpec:
        image = os.environ.get("ALTAR_TEST_IMAGE", "busybox:latest")
        return ContainerTaskSpec(
            kind="conformance",
            image=image,
            command=["sh", "-c", WAITING],
            labels={"job_id": "J", "kind": "conformance"},
        )

    def _exec(self, handle: TaskHandle, *argv: str, wait: bool = True) -> None:
        """Run ``argv`` in the task's container, first waiting for the container to run."""
        job_id, token = _job(handle)
        deadline = time.monotonic() + WAIT_S
        command = ["docker", "-H", self._docker_host, "exec", f"altar-{token}"]
        while wait:
            ready = subprocess.run([*command, "true"], capture_output=True, check=False)
            if ready.returncode == 0:
                break
            if time.monotonic() > deadline or not _active(job_id):
                pytest.fail(f"the container of job {job_id} never ran: {ready.stderr!r}")
            time.sleep(0.3)
        subprocess.run([*command, *argv], capture_output=True, check=False)

    def finish_task(self, backend: ExecutionBackend, handle: TaskHandle, *, exit_code: int) -> None:
        self._exec(handle, "sh", "-c", f"echo {exit_code} > /tmp/exit")
        _wait_until_done(_job(handle)[0])

    def expire_task(self, backend: ExecutionBackend, handle: TaskHandle) -> None:
        job_id, _ = _job(handle)
        subprocess.run(["scontrol", "update", f"JobId={job_id}", "TimeLimit=1"], check=True)
        _wait_until_done(job_id)

    def launched_timeout(self, backend: ExecutionBackend, handle: TaskHandle) -> int | None:
        # What the job asked Slurm for (Slurm itself rounds up to whole minutes).
        script = Path(self._script(backend, handle)).read_text()
        requested = read_script(script).directives.get("--time")
        if requested is None:
            return None
        from altar.backends.slurm.commands import parse_duration

        return parse_duration(requested)

    def _script(self, backend: ExecutionBackend, handle: TaskHandle) -> str:
        assert isinstance(backend, SlurmExecutionBackend)
        return f"{backend.scratch}/{_job(handle)[1]}/job.sbatch"

    def write_task_log(
        self, backend: ExecutionBackend, handle: TaskHandle, lines: list[str]
    ) -> bool:
        # the task prints these to its stdout when it ends (see WAITING)
        self._exec(handle, "sh", "-c", 'printf "%s\\n" "$@" > /tmp/log', "log", *lines)
        return True

    def fail_input_verification(self, backend: ExecutionBackend, handle: TaskHandle) -> None:
        # The input was never staged: the job's own digest check fails before the container.
        _wait_until_done(_job(handle)[0])

    def launched_task(self, backend: ExecutionBackend, handle: TaskHandle) -> LaunchedTask:
        return launched_task(read_script(Path(self._script(backend, handle)).read_text()))

    def provider_task(self, backend: ExecutionBackend, handle: TaskHandle) -> ProviderTask:
        # What slurmctld holds for the job (its allocation: whole cores, memory per node),
        # and the image its batch script runs.
        job_id, _ = _job(handle)
        fields = dict(
            field.split("=", 1)
            for field in _run(["scontrol", "show", "job", "-o", job_id]).split()
            if "=" in field
        )
        # scontrol prints memory in its own unit, 1536M as "1.50G" (two decimals: exact here)
        memory = fields.get("MinMemoryNode", "0")
        unit = {"M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(memory[-1:])
        assert unit or memory == "0", f"unexpected MinMemoryNode={memory!r}"
        script = read_script(Path(self._script(backend, handle)).read_text())
        return ProviderTask(
            image=launched_task(script).image,
            cpu=float(fields["MinCPUsNode"]) if "MinCPUsNode" in fields else None,
            memory_bytes=round(float(memory[:-1]) * unit) if unit else None,
        )

    def reopen(self, backend: ExecutionBackend) -> ExecutionBackend:
        return SlurmExecutionBackend(**self._options)

    def oom_kill_task(self, backend: ExecutionBackend, handle: TaskHandle) -> bool:
        # a process in the container allocates past the limit; then the task itself exits 0
        self._exec(handle, "dd", "if=/dev/zero", "of=/dev/null", "bs=3G", "count=1")
        self._exec(handle, "sh", "-c", "echo 0 > /tmp/exit", wait=False)
        _wait_until_done(_job(handle)[0])
        return True

    def make_provider_unreachable(self, backend: ExecutionBackend) -> bool:
        assert isinstance(backend, SlurmExecutionBackend)
        assert isinstance(backend.node, Breakable)
        backend.node.broken = True
        return True

    def unsupported_specs(self, spec: ContainerTaskSpec) -> list[ContainerTaskSpec]:
        return [
            replace(spec, resources=ResourceRequest(gpu="tpu")),  # no such pool
            replace(spec, resources=ResourceRequest(gpu="gpu")),  # the test node has no GPU
            replace(spec, env={"CR": "a\r\nb"}),
        ]


class TestRealSlurmLocalContract(_RealSlurmContract):
    def make_node(self, request: pytest.FixtureRequest) -> LoginNode:
        return LocalLoginNode()


@pytest.mark.ssh
class TestRealSlurmSshContract(_RealSlurmContract):
    def make_node(self, request: pytest.FixtureRequest) -> LoginNode:
        target: Any = request.getfixturevalue("ssh_target")
        return SshLoginNode(target.host, ssh_config=target.config)
