"""Exactly once on the local backend (issue 13), against the in-memory engine.

The runner passes a durable submission key as the ``altar.submission`` label; the backend names
the container after it, so the retry of an in-doubt submit finds the container instead of
starting another, in whatever state the engine holds it. The engine "dying" here is the fake
doing a request's work and then losing its answer, or refusing every request.
"""

from __future__ import annotations

import contextlib
import hashlib
from pathlib import Path

import pytest
from altar.backends.local import LocalDockerExecutionBackend
from altar.backends.local.fake import FakeDockerRuntime
from altar.execution import (
    BackendUnavailableError,
    ContainerTaskSpec,
    TaskState,
    Transfer,
)
from altar.execution.labels import submission_key, submission_labels


def key(run: str, task: str, attempt: int) -> str:
    """The runner's key, computed here independently of altar-core's submission_key."""
    return hashlib.sha256(f"{run}\0{task}\0{attempt}".encode()).hexdigest()[:32]


def test_the_key_is_the_runners() -> None:
    assert key("r", "t", 2) == submission_key("r", "t", 2)
    assert spec("r", "t", 2).labels["altar.submission"] == key("r", "t", 2)


def spec(
    run: str = "run-1", task: str = "t1", attempt: int = 1, **extra: object
) -> ContainerTaskSpec:
    """A spec as the runner submits it: the contract's four reserved labels on it."""
    values: dict[str, object] = {
        "kind": "score",
        "image": "busybox:latest",
        "command": ["sh", "-c", "echo hi"],
        "labels": submission_labels(run, task, attempt),
    }
    values.update(extra)
    return ContainerTaskSpec(**values)  # type: ignore[arg-type]


def fresh(tmp_path: Path, engine: FakeDockerRuntime) -> LocalDockerExecutionBackend:
    return LocalDockerExecutionBackend(data_root=tmp_path / "data", runtime=engine, watchdog=False)


def test_the_backend_declares_it_adopts_submissions() -> None:
    assert LocalDockerExecutionBackend.adopts_submissions is True


@pytest.mark.asyncio
async def test_containers_carry_the_runners_labels_and_a_name_from_the_key(
    backend: LocalDockerExecutionBackend, engine: FakeDockerRuntime
) -> None:
    handle = await backend.submit(spec())
    container = engine.containers[handle.external_id]
    assert container.name == f"altar-{key('run-1', 't1', 1)}"
    for label in ("altar.run", "altar.task", "altar.attempt", "altar.submission"):
        assert container.labels[label] == spec().labels[label]
    assert handle.labels == spec().labels


@pytest.mark.asyncio
@pytest.mark.parametrize("state", ["running", "exited"])
async def test_a_second_submit_of_a_key_adopts_without_starting_another(
    tmp_path: Path, engine: FakeDockerRuntime, state: str
) -> None:
    first = await fresh(tmp_path, engine).submit(spec())
    if state == "exited":
        engine.finish(first.external_id, 0)
    engine.requests.clear()
    again = await fresh(tmp_path, engine).submit(spec())  # a resumed runner, in doubt
    assert again.external_id == first.external_id
    assert len(engine.containers) == 1
    assert engine.requests["start"] == 0
    assert engine.containers[first.external_id].state == state


@pytest.mark.asyncio
async def test_an_adopted_finished_task_keeps_its_outputs(
    tmp_path: Path, engine: FakeDockerRuntime
) -> None:
    out = Transfer(str(tmp_path / "collected.txt"), "out/result.txt")
    first = await fresh(tmp_path, engine).submit(spec(outputs=[out]))
    written = tmp_path / "data" / "out" / "result.txt"
    written.parent.mkdir(parents=True)
    written.write_text("the expensive result")
    engine.finish(first.external_id, 0)
    await fresh(tmp_path, engine).submit(spec(outputs=[out]))
    assert written.read_text() == "the expensive result"  # not removed as a stale output


@pytest.mark.asyncio
async def test_engine_died_after_the_create_the_resubmit_starts_that_container(
    tmp_path: Path, engine: FakeDockerRuntime
) -> None:
    engine.lose_answers.add("create")
    backend = fresh(tmp_path, engine)
    with pytest.raises(BackendUnavailableError):
        await backend.submit(spec())
    (created,) = engine.containers.values()
    assert created.state == "created"  # the engine did create it; nobody knows its id
    handle = await fresh(tmp_path, engine).submit(spec())
    assert handle.external_id == created.id
    assert created.state == "running"
    assert len(engine.containers) == 1


@pytest.mark.asyncio
async def test_engine_died_after_the_start_the_resubmit_adopts_the_running_container(
    tmp_path: Path, engine: FakeDockerRuntime
) -> None:
    engine.lose_answers.add("start")
    with pytest.raises(BackendUnavailableError):
        await fresh(tmp_path, engine).submit(spec())
    (started,) = engine.containers.values()
    assert started.state == "running"  # kept: the key finds it (without a key it is removed)
    engine.requests.clear()
    handle = await fresh(tmp_path, engine).submit(spec())
    assert handle.external_id == started.id
    assert engine.requests["start"] == 0
    assert len(engine.containers) == 1


@pytest.mark.asyncio
async def test_a_container_restored_as_created_after_an_unanswered_start_is_not_started_again(
    tmp_path: Path, engine: FakeDockerRuntime
) -> None:
    # Found by the engine-kill crash test: dockerd killed between starting the process and
    # recording it restores the container as "created"; it ran, and a second start ran it twice.
    backend = fresh(tmp_path, engine)
    engine.lose_answers.add("start")
    with pytest.raises(BackendUnavailableError):
        await backend.submit(spec())
    (container,) = engine.containers.values()
    engine.set_state(container.id, "created")  # the restarted engine's view
    engine.requests.clear()
    handle = await backend.submit(spec())
    assert handle.external_id == container.id
    assert engine.requests["start"] == 0
    assert container.state == "created"
    (status,) = await backend.poll([handle])
    assert status.state is TaskState.FAILED
    assert status.failure is not None
    assert (status.failure.reason, status.failure.deterministic) == ("job_failed", False)
    assert "may have run" in status.failure.detail
    # a task only created, by a submitter that stopped in between, is still started
    other = spec(task="t2")
    engine.lose_answers.add("create")
    with pytest.raises(BackendUnavailableError):
        await backend.submit(other)
    adopted = await backend.submit(other)
    assert engine.containers[adopted.external_id].state == "running"


@pytest.mark.asyncio
async def test_without_a_key_a_start_without_answer_leaves_nothing_behind(
    backend: LocalDockerExecutionBackend, engine: FakeDockerRuntime
) -> None:
    engine.lose_answers.add("start")
    plain = ContainerTaskSpec(kind="k", image="busybox:latest", command=["true"])
    with pytest.raises(BackendUnavailableError):
        await backend.submit(plain)
    assert engine.containers == {}


@pytest.mark.asyncio
async def test_engine_down_then_back_every_submission_runs_once(
    tmp_path: Path, engine: FakeDockerRuntime
) -> None:
    """Submits while the engine dies at each point in turn; every retry reuses its key."""
    backend = fresh(tmp_path, engine)
    specs = [spec(task=f"t{i}") for i in range(6)]
    script = [{"create"}, {"start"}, set(), None, {"create"}, {"start"}]
    for task_spec, lost in zip(specs, script, strict=True):
        if lost is None:
            engine.available = False
        else:
            engine.lose_answers |= lost
        with contextlib.suppress(BackendUnavailableError):
            await backend.submit(task_spec)
        engine.available = True
    handles = [await backend.submit(task_spec) for task_spec in specs]  # the resubmits
    assert len({h.external_id for h in handles}) == 6
    assert len(engine.containers) == 6
    assert all(c.state == "running" for c in engine.containers.values())
    assert {c.labels["altar.task"] for c in engine.containers.values()} == {
        f"t{i}" for i in range(6)
    }


@pytest.mark.asyncio
async def test_a_name_taken_by_something_else_is_refused(
    backend: LocalDockerExecutionBackend, engine: FakeDockerRuntime
) -> None:
    stranger = spec()
    impostor = ContainerTaskSpec(
        kind="k", image="busybox:latest", command=["true"], labels={"x": "y"}
    )
    handle = await backend.submit(impostor)
    engine.containers[handle.external_id].name = f"altar-{stranger.labels['altar.submission']}"
    with pytest.raises(Exception, match="did not create it") as caught:
        await backend.submit(stranger)
    assert not isinstance(caught.value, BackendUnavailableError)
    assert len(engine.containers) == 1


@pytest.mark.asyncio
async def test_list_submissions_is_one_request_for_a_runs_containers(
    tmp_path: Path, engine: FakeDockerRuntime
) -> None:
    backend = fresh(tmp_path, engine)
    mine = [await backend.submit(spec(task=f"t{i}")) for i in range(3)]
    engine.finish(mine[0].external_id, 1)
    await backend.submit(spec(run="other-run"))
    await backend.submit(ContainerTaskSpec(kind="k", image="busybox:latest", command=["true"]))
    engine.requests.clear()
    listed = await fresh(tmp_path, engine).list_submissions("run-1")
    assert listed is not None
    assert dict(engine.requests) == {"list": 1}
    assert sorted(h.external_id for h in listed) == sorted(h.external_id for h in mine)
    by_id = {h.external_id: h for h in listed}
    for handle in mine:
        assert by_id[handle.external_id].labels == handle.labels  # the backend's own stripped
    statuses = await backend.poll(listed)
    assert sorted(s.state.value for s in statuses) == ["failed", "running", "running"]
    assert await backend.list_submissions("no-such-run") == []


@pytest.mark.asyncio
async def test_capacity_counts_neither_orphans_nor_created_containers(
    tmp_path: Path, engine: FakeDockerRuntime
) -> None:
    killed_runner = fresh(tmp_path, engine)
    await killed_runner.submit(spec(task="orphan"))  # an in-doubt submit of a killed runner
    await killed_runner.submit(spec(run="someone-else"))  # another run on this host
    resumed = LocalDockerExecutionBackend(
        data_root=tmp_path / "data", runtime=engine, watchdog=False, slots=10
    )
    assert (await resumed.capacity()).pools["cpu"] == 8  # knows nothing of run-1 yet
    listed = await resumed.list_submissions("run-1")
    assert listed is not None
    assert len(listed) == 1
    assert (await resumed.capacity()).pools["cpu"] == 9  # the orphan holds no slot
    await resumed.submit(spec(task="orphan"))  # adopted: it counts again
    assert (await resumed.capacity()).pools["cpu"] == 8
    await resumed.submit(spec(task="t2"))
    assert (await resumed.capacity()).pools["cpu"] == 7
    await resumed.cancel(listed[0])  # removed: no longer counted
    assert (await resumed.capacity()).pools["cpu"] == 8


@pytest.mark.asyncio
async def test_a_retried_attempt_has_its_own_key_and_container(
    backend: LocalDockerExecutionBackend, engine: FakeDockerRuntime
) -> None:
    one = await backend.submit(spec(attempt=1))
    engine.finish(one.external_id, 1)
    two = await backend.submit(spec(attempt=2))
    assert two.external_id != one.external_id
    assert (await backend.poll([two]))[0].state is TaskState.RUNNING
