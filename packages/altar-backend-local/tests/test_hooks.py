"""The optional CLI hooks on the fake engine: provider times, task_logs, check_spec,
image_present (issue 15)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from altar.backends.local import LocalDockerExecutionBackend
from altar.backends.local.fake import FakeDockerRuntime
from altar.execution import (
    ContainerTaskSpec,
    ResourceRequest,
    TaskLogs,
    TaskState,
    UnsupportedCapabilityError,
)


def spec(**overrides: object) -> ContainerTaskSpec:
    values: dict[str, object] = {"kind": "k", "image": "busybox", "command": ["true"]}
    values.update(overrides)
    return ContainerTaskSpec(**values)  # type: ignore[arg-type]


@pytest.mark.asyncio
@pytest.mark.parametrize("use_events", [True, False], ids=["followed", "inspect"])
async def test_a_finished_task_reports_the_engines_start_and_finish(
    tmp_path: Path, engine: FakeDockerRuntime, use_events: bool
) -> None:
    backend = LocalDockerExecutionBackend(
        data_root=tmp_path / "data", runtime=engine, watchdog=False, use_events=use_events
    )
    handle = await backend.submit(spec())
    (running,) = await backend.poll([handle])
    container = engine.containers[handle.external_id]
    assert running.state is TaskState.RUNNING
    if use_events:  # followed: known without a request
        assert running.started_at == container.started_at
    engine.finish(handle.external_id, 0)
    (done,) = await backend.poll([handle])
    assert done.state is TaskState.SUCCEEDED
    assert (done.started_at, done.finished_at) == (container.started_at, container.finished_at)
    assert done.started_at is not None
    assert done.finished_at is not None
    backend.close()


@pytest.mark.asyncio
async def test_a_fresh_instance_learns_the_times_of_a_task_that_ended_before_it(
    tmp_path: Path, engine: FakeDockerRuntime
) -> None:
    first = LocalDockerExecutionBackend(data_root=tmp_path / "data", runtime=engine, watchdog=False)
    handle = await first.submit(spec())
    engine.finish(handle.external_id, 3)
    first.close()
    container = engine.containers[handle.external_id]
    resumed = LocalDockerExecutionBackend(
        data_root=tmp_path / "data", runtime=engine, watchdog=False
    )
    (status,) = await resumed.poll([handle])
    assert status.state is TaskState.FAILED
    assert (status.started_at, status.finished_at) == (container.started_at, container.finished_at)
    resumed.close()


@pytest.mark.asyncio
async def test_task_logs_are_apart_and_kept_after_cleanup(
    backend: LocalDockerExecutionBackend, engine: FakeDockerRuntime
) -> None:
    handle = await backend.submit(spec())
    engine.write_log(handle.external_id, [f"out {i}" for i in range(60)])
    engine.write_log(handle.external_id, ["the error"], stream="stderr")
    engine.write_log(handle.external_id, ["out 60"])
    expected = TaskLogs("".join(f"out {i}\n" for i in range(61)), "the error\n")
    assert await backend.task_logs(handle) == expected  # while it runs
    engine.finish(handle.external_id, 1)
    await backend.poll([handle])
    await backend.cleanup([handle])
    assert handle.external_id not in engine.containers
    assert await backend.task_logs(handle) == expected  # from what cleanup saved
    saved = Path(backend.data_root, ".altar-logs", handle.external_id, "stderr")
    assert saved.stat().st_mode & 0o777 == 0o600  # noqa: ASYNC240
    backend.close()


@pytest.mark.asyncio
async def test_a_save_killed_midway_leaves_nothing_once_the_next_cleanup_names_its_process(
    backend: LocalDockerExecutionBackend, engine: FakeDockerRuntime
) -> None:
    """Seen in the routed crash test: a runner killed while saving a container's logs left
    ``.stderr.altar-tmp-<pid>-...``; the next run's cleanup saves them again and removes it."""
    from altar.execution.atomic import sweeping_for, temp_path

    handle = await backend.submit(spec())
    engine.write_log(handle.external_id, ["the error"], stream="stderr")
    engine.finish(handle.external_id, 1)
    await backend.poll([handle])
    directory = Path(backend.data_root, ".altar-logs", handle.external_id)
    directory.mkdir(parents=True)  # noqa: ASYNC240
    dead = temp_path(directory / "stderr", pid=999991)  # the killed runner's
    stranger = temp_path(directory / "stdout", pid=7)
    for path in (dead, stranger):
        path.write_bytes(b"half")
    with sweeping_for([999991]):
        await backend.cleanup([handle])
    assert not dead.exists()
    assert stranger.exists()  # another process's: never touched
    assert (directory / "stderr").read_text() == "the error\n"
    backend.close()


@pytest.mark.asyncio
async def test_without_keep_logs_a_removed_task_has_none(
    tmp_path: Path, engine: FakeDockerRuntime
) -> None:
    backend = LocalDockerExecutionBackend(
        data_root=tmp_path / "data", runtime=engine, watchdog=False, keep_logs=False
    )
    handle = await backend.submit(spec())
    engine.write_log(handle.external_id, ["x"])
    engine.finish(handle.external_id, 0)
    await backend.poll([handle])
    await backend.cleanup([handle])
    assert await backend.task_logs(handle) is None
    assert not os.path.exists(os.path.join(backend.data_root, ".altar-logs"))  # noqa: ASYNC240
    backend.close()


@pytest.mark.asyncio
async def test_task_logs_of_a_handle_that_is_no_container_id_is_none(
    backend: LocalDockerExecutionBackend,
) -> None:
    handle = await backend.submit(spec())
    hostile = type(handle)(backend.name, "../../etc", {})
    assert await backend.task_logs(hostile) is None


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("resources", "capability"),
    [
        (ResourceRequest(cpu=3), "cpu"),  # the engine has 2
        (ResourceRequest(cpu=0.001), "cpu"),
        (ResourceRequest(memory_gb=0.001), "memory"),
        (ResourceRequest(gpu="a100", count=2), "gpu"),  # the host has 1
    ],
    ids=["cpu-above-engine", "cpu-below-min", "memory-below-6mb", "gpu-above-host"],
)
async def test_check_spec_refuses_what_submit_refuses_and_creates_nothing(
    tmp_path: Path, resources: ResourceRequest, capability: str
) -> None:
    engine = FakeDockerRuntime(cpus=2, gpu_devices=1)
    backend = LocalDockerExecutionBackend(
        data_root=tmp_path / "data", runtime=engine, watchdog=False, gpu_devices=1
    )
    with pytest.raises(UnsupportedCapabilityError) as refused:
        await backend.check_spec(spec(resources=resources))
    assert refused.value.capability == capability
    assert engine.containers == {}
    assert engine.requests["create"] == 0
    assert not os.path.exists(backend.data_root)  # noqa: ASYNC240 - nothing prepared
    with pytest.raises(UnsupportedCapabilityError):  # and submit does refuse it
        await backend.submit(spec(resources=resources))


@pytest.mark.asyncio
async def test_check_spec_accepts_what_submit_accepts(
    backend: LocalDockerExecutionBackend, engine: FakeDockerRuntime
) -> None:
    await backend.check_spec(spec(resources=ResourceRequest(cpu=2, memory_gb=0.5)))
    with pytest.raises(ValueError, match="reserved"):
        await backend.check_spec(spec(labels={"altar.timeout_s": "1"}))
    assert engine.containers == {}


@pytest.mark.asyncio
async def test_image_present_is_one_inspect_and_none_for_an_image_to_pull(
    tmp_path: Path,
) -> None:
    engine = FakeDockerRuntime(images=["busybox"])
    backend = LocalDockerExecutionBackend(
        data_root=tmp_path / "data", runtime=engine, watchdog=False
    )
    assert await backend.image_present("busybox") is True
    assert await backend.image_present("busybox:nope") is None
    assert engine.requests["image_inspect"] == 2
