"""The in-process backend's default runtime: supervised local processes recorded in the data root.

Real processes, real signals: a runner killed with SIGKILL leaves its task running, and the
next runner adopts it by its handle or its submission key; a supervisor killed with SIGKILL
takes its command with it and the task reads as failed.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from altar.conformance import InProcessExecutionBackend
from altar.conformance.processes import RECORDS_DIRECTORY, ProcessFabric
from altar.conformance.reference import InProcessTaskVerifyingBackend
from altar.execution import (
    ContainerTaskSpec,
    TaskHandle,
    TaskState,
    TaskStatus,
    Transfer,
    submission_labels,
    temp_path,
)

RUN = "run-processes"


def _spec(script: str, **changes: object) -> ContainerTaskSpec:
    fields: dict[str, object] = {
        "kind": "proc",
        "image": "busybox:latest",
        "command": ["sh", "-c", script],
    }
    fields.update(changes)
    return ContainerTaskSpec(**fields)  # type: ignore[arg-type]


def _keyed(spec: ContainerTaskSpec, task: str = "t1", attempt: int = 1) -> ContainerTaskSpec:
    return ContainerTaskSpec(
        **{**spec.__dict__, "labels": {**spec.labels, **submission_labels(RUN, task, attempt)}}
    )


async def _settle(backend: InProcessExecutionBackend, handle: TaskHandle) -> TaskStatus:
    """Poll until the task ends (a guard against hangs, not a timing test)."""
    for _ in range(3000):
        (status,) = await backend.poll([handle])
        if status.state.is_terminal:
            return status
        await asyncio.sleep(0.02)
    raise AssertionError(f"task {handle.external_id} never finished")


def _wait_for(condition: object, what: str) -> None:
    for _ in range(3000):
        if callable(condition) and condition():
            return
        time.sleep(0.02)
    raise AssertionError(f"gave up waiting for {what}")


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


@pytest.mark.asyncio
async def test_by_default_a_task_is_its_argv_run_as_a_local_process(tmp_path: Path) -> None:
    backend = InProcessExecutionBackend(data_root=tmp_path)
    spec = _spec(
        'printf "%s|%s" "$ALTAR_X" "$1" > out.txt; echo to-stderr >&2; exit 3',
        env={"ALTAR_X": "  spaced $(id) "},
    )
    spec.command.extend(["sh", "arg with 'quotes'"])  # $0 and $1 of the script
    handle = await backend.submit(spec)
    status = await _settle(backend, handle)
    assert status.failure is not None
    assert status.failure.reason == "exit_3"
    # it ran in the data root, with the env and argv as given
    assert (tmp_path / "out.txt").read_text() == "  spaced $(id) |arg with 'quotes'"
    assert "to-stderr" in (await backend.failure_detail(handle) or "")


@pytest.mark.asyncio
async def test_a_fresh_instance_finds_the_task_through_the_data_root(tmp_path: Path) -> None:
    first = InProcessExecutionBackend(data_root=tmp_path)
    handle = await first.submit(_spec("while [ ! -e go ]; do sleep 0.02; done"))
    fresh = InProcessExecutionBackend(data_root=tmp_path)  # no shared memory at all
    (status,) = await fresh.poll([handle])
    assert status.state in (TaskState.PENDING, TaskState.RUNNING)
    (tmp_path / "go").touch()
    assert (await _settle(fresh, handle)).state is TaskState.SUCCEEDED


@pytest.mark.asyncio
async def test_a_resubmitted_key_adopts_the_task_and_it_runs_once(tmp_path: Path) -> None:
    backend = InProcessExecutionBackend(data_root=tmp_path)
    spec = _keyed(_spec("echo ran >> ledger; while [ ! -e go ]; do sleep 0.02; done"))
    first = await backend.submit(spec)
    again = await InProcessExecutionBackend(data_root=tmp_path).submit(spec)
    assert again.external_id == first.external_id
    (tmp_path / "go").touch()
    assert (await _settle(backend, first)).state is TaskState.SUCCEEDED
    finished = await backend.submit(spec)  # finished: adopted, not run again
    assert finished.external_id == first.external_id
    assert (await _settle(backend, finished)).state is TaskState.SUCCEEDED
    assert (tmp_path / "ledger").read_text() == "ran\n"
    listed = await backend.list_submissions(RUN)
    assert listed is not None
    assert [h.external_id for h in listed] == [first.external_id]
    assert listed[0].labels == spec.labels


@pytest.mark.asyncio
async def test_a_created_task_is_started_by_the_next_submit_of_its_key(tmp_path: Path) -> None:
    backend = InProcessExecutionBackend(data_root=tmp_path)
    spec = _keyed(_spec("echo ran >> ledger"))
    assert isinstance(backend.fabric, ProcessFabric)
    created = backend.fabric.launch(spec, backend._launch_record(spec), None, [], start=False)
    (status,) = await backend.poll([TaskHandle(backend.name, created)])
    assert status.state is TaskState.PENDING
    handle = await backend.submit(spec)
    assert handle.external_id == created
    assert (await _settle(backend, handle)).state is TaskState.SUCCEEDED
    assert (tmp_path / "ledger").read_text() == "ran\n"


@pytest.mark.asyncio
async def test_cancel_kills_the_process_and_reads_as_cancelled(tmp_path: Path) -> None:
    backend = InProcessExecutionBackend(data_root=tmp_path)
    handle = await backend.submit(_spec("echo $$ > pid; exec sleep 60"))
    _wait_for(lambda: (tmp_path / "pid").exists() and (tmp_path / "pid").read_text(), "the pid")
    pid = int((tmp_path / "pid").read_text())
    await backend.cancel(handle)
    await backend.cancel(handle)
    (status,) = await InProcessExecutionBackend(data_root=tmp_path).poll([handle])
    assert status.failure is not None
    assert status.failure.reason == "cancelled"
    _wait_for(lambda: _gone(pid), f"process {pid} to end")


@pytest.mark.asyncio
async def test_the_deadline_is_enforced_by_the_supervisor(tmp_path: Path) -> None:
    backend = InProcessExecutionBackend(data_root=tmp_path)
    handle = await backend.submit(_spec("exec sleep 60", timeout_s=1))
    status = await _settle(backend, handle)
    assert status.failure is not None
    assert status.failure.reason == "timeout"
    assert not status.failure.deterministic


@pytest.mark.asyncio
async def test_a_killed_supervisor_takes_its_command_along_and_is_reported(tmp_path: Path) -> None:
    backend = InProcessExecutionBackend(data_root=tmp_path)
    handle = await backend.submit(_spec("echo $$ > pid; exec sleep 60"))
    _wait_for(lambda: (tmp_path / "pid").exists() and (tmp_path / "pid").read_text(), "the pid")
    command_pid = int((tmp_path / "pid").read_text())
    started = tmp_path / RECORDS_DIRECTORY / "tasks" / handle.external_id / "started.json"
    supervisor = json.loads(started.read_text())["pid"]
    os.kill(supervisor, signal.SIGKILL)
    _wait_for(lambda: _gone(command_pid), "the command to die with its supervisor")
    status = await _settle(backend, handle)
    assert status.failure is not None
    assert status.failure.reason == "job_failed"
    assert "supervisor" in (status.failure.detail or "")
    assert not status.failure.deterministic
    # Issue 22: what ran the task died, the task did not fail.
    assert status.failure.provider_ending == "engine_lost"
    (fresh,) = await InProcessExecutionBackend(data_root=tmp_path).poll([handle])
    assert fresh.failure == status.failure


@pytest.mark.asyncio
async def test_a_task_verifying_backend_never_runs_a_command_with_a_wrong_input(
    tmp_path: Path,
) -> None:
    backend = InProcessTaskVerifyingBackend(data_root=tmp_path)
    source = tmp_path / "source.bin"
    source.write_bytes(b"actual")
    wrong = "sha256:" + "0" * 64
    transfer = Transfer(str(source), "in/w.bin", digest=wrong)
    await backend.stage_inputs([transfer])
    handle = await backend.submit(_spec("echo ran > ran.txt", inputs=[transfer]))
    status = await _settle(backend, handle)
    assert status.failure is not None
    assert status.failure.reason == "input_digest_mismatch"
    assert not (tmp_path / "ran.txt").exists()


RUNNER = textwrap.dedent(
    """
    import asyncio, sys
    from altar.conformance import InProcessExecutionBackend
    from altar.execution import ContainerTaskSpec, submission_labels

    async def main():
        backend = InProcessExecutionBackend(data_root=sys.argv[1])
        script = "echo start >> ledger; while [ ! -e go ]; do sleep 0.02; done; echo done >> ledger"
        spec = ContainerTaskSpec(
            kind="proc", image="busybox:latest", command=["sh", "-c", script],
            labels=submission_labels("run-processes", "t1", 1),
        )
        handle = await backend.submit(spec)
        print(handle.external_id, flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main())
    """
)


def _a_dead_pid() -> int:
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(ended.stdout)


def _start_runner(data_root: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", RUNNER, str(data_root)], stdout=subprocess.PIPE, text=True
    )


@pytest.mark.asyncio
async def test_a_runner_killed_with_sigkill_leaves_a_task_the_next_runner_adopts(
    tmp_path: Path,
) -> None:
    runner = _start_runner(tmp_path)
    assert runner.stdout is not None
    external_id = runner.stdout.readline().strip()
    _wait_for(lambda: (tmp_path / "ledger").exists(), "the task to start")
    runner.send_signal(signal.SIGKILL)
    runner.wait()
    runner.stdout.close()
    # The next runner: finds the task by listing the run and by resubmitting its key.
    backend = InProcessExecutionBackend(data_root=tmp_path)
    listed = await backend.list_submissions(RUN)
    assert listed is not None
    assert [h.external_id for h in listed] == [external_id]
    (status,) = await backend.poll(listed)
    assert status.state is TaskState.RUNNING, "the task outlives the runner that submitted it"
    spec = _keyed(_spec("never run"))
    adopted = await backend.submit(spec)
    assert adopted.external_id == external_id
    (tmp_path / "go").touch()
    assert (await _settle(backend, adopted)).state is TaskState.SUCCEEDED
    assert (tmp_path / "ledger").read_text() == "start\ndone\n", "executed exactly once"


@pytest.mark.asyncio
async def test_a_half_made_task_of_a_killed_submit_is_swept_never_a_live_one(
    tmp_path: Path,
) -> None:
    backend = InProcessExecutionBackend(data_root=tmp_path)
    records = tmp_path / RECORDS_DIRECTORY / "tasks"
    killed = temp_path(records / "in-process-0123", pid=_a_dead_pid())
    killed.mkdir()
    (killed / "task.json").write_text("{")
    live = temp_path(records / "in-process-4567")  # this process: a submit in progress
    live.mkdir()
    assert await backend.list_submissions(RUN) == []
    assert not killed.exists()
    assert live.exists()


@pytest.mark.asyncio
async def test_two_submits_of_one_key_make_one_task(tmp_path: Path) -> None:
    spec = _keyed(_spec("echo ran >> ledger"))
    backends = [InProcessExecutionBackend(data_root=tmp_path) for _ in range(4)]
    handles = await asyncio.gather(*(b.submit(spec) for b in backends))
    assert len({h.external_id for h in handles}) == 1
    assert (await _settle(backends[0], handles[0])).state is TaskState.SUCCEEDED
    assert (tmp_path / "ledger").read_text() == "ran\n"
