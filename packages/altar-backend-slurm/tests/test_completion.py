"""The poll's pace on the fake login node, with its clock: records every poll, squeue at most
once per ``queue_interval_s``, sacct only for jobs gone without a record, late records awaited."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from altar.backends.slurm import SlurmExecutionBackend
from altar.backends.slurm.fake import FakeLoginNode
from altar.execution import ContainerTaskSpec, TaskHandle, TaskState, TaskStatus
from altar.execution.labels import submission_labels

pytestmark = pytest.mark.asyncio

SPEC = ContainerTaskSpec(kind="t", image="busybox:latest", command=["true"], labels={"k": "v"})
INTERVAL = 60.0
TIMEOUT = 30.0


def _backend(node: FakeLoginNode, root: Path, **options: Any) -> SlurmExecutionBackend:
    settings: dict[str, Any] = {
        "queue_interval_s": INTERVAL,
        "exit_read_timeout_s": TIMEOUT,
        **options,
    }
    return SlurmExecutionBackend(
        data_root=root,
        container_runtime="docker",
        runtime=node,
        cancel_wait_s=0,
        clock=lambda: node.clock,
        **settings,
    )


@pytest.fixture
def paced(tmp_path: Path, node: FakeLoginNode) -> SlurmExecutionBackend:
    return _backend(node, tmp_path / "data")


def _programs(node: FakeLoginNode) -> list[str]:
    return [
        call[3]
        if call[0] == "timeout"
        else "records"
        if call[3:4] == ["altar-records"]
        else call[0]
        for call in node.calls
    ]


def _reason(status: TaskStatus) -> str:
    return status.failure.reason if status.failure else status.state.value


async def _submit(backend: SlurmExecutionBackend, count: int) -> list[TaskHandle]:
    return [await backend.submit(replace(SPEC, labels={"i": str(i)})) for i in range(count)]


async def test_ends_are_read_from_the_records_without_asking_the_queue(
    paced: SlurmExecutionBackend, node: FakeLoginNode
) -> None:
    handles = await _submit(paced, 3)
    node.calls.clear()
    assert {s.state for s in await paced.poll(handles)} == {TaskState.RUNNING}
    node.finish(handles[0].external_id, 0)
    node.finish(handles[1].external_id, 200)  # sacct would say 72
    node.fail_verification(handles[2].external_id)
    node.advance(1)
    statuses = await paced.poll(handles)
    assert [_reason(s) for s in statuses] == ["succeeded", "exit_200", "input_digest_mismatch"]
    assert statuses[1].failure is not None
    assert statuses[1].failure.exit_code == 200
    # one command per poll, the records read; no squeue, no sacct
    assert _programs(node) == ["records", "records"]
    # settled jobs are not read again
    assert _reason((await paced.poll(handles))[0]) == "succeeded"
    assert len(node.calls) == 2


async def test_a_pending_job_reads_running_from_its_start_record(
    paced: SlurmExecutionBackend, node: FakeLoginNode
) -> None:
    node.start_jobs = False
    (handle,) = await _submit(paced, 1)
    node.calls.clear()
    assert (await paced.poll([handle]))[0].state is TaskState.PENDING
    node.start(handle.external_id)
    assert (await paced.poll([handle]))[0].state is TaskState.RUNNING
    assert _programs(node) == ["records", "records"]


async def test_squeue_is_asked_at_most_once_per_queue_interval(
    paced: SlurmExecutionBackend, node: FakeLoginNode
) -> None:
    handles = await _submit(paced, 5)
    node.calls.clear()
    reasons = []
    for tick in range(1, 301):  # a poll every second for five minutes
        node.advance(1)
        if tick == 10:  # the node dies: the job writes no record; only squeue can tell
            node.end(handles[0].external_id, "NODE_FAIL", "0:0")
        reasons.append(_reason((await paced.poll(handles))[0]))
    queries = [i for i, call in enumerate(node.calls) if "squeue" in call]
    # at t=120, 180, 240 and 300: within one a minute with one kept for the run's closing
    # listing, so the first comes after two intervals
    assert len(queries) == 300 // INTERVAL - 1
    assert _programs(node).count("records") >= 300
    # the dead job is noticed at the first query after it died, not before
    assert reasons[:119] == ["running"] * 119
    assert reasons[119] == "job_failed"
    assert "sacct" not in _programs(node)  # squeue still showed it


async def test_a_handle_never_seen_is_asked_about_at_once_then_paced(
    paced: SlurmExecutionBackend, node: FakeLoginNode, tmp_path: Path
) -> None:
    handles = await _submit(paced, 2)
    node.end(handles[1].external_id, "CANCELLED by 0", "0:0")  # cancelled before it started
    resumed = _backend(node, tmp_path / "data")  # a later run's backend: it knows nothing
    node.calls.clear()
    statuses = await resumed.poll(handles)
    assert [_reason(s) for s in statuses] == ["running", "cancelled"]
    assert _programs(node) == ["records", "squeue"]
    node.advance(INTERVAL - 1)
    await resumed.poll(handles[:1])
    assert _programs(node).count("squeue") == 1


async def test_a_late_record_is_awaited_not_read_as_sacct_says(
    paced: SlurmExecutionBackend, node: FakeLoginNode
) -> None:
    (handle,) = await _submit(paced, 1)
    # The job exited 200 and wrote its record, which the filesystem does not show yet.
    node.end(handle.external_id, "FAILED", "72:0", raw=200 << 8)
    node.advance(2 * INTERVAL)  # a run's first queue query comes after two intervals
    node.calls.clear()
    for _ in range(10):
        status = (await paced.poll([handle]))[0]
        assert status.state is TaskState.RUNNING  # never exit_72, never container_missing
        node.advance(2)
    assert "sacct" not in _programs(node)
    node.write_record(handle.external_id, 200)  # visible now
    status = (await paced.poll([handle]))[0]
    assert status.failure is not None
    assert (status.failure.reason, status.failure.exit_code) == ("exit_200", 200)
    assert _programs(node).count("squeue") == 1


async def test_a_job_gone_from_squeue_awaits_its_record_then_accounting_decides(
    paced: SlurmExecutionBackend, node: FakeLoginNode
) -> None:
    handles = await _submit(paced, 2)
    node.finish(handles[0].external_id, 3, record=False)  # its record never shows
    node.finish(handles[1].external_id, 0, record=False)
    node.advance(node.min_job_age + 1)  # past MinJobAge: squeue forgot them
    node.calls.clear()
    assert {s.state for s in await paced.poll(handles)} == {TaskState.RUNNING}
    # sacct was asked once: the jobs ended normally, so their records are due
    assert _programs(node) == ["records", "squeue", "records", "sacct"]
    node.advance(TIMEOUT - 1)
    assert {s.state for s in await paced.poll(handles)} == {TaskState.RUNNING}
    node.advance(1)
    statuses = await paced.poll(handles)
    assert [_reason(s) for s in statuses] == ["exit_3", "succeeded"]
    assert _programs(node).count("sacct") == 2
    assert _programs(node).count("squeue") == 1


async def test_a_job_neither_squeue_nor_sacct_knows_is_missing_at_once(
    paced: SlurmExecutionBackend, node: FakeLoginNode, tmp_path: Path
) -> None:
    (handle,) = await _submit(paced, 1)
    node.forget(handle.external_id)  # purged from the controller and the database
    fresh = _backend(node, tmp_path / "data")
    (status,) = await fresh.poll([handle])
    assert _reason(status) == "container_missing"


async def test_a_signalled_record_leaves_the_reason_to_accounting_not_the_queue(
    paced: SlurmExecutionBackend, node: FakeLoginNode
) -> None:
    handles = await _submit(paced, 2)
    # The time limit: Slurm signalled the scripts, which stopped the containers and recorded.
    for handle in handles:
        node.write_record(handle.external_id, 143, signalled=True)
        node.expire(handle.external_id)
    node.unaccounted.add(node.job(handles[1].external_id).job_id)  # slurmdbd lags for one
    node.advance(1)
    node.calls.clear()
    first, second = await paced.poll(handles)
    assert _reason(first) == "timeout"  # not exit_143
    assert second.state is TaskState.RUNNING  # accounting does not know yet
    assert _programs(node) == ["records", "sacct"]  # no squeue
    node.advance(2 * INTERVAL)  # a run's first queue query comes after two intervals
    (second,) = await paced.poll(handles[1:])
    assert _reason(second) == "timeout"  # the paced queue query said so


async def test_a_cancel_by_another_instance_is_read_from_its_record(
    paced: SlurmExecutionBackend, node: FakeLoginNode, tmp_path: Path
) -> None:
    node.start_jobs = False
    (handle,) = await _submit(paced, 1)
    assert (await paced.poll([handle]))[0].state is TaskState.PENDING
    await _backend(node, tmp_path / "data").cancel(handle)  # `altar cancel`: another process
    node.calls.clear()
    node.advance(1)
    (status,) = await paced.poll([handle])
    assert _reason(status) == "cancelled"  # a pending job writes no record of its own
    assert _programs(node) == ["records"]


async def test_records_need_no_controller(
    paced: SlurmExecutionBackend, node: FakeLoginNode
) -> None:
    (handle,) = await _submit(paced, 1)
    node.finish(handle.external_id, 4)
    node.available = False
    node.accounting_available = False
    node.advance(INTERVAL * 2)
    assert _reason((await paced.poll([handle]))[0]) == "exit_4"


async def test_a_keyed_job_adopted_by_submit_is_followed_without_an_extra_query(
    paced: SlurmExecutionBackend, node: FakeLoginNode
) -> None:
    spec = replace(SPEC, labels=submission_labels("run-1", "a", 1))
    first = await paced.submit(spec)
    node.calls.clear()
    adopted = await paced.submit(spec)  # the runner's resubmit after an in-doubt one
    assert adopted.external_id == first.external_id
    await paced.poll([adopted])
    assert _programs(node).count("squeue") == 1  # the adoption lookup, not the poll


@pytest.mark.parametrize(
    ("option", "value"), [("queue_interval_s", -1), ("exit_read_timeout_s", "30")]
)
async def test_options_are_checked(tmp_path: Path, option: str, value: object) -> None:
    with pytest.raises(ValueError, match=option):
        SlurmExecutionBackend(data_root=tmp_path, runtime=FakeLoginNode(), **{option: value})  # type: ignore[arg-type]


async def test_the_backend_caps_the_runners_backoff() -> None:
    assert SlurmExecutionBackend.max_poll_interval_s is not None
    assert SlurmExecutionBackend.max_poll_interval_s <= 2.0
