"""The backend against the in-memory engine: mapping, states, request counts, lifecycle."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from altar.backends.local import LocalDockerExecutionBackend
from altar.backends.local.fake import FakeDockerRuntime
from altar.execution import (
    BackendUnavailableError,
    ContainerTaskSpec,
    ResourceRequest,
    TaskHandle,
    TaskState,
    Transfer,
    UnsupportedCapabilityError,
)
from altar.execution.plans.plan import plan_from_specs
from altar.execution.run.runner import run_plan


def spec(**overrides: object) -> ContainerTaskSpec:
    values: dict[str, object] = {
        "kind": "score",
        "image": "busybox:latest",
        "command": ["sh", "-c", "echo hi"],
        "labels": {"job_id": "J"},
    }
    values.update(overrides)
    return ContainerTaskSpec(**values)  # type: ignore[arg-type]


@pytest.mark.asyncio
async def test_submit_maps_the_spec_and_returns_a_durable_handle(
    backend: LocalDockerExecutionBackend, engine: FakeDockerRuntime
) -> None:
    handle = await backend.submit(
        spec(env={"A": "1"}, resources=ResourceRequest(memory_gb=0.5, cpu=1.5), timeout_s=30)
    )
    assert handle.backend == "local"
    assert handle.labels == {"job_id": "J"}
    request = engine.containers[handle.external_id].request
    assert request.command == ["sh", "-c", "echo hi"]
    assert request.environment == {"A": "1"}
    assert request.memory_bytes == 512 * 1024**2
    assert request.nano_cpus == 1_500_000_000
    assert request.labels["altar.timeout_s"] == "30"
    assert request.binds == {backend.data_root: "/mnt/volume"}
    assert backend.path_resolver().resolve("a/b") == "/mnt/volume/a/b"


@pytest.mark.asyncio
async def test_states_follow_the_container(
    backend: LocalDockerExecutionBackend, engine: FakeDockerRuntime
) -> None:
    handle = await backend.submit(spec())
    engine.set_state(handle.external_id, "created")
    assert (await backend.poll([handle]))[0].state is TaskState.PENDING
    for state in ("running", "paused", "restarting"):
        engine.set_state(handle.external_id, state)
        assert (await backend.poll([handle]))[0].state is TaskState.RUNNING
    engine.finish(handle.external_id, 0)
    status = (await backend.poll([handle]))[0]
    assert status.state is TaskState.SUCCEEDED
    assert status.failure is None


@pytest.mark.asyncio
async def test_a_container_created_but_never_started_is_not_pending_forever(
    backend: LocalDockerExecutionBackend, engine: FakeDockerRuntime
) -> None:
    handle = await backend.submit(spec())
    engine.set_state(handle.external_id, "created")  # as if the submitter died before start
    assert (await backend.poll([handle]))[0].state is TaskState.PENDING
    engine.containers[handle.external_id].created -= 600
    status = (await backend.poll([handle]))[0]
    assert status.failure is not None
    assert (status.failure.reason, status.failure.deterministic) == ("job_failed", False)


@pytest.mark.asyncio
async def test_one_list_request_per_poll_however_many_handles(
    backend: LocalDockerExecutionBackend, engine: FakeDockerRuntime
) -> None:
    handles = [
        await backend.submit(spec(labels={"shard": str(i)}, timeout_s=3600)) for i in range(50)
    ]
    engine.requests.clear()
    statuses = await backend.poll(handles)  # far deadlines: not even a clock read
    assert [s.handle.labels["shard"] for s in statuses] == [str(i) for i in range(50)]
    assert dict(engine.requests) == {"list": 1}


@pytest.mark.asyncio
async def test_finished_containers_cost_one_events_request_and_are_cached(
    tmp_path: object, engine: FakeDockerRuntime
) -> None:
    """A fresh instance (not following when they ran) reads the engine's event window once."""
    first = LocalDockerExecutionBackend(data_root=str(tmp_path), runtime=engine, watchdog=False)
    handles = [await first.submit(spec()) for _ in range(20)]
    first.close()
    for i, handle in enumerate(handles):
        engine.finish(handle.external_id, i % 3)
    backend = LocalDockerExecutionBackend(data_root=str(tmp_path), runtime=engine, watchdog=False)
    engine.requests.clear()
    statuses = await backend.poll(handles)
    assert [s.failure.reason if s.failure else "ok" for s in statuses][:3] == [
        "ok",
        "exit_1",
        "exit_2",
    ]
    assert engine.requests["inspect"] == 0
    assert engine.requests["events"] == 2  # the follower's stream opens, then the window
    assert engine.requests["list"] == 1
    engine.requests.clear()
    assert await backend.poll(handles) == statuses
    assert sum(engine.requests.values()) == 0  # terminal outcomes are cached


@pytest.mark.asyncio
async def test_issue_16_followed_exits_cost_only_the_list_request(
    backend: LocalDockerExecutionBackend, engine: FakeDockerRuntime
) -> None:
    """The stream followed since the first submit recorded every outcome: a window of 4
    events would hold almost none of them, and nothing is inspected."""
    engine.events = type(engine.events)(maxlen=4)
    handles = [await backend.submit(spec()) for _ in range(300)]
    for i, handle in enumerate(handles):
        engine.finish(handle.external_id, i % 3, oom=i == 7)
    await _until(
        lambda: (
            backend._follower is not None
            and all(backend._follower.exit(h.external_id) for h in handles)
        ),
        "every exit followed",
    )
    engine.requests.clear()
    statuses = await backend.poll(handles)
    assert dict(engine.requests) == {"list": 1}
    reasons = [s.failure.reason if s.failure else "ok" for s in statuses]
    assert reasons[:3] == ["ok", "exit_1", "exit_2"]
    assert reasons[7] == "oom_killed"


@pytest.mark.asyncio
async def test_issue_16_a_broken_stream_is_reopened_and_replays_the_gap(
    backend: LocalDockerExecutionBackend, engine: FakeDockerRuntime
) -> None:
    handle = await backend.submit(spec())
    follower = backend._follower
    assert follower is not None
    assert follower.following
    engine.break_event_streams()
    engine.finish(handle.external_id, 4)  # while the stream is down
    await _until(lambda: follower.exit(handle.external_id) is not None, "replayed")
    engine.requests.clear()
    (status,) = await backend.poll([handle])
    assert status.failure is not None
    assert status.failure.reason == "exit_4"
    assert dict(engine.requests) == {"list": 1}


@pytest.mark.asyncio
async def test_issue_16_exits_lost_with_the_window_are_found_not_assumed(
    backend: LocalDockerExecutionBackend, engine: FakeDockerRuntime
) -> None:
    """The engine was down longer than its window lasts: the gap cannot be replayed."""
    engine.events = type(engine.events)(maxlen=4)
    handles = [await backend.submit(spec()) for _ in range(4)]
    follower = backend._follower
    assert follower is not None
    engine.available = False
    engine.break_event_streams()
    await _until(lambda: not follower.following, "stream down")
    for i, handle in enumerate(handles):
        engine.finish(handle.external_id, 10 + i)  # 4 die events: the first ones fall out
    engine.events.extend(engine.events)  # ...and other traffic pushes the rest out too
    engine.available = True
    await _until(lambda: follower.following, "stream reopened")
    statuses = await backend.poll(handles)
    assert [s.failure.reason if s.failure else None for s in statuses] == [
        f"exit_{10 + i}" for i in range(4)
    ]
    after = await backend.submit(spec())
    engine.finish(after.external_id, 0)
    assert await backend.wait_for_exit([after], 5)
    engine.requests.clear()
    assert (await backend.poll([after]))[0].state is TaskState.SUCCEEDED
    assert dict(engine.requests) == {"list": 1}


@pytest.mark.asyncio
async def test_issue_16_await_completion_is_woken_by_the_exit(
    backend: LocalDockerExecutionBackend, engine: FakeDockerRuntime
) -> None:
    handle = await backend.submit(spec())
    waiting = asyncio.ensure_future(
        backend.await_completion([handle], interval_s=3600, max_interval_s=3600)
    )
    await _until(lambda: engine.requests["list"] >= 1, "first poll")
    assert not waiting.done()
    engine.finish(handle.external_id, 0)
    # Woken by the pushed die event: with hour-long intervals, a sleep would never return.
    (status,) = await asyncio.wait_for(waiting, 30)
    assert status.state is TaskState.SUCCEEDED


@pytest.mark.asyncio
async def test_containers_outside_the_event_window_are_inspected(
    tmp_path: object, engine: FakeDockerRuntime
) -> None:
    engine.events = type(engine.events)(maxlen=4)
    first = LocalDockerExecutionBackend(data_root=str(tmp_path), runtime=engine, watchdog=False)
    handles = [await first.submit(spec()) for _ in range(6)]
    first.close()  # a fresh instance polls: it did not follow these containers
    backend = LocalDockerExecutionBackend(data_root=str(tmp_path), runtime=engine, watchdog=False)
    engine.finish(handles[0].external_id, 0, oom=True)  # events pushed out of the window below
    for handle in handles[1:]:
        engine.finish(handle.external_id, 5)
    engine.requests.clear()
    statuses = await backend.poll(handles)
    assert statuses[0].failure is not None
    assert statuses[0].failure.reason == "oom_killed"
    assert [s.failure.reason for s in statuses[1:] if s.failure] == ["exit_5"] * 5
    assert engine.requests["inspect"] == 2  # only those whose die event left the window


@pytest.mark.asyncio
async def test_without_events_each_finished_container_is_inspected_once(
    tmp_path: object, engine: FakeDockerRuntime
) -> None:
    backend = LocalDockerExecutionBackend(
        data_root=str(tmp_path), runtime=engine, watchdog=False, use_events=False
    )
    handles = [await backend.submit(spec()) for _ in range(3)]
    engine.finish(handles[0].external_id, 0, oom=True)
    engine.finish(handles[1].external_id, 0)
    engine.requests.clear()
    statuses = await backend.poll(handles)
    assert [s.state for s in statuses] == [TaskState.FAILED, TaskState.SUCCEEDED, TaskState.RUNNING]
    assert engine.requests["inspect"] == 2
    assert engine.requests["events"] == 0


@pytest.mark.asyncio
async def test_child_oom_with_exit_zero_is_oom_killed(
    backend: LocalDockerExecutionBackend, engine: FakeDockerRuntime
) -> None:
    handle = await backend.submit(spec(resources=ResourceRequest(memory_gb=0.0625)))
    engine.finish(handle.external_id, 0, oom=True)
    status = (await backend.poll([handle]))[0]
    assert status.state is TaskState.FAILED
    assert status.failure is not None
    assert (status.failure.reason, status.failure.exit_code) == ("oom_killed", 0)


@pytest.mark.asyncio
async def test_a_fresh_unflagged_sigkill_waits_for_a_late_oom_event(
    tmp_path: object, engine: FakeDockerRuntime
) -> None:
    from altar.backends.local.runtime import ContainerEvent

    first = LocalDockerExecutionBackend(data_root=str(tmp_path), runtime=engine, watchdog=False)
    handle = await first.submit(spec())
    first.close()
    backend = LocalDockerExecutionBackend(data_root=str(tmp_path), runtime=engine, watchdog=False)
    cid = handle.external_id
    engine.containers[cid].created -= 10
    engine.finish(cid, 137)
    assert (await backend.poll([handle]))[0].state is TaskState.RUNNING
    # The oom event reaches the engine after die; two seconds pass.
    engine.events.append(ContainerEvent(cid, "oom", engine.now()))
    engine.events = type(engine.events)(
        (ContainerEvent(e.container_id, e.action, e.time - 2, e.exit_code) for e in engine.events),
        maxlen=engine.events.maxlen,
    )
    status = (await backend.poll([handle]))[0]
    assert status.failure is not None
    assert status.failure.reason == "oom_killed"


@pytest.mark.asyncio
async def test_deadline_kills_and_reads_timeout_on_later_polls(
    backend: LocalDockerExecutionBackend, engine: FakeDockerRuntime
) -> None:
    handle = await backend.submit(spec(timeout_s=60))
    assert (await backend.poll([handle]))[0].state is TaskState.RUNNING
    engine.expire(handle.external_id)
    first = (await backend.poll([handle]))[0]
    assert first.failure is not None
    assert first.failure.reason == "timeout"
    assert engine.containers[handle.external_id].state == "exited"  # it was killed
    assert (await backend.poll([handle]))[0] == first


@pytest.mark.asyncio
async def test_weakness_15_a_fresh_backend_enforces_old_deadlines_and_late_success_is_timeout(
    tmp_path: object, engine: FakeDockerRuntime
) -> None:
    first = LocalDockerExecutionBackend(data_root=str(tmp_path), runtime=engine, watchdog=False)
    running = await first.submit(spec(timeout_s=60))
    killed_earlier = await first.submit(spec(timeout_s=60))
    late_success = await first.submit(spec(timeout_s=60))
    engine.expire(killed_earlier.external_id)
    await first.poll([killed_earlier])  # killed by the first process
    engine.finish(late_success.external_id, 0)
    engine.expire(late_success.external_id)  # ...it finished after its deadline, unpolled
    del first
    engine.expire(running.external_id)

    second = LocalDockerExecutionBackend(data_root=str(tmp_path), runtime=engine, watchdog=False)
    handles = [
        TaskHandle("local", h.external_id, h.labels)
        for h in (running, killed_earlier, late_success)
    ]
    statuses = await second.poll(handles)
    assert [s.failure.reason if s.failure else None for s in statuses] == ["timeout"] * 3
    assert engine.containers[running.external_id].state == "exited"


@pytest.mark.asyncio
async def test_no_timeout_means_no_limit(
    backend: LocalDockerExecutionBackend, engine: FakeDockerRuntime
) -> None:
    handle = await backend.submit(spec())
    engine.containers[handle.external_id].created -= 10 * 365 * 86400
    assert (await backend.poll([handle]))[0].state is TaskState.RUNNING


@pytest.mark.asyncio
async def test_a_deadline_label_baked_into_the_image_is_no_limit(tmp_path: Path) -> None:
    engine = FakeDockerRuntime(image_labels={"committed:1": {"altar.timeout_s": "1"}})
    backend = LocalDockerExecutionBackend(data_root=tmp_path, runtime=engine, watchdog=False)
    handle = await backend.submit(spec(image="committed:1"))
    engine.containers[handle.external_id].created -= 3600
    assert (await backend.poll([handle]))[0].state is TaskState.RUNNING
    limited = await backend.submit(spec(image="committed:1", timeout_s=60))
    engine.expire(limited.external_id)
    status = (await backend.poll([limited]))[0]
    assert status.failure is not None
    assert status.failure.detail is not None
    assert "60 s" in status.failure.detail  # the spec's limit, not the image's


@pytest.mark.asyncio
async def test_missing_and_malformed_ids_are_container_missing(
    backend: LocalDockerExecutionBackend, engine: FakeDockerRuntime
) -> None:
    gone = await backend.submit(spec())
    engine.remove(gone.external_id)
    handles = [
        gone,
        TaskHandle("local", "altar-conformance-missing"),
        TaskHandle("local", ".*"),
        TaskHandle("local", "$(reboot)"),
    ]
    engine.requests.clear()
    statuses = await backend.poll(handles)
    for status in statuses:
        assert status.state is TaskState.FAILED
        assert status.failure is not None
        assert status.failure.reason == "container_missing"
        assert not status.failure.deterministic
    assert engine.requests["list"] == 1  # the malformed ids never reach the engine


@pytest.mark.asyncio
async def test_weakness_3_an_unreachable_engine_is_never_container_missing(
    backend: LocalDockerExecutionBackend, engine: FakeDockerRuntime
) -> None:
    handle = await backend.submit(spec())
    engine.available = False
    with pytest.raises(BackendUnavailableError):
        await backend.poll([handle])
    with pytest.raises(BackendUnavailableError):
        await backend.submit(spec())
    engine.available = True
    assert (await backend.poll([handle]))[0].state is TaskState.RUNNING


@pytest.mark.asyncio
async def test_staging_asks_the_engine_first(
    backend: LocalDockerExecutionBackend, engine: FakeDockerRuntime, tmp_path: Path
) -> None:
    source = tmp_path / "in.txt"
    write(source, "x")
    engine.available = False
    with pytest.raises(BackendUnavailableError):
        await backend.stage_inputs([Transfer(str(source), "in.txt")])
    assert not exists(Path(backend.data_root, "in.txt"))


@pytest.mark.asyncio
async def test_gpu_without_a_gpu_runtime_is_refused_and_nothing_runs(
    backend: LocalDockerExecutionBackend, engine: FakeDockerRuntime
) -> None:
    with pytest.raises(UnsupportedCapabilityError, match="not run on CPU") as caught:
        await backend.submit(spec(resources=ResourceRequest(gpu="gpu", count=1)))
    assert caught.value.capability == "gpu"
    assert engine.containers == {}


@pytest.mark.asyncio
async def test_too_few_gpus_is_refused(tmp_path: object) -> None:
    engine = FakeDockerRuntime(gpu_devices=2)
    backend = LocalDockerExecutionBackend(data_root=str(tmp_path), runtime=engine, watchdog=False)
    handle = await backend.submit(spec(resources=ResourceRequest(gpu="gpu", count=2)))
    assert engine.containers[handle.external_id].request.gpu_count == 2
    with pytest.raises(UnsupportedCapabilityError):
        await backend.submit(spec(resources=ResourceRequest(gpu="gpu", count=3)))


@pytest.mark.asyncio
async def test_engine_refusing_resources_is_unsupported(
    backend: LocalDockerExecutionBackend,
) -> None:
    with pytest.raises(UnsupportedCapabilityError, match="Range of CPUs"):
        await backend.submit(spec(resources=ResourceRequest(cpu=64)))


@pytest.mark.asyncio
async def test_an_image_the_engine_cannot_get_is_a_clear_error(tmp_path: Path) -> None:
    from altar.backends.local import EngineRefusedError

    engine = FakeDockerRuntime(images=["busybox:latest"])
    backend = LocalDockerExecutionBackend(data_root=tmp_path, runtime=engine, watchdog=False)
    with pytest.raises(EngineRefusedError, match="docker load"):
        await backend.submit(spec(image="example.org/model:1"))
    assert engine.containers == {}


@pytest.mark.asyncio
async def test_a_gpu_task_refused_for_another_reason_is_not_blamed_on_gpus(
    tmp_path: Path,
) -> None:
    """A missing image or a CPU quota the host cannot give is not "no GPUs": the message and
    the capability must name what was actually refused."""
    from altar.backends.local import EngineRefusedError

    engine = FakeDockerRuntime(images=["busybox:latest"], gpu_devices=2)
    backend = LocalDockerExecutionBackend(data_root=tmp_path, runtime=engine, watchdog=False)
    gpu = ResourceRequest(gpu="gpu", count=1)
    with pytest.raises(EngineRefusedError, match="docker load") as image:
        await backend.submit(spec(image="example.org/model:1", resources=gpu))
    assert not isinstance(image.value, UnsupportedCapabilityError)
    with pytest.raises(UnsupportedCapabilityError, match="Range of CPUs") as cpu:
        await backend.submit(spec(resources=ResourceRequest(gpu="gpu", count=1, cpu=64)))
    assert cpu.value.capability != "gpu"
    assert "GPU" not in str(cpu.value)
    assert engine.containers == {}


@pytest.mark.asyncio
async def test_resubmitting_starts_another_container(
    backend: LocalDockerExecutionBackend,
) -> None:
    first = await backend.submit(spec())
    second = await backend.submit(spec())
    assert first.external_id != second.external_id


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def exists(path: Path) -> bool:
    return path.exists()


@pytest.mark.asyncio
async def test_submit_removes_stale_outputs(backend: LocalDockerExecutionBackend) -> None:
    stale = Path(backend.data_root, "out", "scores.tsv")
    write(stale, "old")
    await backend.submit(spec(outputs=[Transfer("out/scores.tsv", "out/scores.tsv")]))
    assert not exists(stale)


@pytest.mark.asyncio
async def test_cancel_removes_and_is_idempotent(
    backend: LocalDockerExecutionBackend, engine: FakeDockerRuntime
) -> None:
    handle = await backend.submit(spec())
    await backend.cancel(handle)
    await backend.cancel(handle)
    await backend.cancel(TaskHandle("local", "f" * 64))
    assert handle.external_id not in engine.containers
    status = (await backend.poll([handle]))[0]
    assert status.failure is not None
    assert status.failure.reason == "cancelled"


@pytest.mark.asyncio
async def test_cleanup_removes_only_finished_containers(
    backend: LocalDockerExecutionBackend, engine: FakeDockerRuntime
) -> None:
    done = await backend.submit(spec())
    failed = await backend.submit(spec())
    running = await backend.submit(spec())
    engine.finish(done.external_id, 0)
    engine.finish(failed.external_id, 2)
    await backend.cleanup([done, failed, running])
    await backend.cleanup([done, failed, running])
    assert set(engine.containers) == {running.external_id}
    statuses = await backend.poll([done, failed])  # outcomes stay known to this instance
    assert [s.state for s in statuses] == [TaskState.SUCCEEDED, TaskState.FAILED]


@pytest.mark.asyncio
async def test_failure_detail_is_the_log_tail(
    backend: LocalDockerExecutionBackend, engine: FakeDockerRuntime
) -> None:
    handle = await backend.submit(spec())
    engine.write_log(handle.external_id, [f"log line {i}" for i in range(100)])
    engine.finish(handle.external_id, 3)
    detail = await backend.failure_detail(handle)
    assert detail is not None
    lines = detail.splitlines()
    assert len(lines) == 20
    assert lines[-1] == "log line 99"
    assert await backend.failure_detail(TaskHandle("local", "e" * 64)) is None
    assert await backend.failure_detail(TaskHandle("local", "nonsense")) is None


@pytest.mark.asyncio
async def test_capacity_counts_active_containers(
    backend: LocalDockerExecutionBackend, engine: FakeDockerRuntime
) -> None:
    assert (await backend.capacity()).pools == {"cpu": 4}
    handles = [await backend.submit(spec()) for _ in range(3)]
    engine.finish(handles[0].external_id, 0)
    assert (await backend.capacity()).pools == {"cpu": 2}


@pytest.mark.asyncio
async def test_capacity_leaves_submits_in_flight_to_the_driver(
    backend: LocalDockerExecutionBackend, engine: FakeDockerRuntime
) -> None:
    """A created, not yet started container is a submit in flight: the runner counts it."""
    handles = [await backend.submit(spec()) for _ in range(2)]
    engine.set_state(handles[0].external_id, "created")
    assert (await backend.capacity()).pools == {"cpu": 3}
    engine.set_state(handles[0].external_id, "running")
    assert (await backend.capacity()).pools == {"cpu": 2}


@pytest.mark.asyncio
async def test_weakness_15_watchdog_kills_at_the_deadline_without_a_poll(tmp_path: object) -> None:
    import time

    engine = FakeDockerRuntime()
    backend = LocalDockerExecutionBackend(data_root=str(tmp_path), runtime=engine)
    try:
        handle = await backend.submit(spec(timeout_s=1))
        end = time.monotonic() + 10
        while engine.containers[handle.external_id].state == "running":
            assert time.monotonic() < end, "the watchdog never killed the container"
            await asyncio.sleep(0.1)
        assert engine.containers[handle.external_id].exit_code == 137
        status = (await backend.poll([handle]))[0]
        assert status.failure is not None
        assert status.failure.reason == "timeout"
    finally:
        backend.close()


def _watchdog_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "altar-local-watchdog"}


@pytest.mark.asyncio
async def test_the_watchdog_thread_ends_once_nothing_is_left_to_watch(tmp_path: Path) -> None:
    """Nothing calls close() (the runner does not): the thread, which holds the engine client,
    must not outlive the deadlines it watches, nor wait out the deadline of a cancelled or
    finished task."""
    before = _watchdog_threads()
    engine = FakeDockerRuntime()
    backend = LocalDockerExecutionBackend(data_root=tmp_path, runtime=engine)
    expired = await backend.submit(spec(timeout_s=1))
    await _until(lambda: engine.containers[expired.external_id].state == "exited", "killed")
    await _until(lambda: not (_watchdog_threads() - before), "the watchdog thread ended")

    cancelled = await backend.submit(spec(timeout_s=3600))
    finished = await backend.submit(spec(timeout_s=3600))
    assert _watchdog_threads() - before
    await backend.cancel(cancelled)
    engine.finish(finished.external_id, 0)
    assert (await backend.poll([finished]))[0].state is TaskState.SUCCEEDED
    await _until(lambda: not (_watchdog_threads() - before), "the watchdog thread ended")

    again = await backend.submit(spec(timeout_s=1))  # a new deadline starts a new thread
    await _until(lambda: engine.containers[again.external_id].state == "exited", "killed again")
    backend.close()
    assert not (_watchdog_threads() - before)


def test_options_are_validated(tmp_path: object) -> None:
    with pytest.raises(ValueError, match="slots"):
        LocalDockerExecutionBackend(data_root=str(tmp_path), slots=0)
    with pytest.raises(ValueError, match="gpu_devices"):
        LocalDockerExecutionBackend(data_root=str(tmp_path), gpu_devices=-1)
    with pytest.raises(ValueError, match="network"):
        LocalDockerExecutionBackend(data_root=str(tmp_path), network="")


def test_default_user_is_the_data_root_owner(tmp_path: object) -> None:
    import os
    import sys

    backend = LocalDockerExecutionBackend(data_root=str(tmp_path))
    if sys.platform.startswith("linux"):
        st = os.stat(str(tmp_path))
        assert backend.container_user == f"{st.st_uid}:{st.st_gid}"
    assert (
        LocalDockerExecutionBackend(data_root=str(tmp_path), container_user="").container_user
        is None
    )


def test_registered_under_the_local_entry_point() -> None:
    from importlib.metadata import entry_points

    (entry,) = [e for e in entry_points(group="altar.execution_backends") if e.name == "local"]
    assert entry.load() is LocalDockerExecutionBackend
    assert LocalDockerExecutionBackend.input_digest_verification == "staging"


@pytest.mark.asyncio
async def test_short_container_ids_are_found_too(
    backend: LocalDockerExecutionBackend, engine: FakeDockerRuntime
) -> None:
    handle = await backend.submit(spec())
    short = TaskHandle("local", handle.external_id[:12])
    assert (await backend.poll([short]))[0].state is TaskState.RUNNING
    engine.finish(handle.external_id, 4)
    statuses = await backend.poll([short, handle])
    assert [s.failure.reason if s.failure else None for s in statuses] == ["exit_4", "exit_4"]


async def _until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting until {what}")


@pytest.mark.asyncio
async def test_the_runner_refills_a_slot_while_the_other_submit_is_starting(
    tmp_path: Path,
) -> None:
    """Both slots stay busy: a finished task's slot is refilled during the other's start.

    Counting the other task's ``created`` container as well as its submit in flight left the
    slot idle for the whole start (a third of each task's time on a real engine).
    """
    engine = FakeDockerRuntime(hold_starts=True)
    backend = LocalDockerExecutionBackend(
        data_root=tmp_path / "data", runtime=engine, slots=2, watchdog=False
    )
    plan = plan_from_specs(
        [spec(labels={"n": str(i)}) for i in range(3)], backend_type="local", max_parallel=2
    )
    run = asyncio.ensure_future(run_plan(plan, backend, run_dir=tmp_path / "run"))
    try:
        await _until(lambda: len(engine.held_starts()) == 2, "two starts are in flight")
        first, second = engine.held_starts()
        engine.release_start(first)
        engine.finish(first, 0)
        await _until(lambda: len(engine.held_starts()) == 2, "the freed slot is refilled")
        assert second in engine.held_starts()  # still starting: the refill did not wait for it
    finally:
        engine.hold_starts = False
        engine.release_start()
    while not run.done():  # every task ends as soon as it runs
        for container in list(engine.containers.values()):
            if container.state == "running":
                engine.finish(container.id, 0)
        await asyncio.sleep(0.01)
    result = await run
    assert result.ok
    assert engine.requests["create"] == 3


def test_an_explicit_tcp_engine_keeps_the_environments_tls_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Like ``docker -H tcp://...``: the URL is ours, TLS still comes from DOCKER_TLS_VERIFY."""
    from altar.backends.local.sdk_runtime import _client_kwargs

    for name in ("ca.pem", "cert.pem", "key.pem"):
        (tmp_path / name).write_text("not read until a connection is made\n")
    monkeypatch.setenv("DOCKER_HOST", "tcp://from-the-environment:2376")
    monkeypatch.setenv("DOCKER_TLS_VERIFY", "1")
    monkeypatch.setenv("DOCKER_CERT_PATH", str(tmp_path))
    explicit = _client_kwargs("tcp://engine.example:2376")
    assert explicit["base_url"] == "tcp://engine.example:2376"
    assert explicit["tls"].verify is True
    assert explicit["tls"].ca_cert == str(tmp_path / "ca.pem")
    assert explicit["tls"].cert == (str(tmp_path / "cert.pem"), str(tmp_path / "key.pem"))
    assert _client_kwargs(None)["base_url"] == "tcp://from-the-environment:2376"
    assert "tls" not in _client_kwargs("unix:///run/docker.sock")
    monkeypatch.delenv("DOCKER_TLS_VERIFY")
    monkeypatch.delenv("DOCKER_CERT_PATH")
    assert _client_kwargs("tcp://engine.example:2375") == {"base_url": "tcp://engine.example:2375"}


@pytest.mark.asyncio
async def test_issue_15_failure_detail_ends_with_stderr_tail(
    backend: LocalDockerExecutionBackend, engine: FakeDockerRuntime
) -> None:
    handle = await backend.submit(spec())
    engine.write_log(handle.external_id, ["Traceback (most recent call last):"], stream="stderr")
    engine.write_log(handle.external_id, [f"progress {i}" for i in range(60)])
    engine.write_log(handle.external_id, ["ValueError: bad fold"], stream="stderr")
    engine.finish(handle.external_id, 1)
    detail = await backend.failure_detail(handle)
    assert detail is not None
    assert detail.splitlines() == [f"progress {i}" for i in range(42, 60)] + [
        "Traceback (most recent call last):",
        "ValueError: bad fold",
    ]


@pytest.mark.parametrize(
    ("n_out", "n_err", "kept"),
    [(0, 0, (0, 0)), (100, 0, (20, 0)), (0, 100, (0, 20)), (100, 100, (10, 10)), (3, 40, (3, 17))],
)
def test_tail_lines_shares_the_budget_and_puts_stderr_last(
    n_out: int, n_err: int, kept: tuple[int, int]
) -> None:
    from altar.backends.local.backend import tail_lines

    out = [f"o{i}" for i in range(n_out)]
    err = [f"e{i}" for i in range(n_err)]
    lines = tail_lines(out, err, 20)
    assert lines == out[n_out - kept[0] :] + err[n_err - kept[1] :]


@pytest.mark.asyncio
async def test_issue_15_a_deadline_counts_from_the_start_not_the_creation(
    backend: LocalDockerExecutionBackend, engine: FakeDockerRuntime
) -> None:
    """Created long ago (a loaded engine, a held start), started just now: not overrun."""
    engine.hold_starts = True
    submitting = asyncio.ensure_future(backend.submit(spec(timeout_s=3)))
    await _until(lambda: bool(engine.held_starts()), "created")
    (cid,) = engine.held_starts()
    engine.containers[cid].created -= 3600  # waited an hour between create and start
    engine.release_start(cid)
    handle = await submitting
    (status,) = await backend.poll([handle])
    assert status.state is TaskState.RUNNING, status.failure
    assert engine.requests["inspect"] == 0  # the followed start event said when
    other = LocalDockerExecutionBackend(data_root=backend.data_root, runtime=engine, watchdog=False)
    for _ in range(2):
        (status,) = await other.poll([handle])
        assert status.state is TaskState.RUNNING, status.failure
    assert engine.requests["inspect"] == 1  # not followed: the start time, asked once
    engine.expire(cid)  # now it really ran past its limit (a start time never changes, so a
    # fresh instance looks: this one remembers the start it read)
    fresh = LocalDockerExecutionBackend(data_root=backend.data_root, runtime=engine, watchdog=False)
    (status,) = await fresh.poll([handle])
    assert status.failure is not None
    assert status.failure.reason == "timeout"
    (status,) = await backend.poll([handle])  # the follower heard of the earlier start too
    assert status.failure is not None
    assert status.failure.reason == "timeout"


def test_demultiplex_splits_the_engines_log_frames_by_stream() -> None:
    from altar.backends.local.sdk_runtime import demultiplex

    def frame(kind: int, payload: bytes) -> bytes:
        return bytes([kind, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload

    body = (
        frame(2, b"Error: first\n")
        + frame(1, b"out 1\nout")
        + frame(0, b"stdin is ignored")
        + frame(1, b" 2\n")
        + frame(2, b"Error: last\n")
        + frame(1, b"cut sh")[:-2]  # a frame cut short keeps what arrived
    )
    assert demultiplex(body) == (b"out 1\nout 2\ncut ", b"Error: first\nError: last\n")
    assert demultiplex(b"") == (b"", b"")
