"""Issue 22: the Docker engine dying or restarting under containers is the provider's ending.

Against the in-memory engine, whose restart is modelled on what Docker 20.10 without
live-restore was seen to do (``FakeDockerRuntime.restart_engine``); the real engine's restart
is tested in ``tests/crash/test_engine_endings.py`` with an engine of its own.
"""

from __future__ import annotations

import pytest
from altar.backends.local import LocalDockerExecutionBackend
from altar.backends.local.classify import (
    Outcome,
    ended_by_engine_restart,
    engine_lost_failure,
    start_unknown_failure,
)
from altar.backends.local.fake import FakeDockerRuntime
from altar.execution import ContainerTaskSpec, TaskHandle, TaskState, TaskStatus

SPEC = ContainerTaskSpec(kind="score", image="busybox:latest", command=["true"])


def _backend(tmp_path: object, engine: FakeDockerRuntime) -> LocalDockerExecutionBackend:
    return LocalDockerExecutionBackend(data_root=str(tmp_path), runtime=engine, watchdog=False)


async def _poll(backend: LocalDockerExecutionBackend, handle: TaskHandle) -> TaskStatus:
    (status,) = await backend.poll([handle])
    return status


@pytest.mark.parametrize(
    ("outcome", "ended"),
    [
        (Outcome(137, False, finished_at=20.0, started_at=5.0), True),  # killed at the start
        (Outcome(143, False, finished_at=10.0, started_at=5.0), True),  # its stop signal
        (Outcome(255, False, finished_at=12.0, started_at=5.0), True),
        (Outcome(137, False, finished_at=9.0, started_at=5.0), False),  # ended while it was down
        (Outcome(137, False, finished_at=20.0, started_at=11.0), False),  # started after it
        (Outcome(0, False, finished_at=20.0, started_at=5.0), False),  # finished its work
        (Outcome(137, True, finished_at=20.0, started_at=5.0), False),  # an OOM kill
        (Outcome(137, False, finished_at=20.0, started_at=None), False),  # start unknown
    ],
)
def test_only_a_container_that_ran_across_the_engines_start_was_ended_by_it(
    outcome: Outcome, ended: bool
) -> None:
    assert ended_by_engine_restart(outcome, 10.0) is ended
    assert ended_by_engine_restart(outcome, None) is False


def test_an_engine_ending_is_a_provider_ending_never_an_exit_reason() -> None:
    failure = engine_lost_failure("c1", Outcome(137, False, 20.0, 5.0), 10.0)
    assert failure.provider_ending == "engine_lost"
    assert failure.reason == "job_failed"
    assert not failure.deterministic
    assert failure.exit_code is None  # 137 is the engine's kill, not the task's answer
    assert failure.detail is not None
    assert "restarted" in failure.detail
    assert "exit code 137, SIGKILL" in failure.detail
    unknown = start_unknown_failure("c2")
    assert unknown.provider_ending == "engine_lost"
    assert unknown.reason == "job_failed"


@pytest.mark.asyncio
async def test_a_container_running_when_the_engine_restarts_reads_as_engine_lost(
    tmp_path: object,
) -> None:
    engine = FakeDockerRuntime()
    backend = _backend(tmp_path, engine)
    running = await backend.submit(SPEC)
    ended_before = await backend.submit(SPEC)
    succeeded_before = await backend.submit(SPEC)
    # Killed from outside before the restart: the task's ending. (143, not 137: a fresh 137
    # waits a second for a late "oom" event.)
    engine.finish(ended_before.external_id, 143)
    engine.finish(succeeded_before.external_id, 0)
    engine.restart_engine()
    for poller in (backend, _backend(tmp_path, engine)):  # the same and a resumed process
        status = await _poll(poller, running)
        assert status.state is TaskState.FAILED
        assert status.failure is not None
        assert status.failure.provider_ending == "engine_lost", status.failure
        assert status.failure.reason == "job_failed"
        assert not status.failure.deterministic
        before = await _poll(poller, ended_before)
        assert before.failure is not None
        assert before.failure.reason == "exit_143"
        assert before.failure.provider_ending is None
        assert (await _poll(poller, succeeded_before)).state is TaskState.SUCCEEDED


@pytest.mark.asyncio
async def test_with_live_restore_a_restart_ends_nothing_and_a_later_137_is_the_tasks(
    tmp_path: object,
) -> None:
    engine = FakeDockerRuntime()
    engine.live_restore = True
    backend = _backend(tmp_path, engine)
    handle = await backend.submit(SPEC)
    engine.restart_engine()
    assert (await _poll(backend, handle)).state is TaskState.RUNNING
    engine.finish(handle.external_id, 143)
    engine.restarted_at = None  # the start is not even known: still the task's exit
    status = await _poll(_backend(tmp_path, engine), handle)
    assert status.failure is not None
    assert status.failure.reason == "exit_143"
    assert status.failure.provider_ending is None


@pytest.mark.asyncio
async def test_a_container_gone_after_the_engine_restarted_was_lost_with_it(
    tmp_path: object,
) -> None:
    engine = FakeDockerRuntime()
    backend = _backend(tmp_path, engine)
    handle = await backend.submit(SPEC)
    engine.restart_engine(lose=[handle.external_id])
    status = await _poll(backend, handle)
    assert status.failure is not None
    assert status.failure.reason == "container_missing"  # what 0.3.0 consumers saw
    assert status.failure.provider_ending == "engine_lost"
    # Removed with no restart since it was seen: missing, as before.
    other = await backend.submit(SPEC)
    engine.remove(other.external_id)
    status = await _poll(backend, other)
    assert status.failure is not None
    assert status.failure.reason == "container_missing"
    assert status.failure.provider_ending is None


@pytest.mark.asyncio
async def test_a_runtime_without_engine_restarted_at_still_polls(tmp_path: object) -> None:
    """A seam implementation written before issue 22 keeps working: no restart is read."""

    class OldRuntime(FakeDockerRuntime):
        engine_restarted_at = None  # type: ignore[assignment]

    engine = OldRuntime()
    backend = _backend(tmp_path, engine)
    handle = await backend.submit(SPEC)
    engine.finish(handle.external_id, 143)  # a non-zero exit asks for the engine's start
    status = await _poll(backend, handle)
    assert status.failure is not None
    assert status.failure.reason == "exit_143"


@pytest.mark.asyncio
async def test_a_container_left_running_but_never_started_by_the_restart_is_engine_lost(
    tmp_path: object,
) -> None:
    """Seen on Docker 20.10 (engine-kill crash test): dockerd killed while starting a container
    lists it ``running`` after its restart, ``StartedAt`` unset, its pid long gone, forever."""
    engine = FakeDockerRuntime()
    first = _backend(tmp_path, engine)
    stuck = await first.submit(SPEC)
    healthy = await first.submit(SPEC)
    engine.restart_engine(stuck=[stuck.external_id])
    engine.release_start()  # nothing held; a container started after the restart is fine
    started_after = await first.submit(SPEC)
    fresh = _backend(tmp_path, engine)  # no event of its start was ever seen
    status = await _poll(fresh, stuck)
    assert status.state is TaskState.FAILED
    assert status.failure is not None
    assert status.failure.provider_ending == "engine_lost"
    assert "never started" in (status.failure.detail or "")
    assert (await _poll(fresh, started_after)).state is TaskState.RUNNING
    assert (await _poll(fresh, healthy)).failure is not None  # stopped by the restart
    engine.requests.clear()
    await fresh.poll([started_after])  # its start is known now: no inspect again
    assert engine.requests["inspect"] == 0


def test_the_socket_of_a_refused_unix_connect_is_closed_at_once(tmp_path: object) -> None:
    """The docker SDK drops the socket of a unix connect that fails (a dead engine's socket):
    the runtime closes it when it turns the error into BackendUnavailableError."""
    import socket
    from pathlib import Path

    from altar.backends.local.leaks import close_unconnected

    opened: list[socket.socket] = []
    path = str(Path(str(tmp_path)) / "dead.sock")

    def connect() -> None:  # as docker/transport/unixconn.py's: the socket is never kept
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        opened.append(sock)
        sock.connect(path)

    try:
        try:
            connect()
        except OSError as refused:
            raise ConnectionError("Connection aborted") from refused
    except ConnectionError as error:
        close_unconnected(error)
    assert opened
    assert opened[0].fileno() == -1
