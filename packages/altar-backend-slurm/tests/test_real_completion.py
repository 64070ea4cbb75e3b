"""Completion from the jobs' records on the real Slurm (and over the real sshd): ends noticed
without squeue, squeue paced by ``queue_interval_s`` over a whole run, late records awaited.

Controller queries are counted through the runtime seam (the login node the backend runs its
commands on). Nothing here asserts a duration: the shared 2-CPU node may queue jobs.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from altar.backends.slurm import CommandResult, LocalLoginNode, SlurmExecutionBackend
from altar.backends.slurm.render import EXIT_RECORD
from altar.backends.slurm.sdk_runtime import SshLoginNode
from altar.execution import ContainerTaskSpec, TaskHandle, TaskState, TaskStatus
from altar.execution.plans.plan import plan_from_specs
from altar.execution.run.runner import run_plan

pytestmark = [pytest.mark.slurm, pytest.mark.docker]

WAIT_S = 240  # a job may wait behind other helpers' jobs on the 2-CPU test node


def _program(argv: Sequence[str]) -> str:
    if argv[0] == "timeout":
        return argv[3]
    return "records" if argv[3:4] == ["altar-records"] else argv[0]


class Counting(LocalLoginNode):
    """This machine's login node, recording each command's program and when it ran; while
    ``hidden`` it leaves those jobs' exit records out of what the records read shows, as a
    network filesystem's stale cache would."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[float, str, list[str]]] = []
        self.hidden: set[str] = set()  # job tokens

    def run(self, argv: Sequence[str]) -> CommandResult:
        self.calls.append((time.monotonic(), _program(argv), list(argv)))
        result = super().run(argv)
        if _program(argv) == "records" and self.hidden:
            lines = [
                line
                for line in result.stdout.splitlines(keepends=True)
                if not any(line.startswith(f"{t}/{EXIT_RECORD}:") for t in self.hidden)
            ]
            result = CommandResult(result.returncode, "".join(lines), result.stderr)
        return result

    def count(self, program: str, since: int = 0) -> int:
        return sum(1 for _, p, _ in self.calls[since:] if p == program)

    def polls_of_squeue(self) -> list[float]:
        """When squeue was asked about jobs by id (a poll), not by name (a submit's lookup)."""
        return [
            at
            for at, program, argv in self.calls
            if program == "squeue" and any(a.startswith("--jobs=") for a in argv)
        ]


def _backend(
    root: Path, docker_host: str, slurm_cluster: dict[str, str], node: Any, **options: Any
) -> SlurmExecutionBackend:
    return SlurmExecutionBackend(
        data_root=str(root),
        partition=slurm_cluster["partition"],
        container_runtime="docker",
        runtime_options=["-H", docker_host],
        runtime=node,
        **options,
    )


def _spec(command: list[str], **labels: str) -> ContainerTaskSpec:
    image = os.environ.get("ALTAR_TEST_IMAGE", "busybox:latest")
    return ContainerTaskSpec(kind="records", image=image, command=command, labels=labels)


def _token(handle: TaskHandle) -> str:
    return handle.external_id.split(":", 1)[1]


def _job(handle: TaskHandle) -> str:
    return handle.external_id.split(":", 1)[0]


async def _until_slurm_says_ended(handle: TaskHandle) -> str:
    """Wait (asking Slurm from the test, not through the backend) until the job ended."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        out = await asyncio.to_thread(
            subprocess.run,
            ["sacct", "-n", "-X", "-P", "-j", _job(handle), "-o", "State"],
            capture_output=True,
            text=True,
            check=False,
        )
        state = out.stdout.strip().split(" ", 1)[0]
        if state and state not in ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING"):
            return state
        await asyncio.sleep(0.5)
    raise TimeoutError(f"job {_job(handle)} did not end within {WAIT_S} s")


async def _finish(backend: SlurmExecutionBackend, handle: TaskHandle) -> TaskStatus:
    (status,) = await backend.await_completion(
        [handle], interval_s=0.5, max_interval_s=2, timeout_s=WAIT_S
    )
    return status


@pytest.mark.asyncio
async def test_an_end_is_noticed_from_its_record_without_squeue(
    tmp_path: Path, docker_host: str, slurm_cluster: dict[str, str]
) -> None:
    node = Counting()
    backend = _backend(tmp_path / "data", docker_host, slurm_cluster, node)  # default pace
    handles = [
        await backend.submit(_spec(["sh", "-c", f"sleep 1; exit {code}"], n=str(code)))
        for code in (0, 200)
    ]
    submitted = len(node.calls)
    first, second = await asyncio.gather(*(_finish(backend, h) for h in handles))
    assert first.state is TaskState.SUCCEEDED
    assert second.failure is not None
    assert (second.failure.reason, second.failure.exit_code) == ("exit_200", 200)
    # every poll was one read of the records: no squeue, no sacct
    assert node.count("records", submitted) >= 2
    assert node.count("squeue", submitted) == 0
    assert node.count("sacct", submitted) == 0


@pytest.mark.asyncio
async def test_a_run_asks_squeue_at_most_once_per_queue_interval(
    tmp_path: Path, docker_host: str, slurm_cluster: dict[str, str]
) -> None:
    node = Counting()
    interval = 4.0
    backend = _backend(
        tmp_path / "data", docker_host, slurm_cluster, node, queue_interval_s=interval
    )
    specs = [_spec(["sleep", "10"], n=str(i)) for i in range(3)]
    started = time.monotonic()
    result = await asyncio.wait_for(
        run_plan(plan_from_specs(specs), backend, run_dir=tmp_path / "run"), timeout=WAIT_S * 2
    )
    elapsed = time.monotonic() - started
    assert result.ok, result
    queries = node.polls_of_squeue()
    gaps = [b - a for a, b in itertools.pairwise(queries)]
    # (the seam stamps a call a few ms after the backend's clock decided it was due)
    assert all(gap >= interval - 0.05 for gap in gaps), gaps
    assert len(queries) <= elapsed / interval + 1
    # ... while the runner polled the records more often: its backoff is capped at the
    # backend's max_poll_interval_s (2 s), so at least interval / cap times per queue query
    per_query = interval / backend.max_poll_interval_s
    assert node.count("records") >= per_query * (len(queries) - 1), (node.count("records"), queries)


@pytest.mark.asyncio
async def test_a_record_late_for_30_s_is_awaited_then_read_exactly(
    tmp_path: Path, docker_host: str, slurm_cluster: dict[str, str]
) -> None:
    node = Counting()
    # default exit_read_timeout_s (45 s); squeue asked every 5 s while the record is hidden
    backend = _backend(tmp_path / "data", docker_host, slurm_cluster, node, queue_interval_s=5)
    handle = await backend.submit(_spec(["sh", "-c", "exit 200"]))
    node.hidden.add(_token(handle))  # written by the job, invisible to the poll for now
    assert await _until_slurm_says_ended(handle) == "FAILED"
    hidden_until = time.monotonic() + 30
    seen = set()
    while time.monotonic() < hidden_until:
        (status,) = await backend.poll([handle])
        seen.add((status.state, status.failure))
        await asyncio.sleep(1)
    # never exit_72 (sacct's view of 200) and never container_missing while it was hidden
    assert seen == {(TaskState.RUNNING, None)}
    # the queue was asked once and said it ended; then only the record was awaited
    assert len(node.polls_of_squeue()) == 1
    assert await asyncio.to_thread(Path(backend._layout(_token(handle)).exit_record).is_file)
    node.hidden.clear()
    (status,) = await backend.poll([handle])
    assert status.failure is not None
    assert (status.failure.reason, status.failure.exit_code) == ("exit_200", 200)


@pytest.mark.asyncio
async def test_a_record_that_never_shows_falls_back_to_sacct_after_the_timeout(
    tmp_path: Path, docker_host: str, slurm_cluster: dict[str, str]
) -> None:
    node = Counting()
    now = [0.0]  # the backend's clock, moved by the test
    backend = _backend(
        tmp_path / "data",
        docker_host,
        slurm_cluster,
        node,
        queue_interval_s=10,
        exit_read_timeout_s=30,
        clock=lambda: now[0],
    )
    handle = await backend.submit(_spec(["sh", "-c", "exit 3"]))
    node.hidden.add(_token(handle))
    assert await _until_slurm_says_ended(handle) == "FAILED"
    now[0] += 20  # a run's first queue query is due after two intervals: it says FAILED,
    # and the record is awaited
    assert (await backend.poll([handle]))[0].state is TaskState.RUNNING
    assert len(node.polls_of_squeue()) == 1
    before = len(node.calls)
    now[0] += 29
    assert (await backend.poll([handle]))[0].state is TaskState.RUNNING
    assert node.count("sacct", before) == 0
    now[0] += 1  # exit_read_timeout_s has passed: accounting decides
    (status,) = await backend.poll([handle])
    assert status.failure is not None
    assert (status.failure.reason, status.failure.exit_code) == ("exit_3", 3)
    assert node.count("sacct", before) == 1


class CountingSsh(SshLoginNode):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.programs: list[str] = []

    def run(self, argv: Sequence[str]) -> CommandResult:
        self.programs.append(_program(argv))
        return super().run(argv)


@pytest.mark.ssh
@pytest.mark.asyncio
async def test_over_ssh_one_remote_command_reads_every_record(
    ssh_target: Any, docker_host: str, slurm_cluster: dict[str, str], tmp_path: Path
) -> None:
    node = CountingSsh(ssh_target.host, ssh_config=ssh_target.config)
    backend = _backend(tmp_path / "remote root $x", docker_host, slurm_cluster, node)
    handles = [await backend.submit(_spec(["sh", "-c", f"exit {i}"], n=str(i))) for i in range(3)]
    node.programs.clear()
    statuses = await backend.await_completion(
        handles, interval_s=0.5, max_interval_s=2, timeout_s=WAIT_S
    )
    assert [s.failure.exit_code if s.failure else 0 for s in statuses] == [0, 1, 2]
    # one remote command per poll for all three jobs, and nothing else
    assert set(node.programs) == {"records"}
    polls = len(node.programs)
    await backend.poll(handles)
    assert len(node.programs) == polls  # settled: not read again
