"""Submit limits as backpressure, capacity from the site's limits, the submit pace, and Slurm's
own endings through the backend (on the fake login node; sbatch texts as 22.05 printed them
on the test machine's QOS with ``MaxSubmitJobsPerUser=20``)."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
from altar.backends.slurm import SlurmExecutionBackend
from altar.backends.slurm.commands import submit_limit
from altar.backends.slurm.fake import FakeLoginNode
from altar.backends.slurm.limits import SubmitPace, parse_limits
from altar.execution import (
    BackendUnavailableError,
    Capacity,
    ContainerTaskSpec,
    ProviderLimitError,
    TaskState,
    UnsupportedCapabilityError,
)
from altar.execution.labels import submission_labels

SPEC = ContainerTaskSpec(kind="t", image="busybox:latest", command=["true"], labels={"k": "v"})
POLICY = (
    "sbatch: error: Batch job submission failed: Job violates accounting/QOS policy "
    "(job submit limit, user's size and/or time limits)\n"
)


def _keyed(task: str) -> ContainerTaskSpec:
    return replace(SPEC, labels=submission_labels("run-1", task, 1))


def _jobs_dirs(backend: SlurmExecutionBackend) -> list[str]:
    try:
        return sorted(os.listdir(backend.scratch))
    except FileNotFoundError:
        return []


# -- what sbatch's refusals mean ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("stderr", "limit"),
    [
        (f"sbatch: error: QOSMaxSubmitJobPerUserLimit\n{POLICY}", "QOSMaxSubmitJobPerUserLimit"),
        (f"sbatch: error: AssocMaxSubmitJobLimit\n{POLICY}", "AssocMaxSubmitJobLimit"),
        (f"sbatch: error: QOSGrpSubmitJobsLimit\n{POLICY}", "QOSGrpSubmitJobsLimit"),
        (
            "sbatch: error: Slurm temporarily unable to accept job, sleeping and retrying.\n"
            "sbatch: error: Batch job submission failed: Resource temporarily unavailable\n",
            "MaxJobCount",
        ),
        (
            "sbatch: error: Batch job submission failed: Resource temporarily unavailable\n",
            "MaxJobCount",
        ),
    ],
)
def test_refusals_for_now_are_provider_limits(stderr: str, limit: str) -> None:
    error = submit_limit(stderr)
    assert isinstance(error, ProviderLimitError)
    assert error.limit == limit
    assert "\n" not in str(error)


@pytest.mark.parametrize(
    "stderr",
    [
        # a QOS MaxWall with DenyOnLimit, as 22.05 refuses it: never passes for this job
        f"sbatch: error: QOSMaxWallDurationPerJobLimit\n{POLICY}",
        "sbatch: error: Batch job submission failed: Invalid qos specification\n",
        "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation\n",
        POLICY,  # unnamed, and no submit limit is known to apply
    ],
)
def test_other_refusals_are_not_provider_limits(stderr: str) -> None:
    assert submit_limit(stderr) is None


def test_an_unnamed_policy_refusal_is_a_limit_where_a_submit_limit_applies() -> None:
    error = submit_limit(POLICY, submit_limited=True)
    assert isinstance(error, ProviderLimitError)


@pytest.mark.asyncio
async def test_a_submit_beyond_the_qos_limit_is_held_back_not_failed(
    backend: SlurmExecutionBackend, node: FakeLoginNode
) -> None:
    node.max_submit_jobs = 2
    for task in ("a", "b"):
        await backend.submit(_keyed(task))
    before = _jobs_dirs(backend)
    with pytest.raises(ProviderLimitError) as raised:
        await backend.submit(_keyed("c"))
    assert raised.value.limit == "QOSMaxSubmitJobPerUserLimit"
    assert len(node.jobs) == 2
    assert _jobs_dirs(backend) == before  # the refused job left no directory
    node.finish(1, 0)
    handle = await backend.submit(_keyed("c"))  # once a job ended, the same key passes
    assert handle.external_id.startswith("3:")


@pytest.mark.asyncio
async def test_a_permanent_policy_refusal_stays_a_refusal(
    backend: SlurmExecutionBackend, node: FakeLoginNode
) -> None:
    node.refuse_next = f"sbatch: error: QOSMaxWallDurationPerJobLimit\n{POLICY}"
    with pytest.raises(UnsupportedCapabilityError) as raised:
        await backend.submit(_keyed("a"))
    assert not isinstance(raised.value, BackendUnavailableError)
    assert "QOSMaxWallDurationPerJobLimit" in str(raised.value)


@pytest.mark.asyncio
async def test_a_socket_timeout_at_sbatch_is_an_outage_and_the_same_key_adopts_the_job(
    backend: SlurmExecutionBackend, node: FakeLoginNode
) -> None:
    node.timeout_after_sbatch = True
    with pytest.raises(BackendUnavailableError) as raised:
        await backend.submit(_keyed("a"))
    assert not isinstance(raised.value, ProviderLimitError)
    assert len(node.jobs) == 1  # the job exists although sbatch said it timed out
    handle = await backend.submit(_keyed("a"))
    assert len(node.jobs) == 1
    assert handle.external_id.startswith("1:")
    node.finish(1, 0)
    (status,) = await backend.poll([handle])
    assert status.state is TaskState.SUCCEEDED


# -- capacity from the site's limits -----------------------------------------------------------


@pytest.mark.asyncio
async def test_capacity_is_what_the_limit_leaves_counted_from_submits_and_polls(
    backend: SlurmExecutionBackend, node: FakeLoginNode
) -> None:
    node.max_submit_jobs = 3
    assert await backend.capacity() == Capacity({"cpu": 3, "gpu": 3, "a100": 3})
    handles = [await backend.submit(_keyed(t)) for t in ("a", "b")]
    assert (await backend.capacity()).pools["cpu"] == 1
    node.finish(1, 0)
    assert (await backend.capacity()).pools["cpu"] == 1  # not polled yet: still counted
    await backend.poll(handles)
    assert (await backend.capacity()).pools["cpu"] == 2
    limit_queries = [c for c in node.calls if c[:2] == ["sh", "-c"] and "sacctmgr" in c[2]]
    timed = [c for c in node.calls if c[0] == "timeout" and "sacctmgr" in " ".join(c)]
    assert len(limit_queries) + len(timed) == 1  # read once, at the first ask


@pytest.mark.asyncio
async def test_capacity_is_unknown_where_no_limit_applies(
    backend: SlurmExecutionBackend, node: FakeLoginNode
) -> None:
    assert await backend.capacity() == Capacity()
    node.accounting_available = False
    fresh = SlurmExecutionBackend(data_root=backend.data_root, runtime=node)
    assert await fresh.capacity() == Capacity()


def test_limits_pick_the_smallest_that_applies() -> None:
    limits = parse_limits(
        "AccountingStorageEnforce=associations,limits,qos\nClusterName=c\n---\nlab\n---\n"
        "c|lab|||50||normal,limited\n"
        "c|lab|gpu|8|||normal\n"
        "c|other||2|||normal\n"
        "x|lab||1|||normal\n"
        "---\nnormal|||\nlimited|20||\n"
    )
    assert limits is not None
    assert limits.submit_limit(account=None, partition=None, qos=None) == (50, "association lab")
    assert limits.submit_limit(account=None, partition=None, qos="limited") == (20, "QOS limited")
    assert limits.submit_limit(account=None, partition="gpu", qos=None) == (8, "association lab")
    assert limits.submit_limit(account="other", partition=None, qos=None) == (
        2,
        "association other",
    )
    unenforced = parse_limits(
        "AccountingStorageEnforce=none\nClusterName=c\n---\nlab\n---\nc|lab||5|||normal\n"
        "---\nnormal|||\n"
    )
    assert unenforced is not None
    assert unenforced.submit_limit(account=None, partition=None, qos=None) is None
    assert parse_limits("AccountingStorageEnforce=limits\n") is None


# -- the submit pace -----------------------------------------------------------------------------


def test_the_pace_allows_n_submits_in_any_minute() -> None:
    pace = SubmitPace(3)
    assert [pace.reserve(0.0) for _ in range(7)] == [0.0, 0.0, 0.0, 60.0, 60.0, 60.0, 120.0]
    later = SubmitPace(2)
    assert later.reserve(0.0) == 0.0
    assert later.reserve(30.0) == 30.0
    assert later.reserve(31.0) == 60.0  # 0 left the window
    assert later.reserve(100.0) == 100.0  # 30 left it too; 60 stays: two in (40, 100]
    assert SubmitPace(None).reserve(5.0) == 5.0


@pytest.mark.parametrize("value", [0, -1, True])
def test_the_pace_must_be_a_positive_count(value: int) -> None:
    with pytest.raises(ValueError, match="max_submits_per_minute"):
        SlurmExecutionBackend(data_root="/tmp/x", max_submits_per_minute=value)


@pytest.mark.asyncio
async def test_submits_wait_for_their_slot(backend: SlurmExecutionBackend) -> None:
    import asyncio

    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    backend.pace = SubmitPace(2, clock=lambda: 1000.0, sleep=sleep)
    backend.arrays = False  # one sbatch, one slot each
    await asyncio.gather(*(backend.submit(_keyed(t)) for t in ("a", "b", "c")))
    assert slept == [60.0]


@pytest.mark.asyncio
async def test_an_array_uses_one_pacing_slot(
    backend: SlurmExecutionBackend, node: FakeLoginNode
) -> None:
    import asyncio

    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    backend.pace = SubmitPace(2, clock=lambda: 1000.0, sleep=sleep)
    handles = await asyncio.gather(*(backend.submit(_keyed(t)) for t in ("a", "b", "c", "d")))
    assert slept == []  # one sbatch for the four
    assert {h.external_id.split("_", 1)[0] for h in handles} == {"1"}
    assert len(node.elements(1)) == 4


# -- Slurm's own endings through the backend ------------------------------------------------------


@pytest.mark.parametrize(
    ("end", "ending", "words"),
    [
        ("preempt", "preempted", "preempted on node localhost"),
        ("node_fail", "node_lost", "node localhost failed under it (Slurm state NODE_FAIL)"),
        ("boot_fail", "node_lost", "node localhost failed to boot (Slurm state BOOT_FAIL)"),
    ],
)
@pytest.mark.asyncio
async def test_slurms_endings_reach_the_runner_as_provider_endings(
    backend: SlurmExecutionBackend, node: FakeLoginNode, end: str, ending: str, words: str
) -> None:
    handle = await backend.submit(_keyed("a"))
    if end == "preempt":
        node.preempt(handle.external_id, record=143)  # the trap's record: Slurm's doing
    else:
        node.node_fail(handle.external_id, boot=end == "boot_fail")
    (status,) = await backend.poll([handle])
    failure = status.failure
    assert failure is not None
    assert (status.state, failure.reason, failure.provider_ending) == (
        TaskState.FAILED,
        "job_failed",
        ending,
    )
    assert failure.detail is not None
    assert words in failure.detail
    node.advance(10_000)  # gone from squeue: sacct still says it
    (status,) = await backend.poll([handle])
    assert status.failure is not None
    assert status.failure.provider_ending == ending


@pytest.mark.asyncio
async def test_a_job_slurm_requeues_is_one_attempt_that_waits_again(
    backend: SlurmExecutionBackend, node: FakeLoginNode
) -> None:
    handle = await backend.submit(_keyed("a"))
    seen = []
    for state in ("RUNNING", "REQUEUED", "PENDING", "RUNNING"):
        node.job(handle.external_id).state = state
        (status,) = await backend.poll([handle])
        seen.append((status.state, status.failure))
    node.finish(handle.external_id, 0)
    (status,) = await backend.poll([handle])
    assert seen == [
        (TaskState.RUNNING, None),
        (TaskState.PENDING, None),
        (TaskState.PENDING, None),
        (TaskState.RUNNING, None),
    ]
    assert status.state is TaskState.SUCCEEDED
    assert len(node.jobs) == 1
