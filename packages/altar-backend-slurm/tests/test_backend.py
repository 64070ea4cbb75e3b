"""The backend on the fake login node: commands per poll, adoption, outages, cleanup."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
from altar.backends.slurm import SlurmExecutionBackend
from altar.backends.slurm.fake import FakeLoginNode
from altar.execution import (
    BackendUnavailableError,
    ContainerTaskSpec,
    TaskHandle,
    TaskState,
    UnsupportedCapabilityError,
)
from altar.execution.labels import submission_labels

from .conftest import MAX_TIME_S

pytestmark = pytest.mark.asyncio

SPEC = ContainerTaskSpec(kind="t", image="busybox:latest", command=["true"], labels={"k": "v"})


def _keyed(run: str, task: str, attempt: int = 1) -> ContainerTaskSpec:
    return replace(SPEC, labels=submission_labels(run, task, attempt))


def _fresh(backend: SlurmExecutionBackend) -> SlurmExecutionBackend:
    return SlurmExecutionBackend(
        data_root=backend.data_root,
        container_runtime="docker",
        runtime=backend.node,
        cancel_wait_s=0,
    )


def _fresh_on(backend: SlurmExecutionBackend, **options: str) -> SlurmExecutionBackend:
    return SlurmExecutionBackend(
        data_root=backend.data_root, container_runtime="docker", runtime=backend.node, **options
    )


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _listing(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except FileNotFoundError:
        return []


def _commands(node: FakeLoginNode) -> list[str]:
    """The programs run, seen through their ``timeout --kill-after=2 N`` bound; the one
    command that reads the jobs' records is ``records``."""
    return [
        call[3]
        if call[0] == "timeout"
        else "records"
        if call[3:4] == ["altar-records"]
        else "markers"
        if call[3:4] == ["altar-markers"]
        else call[0]
        for call in node.calls
    ]


async def test_a_poll_of_many_jobs_is_one_squeue_while_they_run(
    backend: SlurmExecutionBackend, node: FakeLoginNode
) -> None:
    handles = [await backend.submit(replace(SPEC, labels={"i": str(i)})) for i in range(50)]
    node.calls.clear()
    statuses = await backend.poll(handles)
    assert {s.state for s in statuses} == {TaskState.RUNNING}
    assert _commands(node) == ["records", "squeue"]


async def test_more_jobs_than_a_command_line_holds_are_still_one_squeue(
    backend: SlurmExecutionBackend, node: FakeLoginNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    from altar.backends.slurm import commands

    monkeypatch.setattr(commands, "MAX_LISTED_JOBS", 3)
    handles = [await backend.submit(replace(SPEC, labels={"i": str(i)})) for i in range(5)]
    await backend.submit(replace(SPEC, labels={"other": "job"}))
    node.calls.clear()
    statuses = await backend.poll(handles[1:])
    assert {s.state for s in statuses} == {TaskState.RUNNING}
    assert _commands(node) == ["records", "squeue"]
    assert not any(arg.startswith("--jobs") for arg in node.calls[1])


async def test_finished_jobs_cost_at_most_one_sacct_more(
    backend: SlurmExecutionBackend, node: FakeLoginNode
) -> None:
    handles = [await backend.submit(replace(SPEC, labels={"i": str(i)})) for i in range(6)]
    node.finish(handles[0].external_id, 0)
    node.finish(handles[1].external_id, 3)
    node.expire(handles[2].external_id)
    node.container_oom(handles[3].external_id)
    node.finish(handles[4].external_id, 2)
    node.advance(node.min_job_age + 1)  # out of squeue's window: only sacct knows them
    node.calls.clear()
    statuses = await backend.poll(handles)
    # The jobs' own records (one command for all) settle four; squeue finds one gone, whose
    # record is looked for once more before one sacct.
    assert _commands(node) == ["records", "squeue", "records", "sacct"]
    reasons = [s.failure.reason if s.failure else s.state.value for s in statuses]
    assert reasons == ["succeeded", "exit_3", "timeout", "oom_killed", "exit_2", "running"]


@pytest.mark.parametrize("code", [128, 129, 200, 255])
async def test_statuses_above_128_come_from_the_jobs_record(
    backend: SlurmExecutionBackend, node: FakeLoginNode, code: int
) -> None:
    handles = [await backend.submit(replace(SPEC, labels={"i": str(i)})) for i in range(2)]
    node.finish(handles[0].external_id, code)
    node.finish(handles[1].external_id, code, record=False)  # killed before its last act
    node.advance(node.min_job_age + 1)
    first, second = await backend.poll(handles)
    assert first.failure is not None
    assert (first.failure.reason, first.failure.exit_code) == (f"exit_{code}", code)
    # No record: sacct's view, which is all Slurm keeps.
    assert second.failure is not None
    assert second.failure.exit_code == (code - 128 if code > 128 else code)


async def test_endings_squeue_can_tell_cost_no_sacct(
    backend: SlurmExecutionBackend, node: FakeLoginNode
) -> None:
    handles = [await backend.submit(replace(SPEC, labels={"i": str(i)})) for i in range(4)]
    node.finish(handles[0].external_id, 0)
    node.expire(handles[1].external_id)
    node.oom_kill(handles[2].external_id)
    await backend.cancel(handles[3])
    node.calls.clear()
    statuses = await backend.poll(handles)
    # No sacct: the record settles the first, squeue the others.
    assert _commands(node) == ["records", "squeue"]
    reasons = [s.failure.reason if s.failure else s.state.value for s in statuses]
    assert reasons == ["succeeded", "timeout", "oom_killed", "cancelled"]
    assert statuses[0].finished_at is not None  # the fake's record


async def test_a_job_neither_squeue_nor_sacct_knows_is_missing_not_succeeded(
    backend: SlurmExecutionBackend, node: FakeLoginNode
) -> None:
    handle = await backend.submit(SPEC)
    node.forget(handle.external_id)
    (status,) = await backend.poll([handle])
    assert status.failure is not None
    assert status.failure.reason == "container_missing"
    assert not status.failure.deterministic


async def test_without_accounting_a_finished_job_still_in_squeue_is_read_from_squeue(
    backend: SlurmExecutionBackend, node: FakeLoginNode
) -> None:
    handle = await backend.submit(SPEC)
    node.finish(handle.external_id, 4)
    # sacct answers but does not know the job yet (slurmdbd lag): squeue's status decides
    node.unaccounted.add(node.job(handle.external_id).job_id)
    (status,) = await backend.poll([handle])
    assert status.failure is not None
    assert status.failure.reason == "exit_4"


@pytest.mark.parametrize("broken", ["controller", "database", "node"])
async def test_outages_are_backend_unavailable_never_states(
    backend: SlurmExecutionBackend, node: FakeLoginNode, broken: str
) -> None:
    handle = await backend.submit(SPEC)
    node.finish(handle.external_id, 3, record=False)  # only Slurm can tell how it ended
    node.advance(node.min_job_age + 1)
    if broken == "controller":
        node.available = False
    elif broken == "database":
        node.accounting_available = False
    else:
        node.unreachable = True
    with pytest.raises(BackendUnavailableError):
        await backend.poll([handle])
    node.available, node.accounting_available, node.unreachable = True, True, False
    (status,) = await backend.poll([handle])
    assert status.failure is not None
    assert status.failure.reason == "exit_3"


async def test_a_controller_that_does_not_answer_is_an_outage_within_the_bound(
    backend: SlurmExecutionBackend, node: FakeLoginNode
) -> None:
    handle = await backend.submit(SPEC)
    node.hung = True
    with pytest.raises(BackendUnavailableError, match="did not answer within 20 s"):
        await backend.poll([handle])
    assert node.calls[-1][:3] == ["timeout", "--kill-after=2", "20"]
    node.hung = False
    (status,) = await backend.poll([handle])
    assert status.state is TaskState.RUNNING


async def test_submit_during_an_outage_raises_unavailable(
    backend: SlurmExecutionBackend, node: FakeLoginNode
) -> None:
    node.available = False
    with pytest.raises(BackendUnavailableError):
        await backend.submit(SPEC)
    assert not node.jobs


async def test_a_submit_retried_after_an_outage_reuses_its_job_directory(
    backend: SlurmExecutionBackend, node: FakeLoginNode
) -> None:
    jobs = f"{backend.data_root}/.altar-slurm/jobs"
    node.lost_at_sbatch = True
    with pytest.raises(BackendUnavailableError):
        await backend.submit(_keyed("run-1", "a"))
    (left,) = _listing(jobs)  # the job may exist after all, so its directory stays
    handle = await _fresh(backend).submit(_keyed("run-1", "a"))
    assert _listing(jobs) == [left]
    assert handle.external_id.endswith(f":{left}")


async def test_one_key_under_two_data_roots_names_two_containers(
    backend: SlurmExecutionBackend, node: FakeLoginNode, tmp_path: Path
) -> None:
    # The token names the job's Docker/Podman container; an engine shared by two data roots
    # must not be asked for one name twice.
    other = SlurmExecutionBackend(
        data_root=tmp_path / "other", container_runtime="docker", runtime=node
    )
    first = await backend.submit(_keyed("run-1", "a"))
    second = await other.submit(_keyed("run-1", "a"))
    tokens = {h.external_id.split(":", 1)[1] for h in (first, second)}
    assert len(tokens) == 2
    names = {f"altar-{t}" for t in tokens}
    assert {n for n in names if n in node.job(first.external_id.split(":")[0]).script} | {
        n for n in names if n in node.job(second.external_id.split(":")[0]).script
    } == names


async def test_a_fresh_keyed_submit_asks_the_controller_nothing_before_sbatch(
    backend: SlurmExecutionBackend, node: FakeLoginNode
) -> None:
    await backend.submit(_keyed("run-1", "warm"))  # reads MaxArraySize once
    node.calls.clear()
    await backend.submit(_keyed("run-1", "b"))
    assert _commands(node) == ["markers", "sh"]  # a stat of its job dir, then sbatch


async def test_a_refused_job_leaves_no_directory(
    backend: SlurmExecutionBackend, node: FakeLoginNode
) -> None:
    with pytest.raises(UnsupportedCapabilityError, match="Invalid partition"):
        await _fresh_on(backend, partition="nope").submit(_keyed("run-1", "a"))
    assert _listing(f"{backend.data_root}/.altar-slurm/jobs") == []


async def test_a_keyed_submission_is_adopted_in_any_state_never_run_twice(
    backend: SlurmExecutionBackend, node: FakeLoginNode
) -> None:
    spec = _keyed("run-1", "a")
    first = await backend.submit(spec)
    assert (await _fresh(backend).submit(spec)).external_id == first.external_id
    node.finish(first.external_id, 3)
    assert (await _fresh(backend).submit(spec)).external_id == first.external_id
    node.advance(node.min_job_age + 1)  # only sacct remembers it now
    node.calls.clear()
    adopted = await _fresh(backend).submit(spec)
    assert adopted.external_id == first.external_id
    # the cluster's MaxArraySize (once), its job dir exists (no array marker): Slurm by name
    assert _commands(node) == ["scontrol", "markers", "squeue", "sacct"]
    assert len(node.jobs) == 1
    # the next attempt has its own key and runs
    retry = await backend.submit(_keyed("run-1", "a", attempt=2))
    assert retry.external_id != first.external_id


async def test_adoption_never_takes_a_job_of_another_data_root(
    backend: SlurmExecutionBackend, node: FakeLoginNode, tmp_path: Path
) -> None:
    spec = _keyed("run-1", "a")
    other = SlurmExecutionBackend(
        data_root=tmp_path / "elsewhere", container_runtime="docker", runtime=node
    )
    theirs = await other.submit(spec)
    ours = await backend.submit(spec)
    assert ours.external_id != theirs.external_id


async def test_an_unkeyed_spec_adopts_only_an_active_job_of_the_same_spec(
    backend: SlurmExecutionBackend, node: FakeLoginNode
) -> None:
    first = await backend.submit(SPEC)
    assert (await backend.submit(SPEC)).external_id == first.external_id
    changed = await backend.submit(replace(SPEC, command=["false"]))
    assert changed.external_id != first.external_id
    node.finish(first.external_id, 0)
    assert (await backend.submit(SPEC)).external_id != first.external_id


async def test_list_submissions_names_the_runs_jobs_only(
    backend: SlurmExecutionBackend, node: FakeLoginNode
) -> None:
    a = await backend.submit(_keyed("run-1", "a"))
    b = await backend.submit(_keyed("run-1", "b"))
    await backend.submit(_keyed("run-2", "a"))
    await backend.submit(SPEC)
    node.finish(b.external_id, 0)
    node.advance(node.min_job_age + 1)  # b is known to sacct only
    listed = await _fresh(backend).list_submissions("run-1")
    assert listed is not None
    assert [h.external_id for h in listed] == [a.external_id, b.external_id]
    assert [h.labels["altar.submission"] for h in listed] == [
        _keyed("run-1", "a").labels["altar.submission"],
        _keyed("run-1", "b").labels["altar.submission"],
    ]
    assert listed[0].labels == _keyed("run-1", "a").labels


async def test_a_timeout_above_maxtime_is_refused_before_sbatch(
    backend: SlurmExecutionBackend, node: FakeLoginNode
) -> None:
    with pytest.raises(UnsupportedCapabilityError, match=str(MAX_TIME_S)):
        await backend.submit(replace(SPEC, timeout_s=MAX_TIME_S + 1))
    assert not node.jobs
    await backend.submit(replace(SPEC, timeout_s=60))
    await backend.submit(replace(SPEC, timeout_s=61))
    assert _commands(node).count("scontrol") == 1, "MaxTime is read once per backend"


async def test_an_unlimited_partition_takes_any_timeout(
    tmp_path: Path, node: FakeLoginNode
) -> None:
    backend = SlurmExecutionBackend(
        data_root=tmp_path / "d", container_runtime="docker", runtime=node, partition="long"
    )
    handle = await backend.submit(replace(SPEC, timeout_s=10 * MAX_TIME_S))
    assert node.job(handle.external_id).time_limit_s == 10 * MAX_TIME_S


async def test_cleanup_removes_finished_job_directories_only(
    backend: SlurmExecutionBackend, node: FakeLoginNode
) -> None:
    done = await backend.submit(replace(SPEC, labels={"i": "1"}))
    running = await backend.submit(replace(SPEC, labels={"i": "2"}))
    node.finish(done.external_id, 0)
    await backend.cleanup([done, running])
    await backend.cleanup([done, running])
    assert not _listing(node.job(done.external_id).work_dir)
    assert _listing(node.job(running.external_id).work_dir) == ["job.sbatch", "started"]


async def test_failure_detail_is_the_tail_of_stdout_and_stderr(
    backend: SlurmExecutionBackend, node: FakeLoginNode
) -> None:
    handle = await backend.submit(SPEC)
    node.write_log(handle.external_id, [f"out {i}" for i in range(50)])
    node.write_log(handle.external_id, ["the error"], stream="stderr")
    detail = await backend.failure_detail(handle)
    assert detail is not None
    assert detail.splitlines()[-1] == "the error"
    assert "out 49" in detail
    assert "out 0\n" not in detail


async def test_cancel_is_idempotent_and_reads_cancelled(
    backend: SlurmExecutionBackend, node: FakeLoginNode
) -> None:
    handle = await backend.submit(SPEC)
    await backend.cancel(handle)
    await backend.cancel(handle)
    node.advance(node.min_job_age + 1)
    (status,) = await _fresh(backend).poll([handle])
    assert status.failure is not None
    assert status.failure.reason == "cancelled"
    await backend.cancel(TaskHandle("slurm", "999:" + "0" * 16 + "-" + "0" * 16 + "-" + "0" * 8))


async def test_staging_copies_only_what_changed(
    backend: SlurmExecutionBackend, tmp_path: Path
) -> None:
    from altar.execution import Transfer

    source = tmp_path / "w.bin"
    source.write_bytes(b"weights")
    transfer = Transfer(str(source), "models/w.bin")
    await backend.stage_inputs([transfer])
    staged = os.path.join(backend.data_root, "models", "w.bin")
    assert _read(staged) == b"weights"
    first = os.stat(staged).st_ino
    await backend.stage_inputs([transfer])
    assert os.stat(staged).st_ino == first, "an unchanged input is not copied again"
    await backend.collect_outputs([Transfer(str(tmp_path / "back.bin"), "models/w.bin")])
    assert _read(str(tmp_path / "back.bin")) == b"weights"
    with pytest.raises(UnsupportedCapabilityError):
        await backend.stage_inputs([Transfer(str(source), "../escape")])
