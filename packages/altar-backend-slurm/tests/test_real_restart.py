"""A real slurmctld restarted while the backend polls a running job (issue 14).

The controller is stopped with SIGTERM and started again with the same argv and environment, so
it recovers its saved state as after an operator's restart. While it is down a poll must raise
``BackendUnavailableError`` (never report the job failed or missing); once it is back the job is
followed to its end, and it ran exactly once.

Stopping the shared controller would break other tests' Slurm calls, so this test is marked
``serial``: ``scripts/test`` runs it alone, after the parallel run (see the root conftest.py).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from altar.backends.slurm import SlurmExecutionBackend
from altar.execution import BackendUnavailableError, ContainerTaskSpec, TaskState

pytestmark = [pytest.mark.slurm, pytest.mark.docker, pytest.mark.serial]

WAIT_S = 240


def _controller_pid() -> int:
    config = subprocess.run(
        ["scontrol", "show", "config"], check=True, capture_output=True, text=True
    ).stdout
    for line in config.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "SlurmctldPidFile":
            return int(Path(value.strip()).read_text().strip())
    raise AssertionError("scontrol show config names no SlurmctldPidFile")


def _controller_up() -> bool:
    ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=30)
    return "is UP" in ping.stdout


def _wait(what: str, condition: object, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


def _stop_controller() -> tuple[list[bytes], dict[bytes, bytes]]:
    """SIGTERM slurmctld and wait for it to exit; its argv and environment, to start it again."""
    pid = _controller_pid()
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    environ = dict(
        tuple(entry.split(b"=", 1))  # type: ignore[misc]
        for entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        if b"=" in entry
    )
    os.kill(pid, signal.SIGTERM)
    _wait("slurmctld to stop", lambda: not Path(f"/proc/{pid}").exists())
    return argv, environ


def _start_controller(argv: list[bytes], environ: dict[bytes, bytes]) -> None:
    """Start slurmctld as it ran before (it daemonizes) and wait until it answers."""
    if not _controller_up():
        subprocess.run(argv, env=environ, check=True, timeout=60)
    _wait("slurmctld to answer again", _controller_up)


@pytest.mark.asyncio
async def test_a_restarted_slurmctld_is_an_outage_then_the_job_is_followed_to_its_end(
    tmp_path: Path, docker_host: str, slurm_cluster: dict[str, str]
) -> None:
    backend = SlurmExecutionBackend(
        data_root=str(tmp_path / "data"),
        partition=slurm_cluster["partition"],
        container_runtime="docker",
        runtime_options=["-H", docker_host],
        query_timeout_s=5,
        # every poll asks the queue about the running job (its records do not settle it), so
        # the poll made while the controller is down meets the outage
        queue_interval_s=0,
    )
    image = os.environ.get("ALTAR_TEST_IMAGE", "busybox:latest")
    spec = ContainerTaskSpec(
        kind="restart",
        image=image,
        command=["sh", "-c", "echo ran >> /mnt/volume/ledger; sleep 25"],
        labels={"t": "restart"},
    )
    handle = await backend.submit(spec)
    deadline = time.monotonic() + WAIT_S
    while (await backend.poll([handle]))[0].state is not TaskState.RUNNING:
        assert time.monotonic() < deadline, "the job never started"
        await asyncio.sleep(0.5)

    argv, environ = _stop_controller()
    try:
        with pytest.raises(BackendUnavailableError):
            await backend.poll([handle])
    finally:
        _start_controller(argv, environ)

    (status,) = await backend.await_completion(
        [handle], interval_s=0.5, max_interval_s=2, timeout_s=WAIT_S
    )
    assert status.state is TaskState.SUCCEEDED, status
    assert (tmp_path / "data" / "ledger").read_text() == "ran\n"  # exactly once
    await backend.cleanup([handle])
