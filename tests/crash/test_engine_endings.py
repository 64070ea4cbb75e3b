"""Issue 22 on a real engine: dockerd killed under running containers is the provider's ending.

The engine is one of the test's own (:class:`~crashkit.engine.PrivateEngine`), SIGKILLed and
started again, as the engine-kill crash scenario does; the shared engine is never touched.
Both tests fail on the backend before issue 22 (it read the engine's kill as ``exit_137``).
What the restarted engine shows is what ``docs/backends/local.md`` tabulates: a container that
was running is stopped by the new engine (SIGTERM, then SIGKILL after the stop timeout: exit
137), one that ended before keeps its own outcome.
"""

from __future__ import annotations

import asyncio
import gc
import time
from pathlib import Path

import pytest
from altar.backends.local import LocalDockerExecutionBackend
from altar.backends.local.restarts import process_started_at
from altar.backends.local.sdk_runtime import DockerSdkRuntime
from altar.execution import (
    BackendUnavailableError,
    ContainerTaskSpec,
    TaskHandle,
    TaskState,
    TaskStatus,
)
from altar.execution.plans.plan import plan_from_specs
from altar.execution.run.runner import run_plan
from crashkit.engine import PrivateEngine

pytestmark = [
    pytest.mark.slow,
    pytest.mark.docker,
    pytest.mark.integration,
    pytest.mark.xdist_group("crash"),
    pytest.mark.usefixtures("crash_lock"),
]

IMAGE = "busybox:latest"  # scripts/services loads it into every engine it starts
BOUND_S = 120.0  # a guard against hangs (the stop timeout is 10 s), not a timing test


def _spec(script: str) -> ContainerTaskSpec:
    return ContainerTaskSpec(
        kind="endings", image=IMAGE, command=["sh", "-c", script], labels={"test": "endings"}
    )


async def _final(backend: LocalDockerExecutionBackend, handle: TaskHandle) -> TaskStatus:
    give_up = time.monotonic() + BOUND_S
    while True:
        try:
            (status,) = await backend.poll([handle])
        except BackendUnavailableError:  # the engine is still starting
            status = None
        if status is not None and status.state.is_terminal:
            return status
        assert time.monotonic() < give_up, f"{handle.external_id} never ended: {status}"
        await asyncio.sleep(0.2)


def _backend(engine: PrivateEngine, data: Path) -> LocalDockerExecutionBackend:
    return LocalDockerExecutionBackend(
        data_root=data, docker_host=engine.docker_host, watchdog=False, container_user=""
    )


def test_dockerd_killed_under_running_containers_reads_as_engine_lost(
    private_engine: PrivateEngine, tmp_path: Path
) -> None:
    asyncio.run(_killed_under_running_containers(private_engine, tmp_path))
    gc.collect()  # the loop is closed: what the SDK leaked is collected under this filter


async def _killed_under_running_containers(engine: PrivateEngine, tmp_path: Path) -> None:
    backend = _backend(engine, tmp_path / "data")
    runtime = backend.runtime
    assert isinstance(runtime, DockerSdkRuntime)
    pid = engine.pid()
    assert pid is not None
    first_start = runtime.engine_restarted_at()
    assert first_start is not None, "a local dockerd without live-restore: its start is known"
    assert first_start == pytest.approx(process_started_at(pid), abs=0.05)

    running = await backend.submit(_spec("sleep 120"))
    own_137 = await backend.submit(_spec("exit 137"))  # the task's own answer
    succeeded = await backend.submit(_spec("true"))
    assert (await _final(backend, own_137)).failure is not None
    assert (await _final(backend, succeeded)).state is TaskState.SUCCEEDED

    engine.kill()
    with pytest.raises(BackendUnavailableError):  # withdrawn by the runner, never charged
        await backend.submit(_spec("true"))
    engine.up()
    restarted = runtime.engine_restarted_at()
    assert restarted is not None
    assert restarted > first_start

    fresh = _backend(engine, tmp_path / "data")  # a resumed process: no memory of the outage
    for reader in (backend, fresh):
        lost = await _final(reader, running)
        assert lost.state is TaskState.FAILED
        assert lost.failure is not None
        assert lost.failure.provider_ending == "engine_lost", lost.failure
        assert lost.failure.reason == "job_failed"
        assert not lost.failure.deterministic
        assert "exit code 137" in (lost.failure.detail or "")
        own = await _final(reader, own_137)
        assert own.failure is not None
        assert own.failure.reason == "exit_137"  # it ended before the engine died
        assert own.failure.provider_ending is None
        assert (await _final(reader, succeeded)).state is TaskState.SUCCEEDED
    await backend.cleanup([running, own_137, succeeded])
    backend.close()
    fresh.close()  # before the engine goes: its event stream would retry against nothing


def test_a_task_the_engine_killed_is_rerun_without_a_retry(
    private_engine: PrivateEngine, tmp_path: Path
) -> None:
    """With ``max_retries = 0``, the run the engine died under still succeeds: the engine's
    kill draws on the provider budget, and ATTEMPTS names it."""
    asyncio.run(_rerun_without_a_retry(private_engine, tmp_path))
    gc.collect()


async def _rerun_without_a_retry(engine: PrivateEngine, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    # The first attempt marks the data root and waits; the rerun finds the mark and finishes.
    script = (
        "if [ -e /mnt/volume/started ]; then echo ok > /mnt/volume/out; "
        "else touch /mnt/volume/started; sleep 120; fi"
    )
    backend = _backend(engine, data)
    plan = plan_from_specs([_spec(script)], backend_type="local", max_retries=0)
    run = asyncio.ensure_future(run_plan(plan, backend, run_dir=tmp_path / "run"))
    try:
        give_up = time.monotonic() + BOUND_S
        while not (data / "started").exists():
            assert time.monotonic() < give_up, "the first attempt never started"
            assert not run.done(), run
            await asyncio.sleep(0.05)
        await asyncio.to_thread(engine.kill)
        await asyncio.sleep(0.5)  # the runner finds the engine unavailable and waits
        await asyncio.to_thread(engine.up)
        result = await asyncio.wait_for(run, BOUND_S)
    finally:
        if not run.done():
            run.cancel()
        backend.close()
    (task,) = result.tasks
    assert task.status == "succeeded", task
    assert (data / "out").read_text() == "ok\n"
    assert task.attempts == 2
    assert dict(task.provider_endings) == {"engine_lost": 1}
    assert "engine lost" in task.attempts_text
