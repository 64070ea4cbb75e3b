"""The fake's job arrays behave as the test cluster's Slurm 22.05 does.

The first tests run the same array commands (the backend's own ``arrays``/``commands``
functions) against the fake and against the real Slurm of ``scripts/services``, with
``--hold`` so that no element ever runs on the shared node, and assert the same answers. The
rest drive the backend through the fake as ``test_real_arrays.py`` drives it through Slurm.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from altar.backends.slurm import SlurmExecutionBackend, arrays, commands
from altar.backends.slurm.arrays import SUBMIT_ARRAY_PROGRAM
from altar.backends.slurm.commands import SUBMIT_PROGRAM
from altar.backends.slurm.fake import FakeLoginNode
from altar.backends.slurm.runtime import CommandResult, LoginNode
from altar.backends.slurm.sdk_runtime import LocalLoginNode
from altar.execution import ContainerTaskSpec, ProviderLimitError, ResourceRequest
from altar.execution.labels import submission_labels
from altar.execution.plans.plan import plan_from_specs
from altar.execution.run.runner import run_plan


@pytest.fixture(params=["fake", "slurm"])
def slurm(request: pytest.FixtureRequest) -> Iterator[tuple[LoginNode, str | None]]:
    """(a login node, the QOS with MaxSubmitJobsPerUser=20 on it)."""
    if request.param == "fake":
        fake = FakeLoginNode()
        fake.max_array_size = 501  # as scripts/services configures the test cluster
        fake.max_submit_jobs = 20
        yield fake, None
        return
    request.getfixturevalue("slurm_cluster")
    node = LocalLoginNode()
    submitted: list[str] = []
    request.node.stash[_SUBMITTED] = submitted
    yield node, "limited"
    for job_id in submitted:  # never leave held jobs on the shared node
        commands.cancel(node, job_id)


_SUBMITTED = pytest.StashKey[list[str]]()


def _submit(
    request: pytest.FixtureRequest,
    node: LoginNode,
    root: Path,
    size: int,
    *,
    qos: str | None = None,
) -> CommandResult:
    """One held array of ``size`` trivial tasks, written and submitted as the backend does."""
    jobs = root / "jobs"
    tasks = [arrays.ArrayTask(f"t{i:04d}", "#!/bin/sh\ntrue\n", "altar/1;x") for i in range(size)]
    name = arrays.array_name([t.token for t in tasks])
    array_dir = root / "arrays" / name
    shared: list[tuple[str, str | None]] = [("--hold", None), ("--mem", "16M")]
    if qos is not None:
        shared.append(("--qos", qos))
    script = arrays.array_script(
        name=name, array_dir=str(array_dir), jobs_dir=str(jobs), shared=shared, size=size
    )
    arrays.write_tasks(node, str(jobs), name, tasks)
    result = arrays.submit_array(node, str(array_dir), tasks, script)
    if result.ok and _SUBMITTED in request.node.stash:
        request.node.stash[_SUBMITTED].append(result.stdout.strip())
    return result


def _rows(node: LoginNode, job_ids: list[str]) -> dict[str, str]:
    return {r.job_id: r.state for r in commands.queue(node, job_ids=job_ids)}


def _eventually_gone(node: LoginNode, job_id: str) -> None:
    deadline = time.monotonic() + 10
    while job_id in _rows(node, [job_id]):
        assert time.monotonic() < deadline, f"{job_id} still listed"
        time.sleep(0.5)


def test_elements_are_id_index_each_with_its_row_and_cancelled_one_by_one(
    request: pytest.FixtureRequest, slurm: tuple[LoginNode, str | None], tmp_path: Path
) -> None:
    node, _ = slurm
    result = _submit(request, node, tmp_path, 4)
    assert result.ok, result.stderr
    array_id = result.stdout.strip()
    assert array_id.isdigit()
    elements = [f"{array_id}_{i}" for i in range(4)]
    # squeue --array: one row per element, ID_INDEX; the array's id names them all
    assert _rows(node, [array_id]) == {e: "PENDING" for e in elements}
    assert _rows(node, [elements[1]]) == {elements[1]: "PENDING"}
    # without --array, the pending elements share one row
    plain = node.run(
        ["squeue", "--noheader", "--states=all", "--Format=JobArrayID:|", f"--jobs={array_id}"]
    )
    assert plain.stdout.split() == [f"{array_id}_[0-3]|"]
    # an index the array does not have: no row, and no error
    assert _rows(node, [f"{array_id}_9"]) == {}
    assert commands.cancel(node, f"{array_id}_9")
    # scancel ID_INDEX cancels that element only; a pending element leaves no row anywhere
    assert commands.cancel(node, elements[2])
    _eventually_gone(node, elements[2])
    assert _rows(node, [array_id]) == {e: "PENDING" for e in elements if e != elements[2]}
    assert [r for r in commands.accounting(node, job_ids=[elements[2]])] == []
    # scancel ID cancels every element: they stay listed, CANCELLED, and accounting keeps
    # the ones that never started in one row
    assert commands.cancel(node, array_id)
    rest = [e for e in elements if e != elements[2]]
    deadline = time.monotonic() + 10
    while set(_rows(node, [array_id]).values()) != {"CANCELLED"}:
        assert time.monotonic() < deadline, _rows(node, [array_id])
        time.sleep(0.5)
    assert sorted(_rows(node, [array_id])) == rest
    want = [(f"{array_id}_[0-1,3]", "CANCELLED")]
    while True:  # slurmdbd lags the controller by a moment
        rows = commands.accounting(node, job_ids=[array_id])
        if [(r.job_id, r.state.split()[0]) for r in rows] == want or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert [(r.job_id, r.state.split()[0]) for r in rows] == want


def test_an_array_past_max_array_size_is_refused(
    request: pytest.FixtureRequest, slurm: tuple[LoginNode, str | None], tmp_path: Path
) -> None:
    node, _ = slurm
    size = arrays.max_array_size(node, timeout_s=20)
    assert size == 501
    result = _submit(request, node, tmp_path, size + 1)  # indices 0..501: 501 is one too many
    assert not result.ok
    assert "Invalid job array specification" in result.stderr


def test_the_submit_limit_counts_every_element(
    request: pytest.FixtureRequest, slurm: tuple[LoginNode, str | None], tmp_path: Path
) -> None:
    node, qos = slurm
    result = _submit(request, node, tmp_path, 21, qos=qos)  # 21 jobs under a limit of 20
    assert not result.ok
    limit = commands.submit_limit(result.stderr)
    assert isinstance(limit, ProviderLimitError)
    assert limit.limit == "QOSMaxSubmitJobPerUserLimit"


def test_the_fake_takes_up_to_the_limit_in_elements_then_refuses_one_more(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    node = FakeLoginNode()
    node.max_submit_jobs = 20
    assert _submit(request, node, tmp_path / "a", 20).ok
    refused = _submit(request, node, tmp_path / "b", 1)
    assert commands.submit_limit(refused.stderr) is not None
    assert commands.cancel(node, "1_3")  # one element less: room for one
    assert _submit(request, node, tmp_path / "c", 1).ok


def test_a_throttled_array_runs_at_most_m_elements_at_once(tmp_path: Path) -> None:
    node = FakeLoginNode()
    tasks = [arrays.ArrayTask(f"t{i}", "#!/bin/sh\ntrue\n", "altar/1;x") for i in range(4)]
    name = arrays.array_name([t.token for t in tasks])
    script = arrays.array_script(
        name=name,
        array_dir=str(tmp_path / "a"),
        jobs_dir=str(tmp_path / "jobs"),
        shared=[],
        size=4,
    ).replace("--array=0-3", "--array=0-3%2")
    arrays.write_tasks(node, str(tmp_path / "jobs"), name, tasks)
    assert arrays.submit_array(node, str(tmp_path / "a"), tasks, script).ok
    assert _rows(node, ["1"]) == {
        "1_0": "RUNNING",
        "1_1": "RUNNING",
        "1_2": "PENDING",
        "1_3": "PENDING",
    }
    reasons = node.run(["squeue", "--noheader", "--array", "--Format=JobArrayID:|,Reason:|"])
    assert "1_2|JobArrayTaskLimit|" in reasons.stdout.splitlines()
    node.finish("1_0", 0)
    assert _rows(node, ["1"])["1_2"] == "RUNNING"  # the next element starts as one ends
    # each element's records are its own task's, in that task's directory
    assert (tmp_path / "jobs" / "t2" / "started").is_file()
    assert (tmp_path / "jobs" / "t0" / "exit-status").is_file()
    assert [r.job_id for r in commands.accounting(node, job_ids=["1_0"])] == [
        "1_0",
        "1_0.batch",
        "1_0.extern",
    ]


# -- the backend on the fake, as test_real_arrays.py on Slurm -------------------------------------


def _spec(run: str, task: str) -> ContainerTaskSpec:
    return ContainerTaskSpec(
        kind="arrays",
        image="busybox:latest",
        command=["true"],
        labels=submission_labels(run, task, 1),
        resources=ResourceRequest(memory_gb=0.125),
    )


@pytest.mark.asyncio
async def test_an_array_of_100_reads_a_failure_an_oom_and_a_cancel_exactly(
    tmp_path: Path,
) -> None:
    node = FakeLoginNode()
    backend = SlurmExecutionBackend(
        data_root=tmp_path / "data", container_runtime="docker", runtime=node, cancel_wait_s=0
    )
    ids = [f"t{i:03d}" for i in range(100)]
    specs = [_spec("run-a", t) for t in ids]
    handles = list(await asyncio.gather(*(backend.submit(s) for s in specs)))
    jobs = [h.external_id.split(":", 1)[0] for h in handles]
    assert {j.split("_", 1)[0] for j in jobs} == {"1"}  # one array, one sbatch
    assert sorted(int(j.split("_", 1)[1]) for j in jobs) == list(range(100))
    assert sum(1 for c in node.calls if "altar-array-submit" in c) == 1
    await backend.cancel(handles[ids.index("t077")])
    for i, job_id in enumerate(jobs):
        if ids[i] == "t007":
            node.finish(job_id, 3)
        elif ids[i] == "t042":
            node.container_oom(job_id)
        elif ids[i] != "t077":
            node.finish(job_id, 0)
    statuses = dict(zip(ids, await backend.poll(handles), strict=True))
    reasons = {t: (s.failure.reason if s.failure else None) for t, s in statuses.items()}
    assert reasons["t007"] == "exit_3"
    assert reasons["t042"] == "oom_killed"
    assert reasons["t077"] == "cancelled"
    assert {r for t, r in reasons.items() if t not in ("t007", "t042", "t077")} == {None}
    again = SlurmExecutionBackend(
        data_root=tmp_path / "data", container_runtime="docker", runtime=node
    )
    adopted = await asyncio.gather(*(again.submit(s) for s in specs[:5]))
    assert [h.external_id for h in adopted] == [h.external_id for h in handles[:5]]
    assert sum(1 for c in node.calls if "altar-array-submit" in c) == 1  # nothing resubmitted
    listed = await again.list_submissions("run-a")
    assert listed is not None
    assert sorted(h.external_id for h in listed) == sorted(h.external_id for h in handles)
    await backend.cleanup(handles[:50])
    assert len(list((tmp_path / "data" / ".altar-slurm" / "arrays").iterdir())) == 1
    await backend.cleanup(handles[50:])
    assert not list((tmp_path / "data" / ".altar-slurm" / "jobs").iterdir())
    assert not list((tmp_path / "data" / ".altar-slurm" / "arrays").iterdir())


@pytest.mark.asyncio
async def test_an_array_takes_what_the_limit_leaves_and_holds_the_rest(tmp_path: Path) -> None:
    node = FakeLoginNode()
    node.max_submit_jobs = 20
    backend = SlurmExecutionBackend(
        data_root=tmp_path / "data", container_runtime="docker", runtime=node
    )
    outcomes = await asyncio.gather(
        *(backend.submit(_spec("run-l", f"t{i:02d}")) for i in range(30)),
        return_exceptions=True,
    )
    submitted = [o for o in outcomes if not isinstance(o, BaseException)]
    held = [o for o in outcomes if isinstance(o, ProviderLimitError)]
    assert (len(submitted), len(held)) == (20, 10)
    assert len(node.elements(1)) == 20  # never a refused sbatch: the array fits the limit


def _sbatches(node: FakeLoginNode) -> list[list[str]]:
    """The sbatch calls the backend made (one per single job, one per array)."""
    programs = (SUBMIT_PROGRAM, SUBMIT_ARRAY_PROGRAM)
    return [c for c in node.calls if c[:2] == ["sh", "-c"] and c[2] in programs]


@pytest.mark.asyncio
@pytest.mark.parametrize(("tasks", "sbatches"), [(120, 1), (600, 2)])
async def test_the_runner_submits_n_ready_tasks_in_arrays_of_up_to_max_array_size(
    tmp_path: Path, tasks: int, sbatches: int
) -> None:
    """The runner keeps an array's worth of submits in flight for Slurm (its submit window),
    so N ready tasks cost ceil(N / MaxArraySize) sbatch calls, not N / 64."""
    node = FakeLoginNode()
    node.max_array_size = 501  # as scripts/services configures the test cluster
    backend = SlurmExecutionBackend(
        data_root=tmp_path / "data", container_runtime="docker", runtime=node
    )
    specs = [
        ContainerTaskSpec(kind="trivial", image="busybox:latest", command=["true", str(i)])
        for i in range(tasks)
    ]
    plan = plan_from_specs(specs, backend_type="slurm")

    async def finish_running() -> None:
        while True:  # every job the fake started ends at once, as a trivial task would
            for job in list(node.jobs.values()):
                if job.state == "RUNNING":
                    node.finish(job.job_id if job.array_id is None else job.shown, 0)
            await asyncio.sleep(0.05)

    finisher = asyncio.ensure_future(finish_running())
    try:
        result = await run_plan(
            plan, backend, run_dir=tmp_path / "run", poll_interval_s=0.05, max_poll_interval_s=0.1
        )
    finally:
        finisher.cancel()
    assert result.ok, result.counts()
    calls = _sbatches(node)
    assert len(calls) == sbatches, [c[2][:20] for c in calls]  # window 64: 2 and 10
    assert len(calls) <= tasks / 100 + 1


def test_an_array_of_max_array_size_with_long_comments_is_written_in_parts(
    request: pytest.FixtureRequest, slurm: tuple[LoginNode, str | None], tmp_path: Path
) -> None:
    """501 tasks' tokens (about 150 KB with their comments) exceed one command's argument
    (MAX_ARG_STRLEN, 128 KiB): they are written in parts, then renamed whole before sbatch."""
    node, _ = slurm  # the default QOS: no submit limit
    if isinstance(node, FakeLoginNode):
        node.max_submit_jobs = None
    root = tmp_path
    comment = "altar/1;spec=" + "ab" * 32 + ";labels=" + "x%3Dy%26" * 25
    tasks = [arrays.ArrayTask(f"t{i:04d}", "#!/bin/sh\ntrue\n", comment) for i in range(501)]
    name = arrays.array_name([t.token for t in tasks])
    array_dir = root / "arrays" / name
    script = arrays.array_script(
        name=name,
        array_dir=str(array_dir),
        jobs_dir=str(root / "jobs"),
        shared=[("--hold", None), ("--mem", "16M")],
        size=len(tasks),
    )
    arrays.write_tasks(node, str(root / "jobs"), name, tasks)
    result = arrays.submit_array(node, str(array_dir), tasks, script)
    assert result.ok, result.stderr
    if _SUBMITTED in request.node.stash:
        request.node.stash[_SUBMITTED].append(result.stdout.strip())
    listed = arrays.tokens_of(node, str(array_dir))
    assert listed == [(t.token, comment) for t in tasks]
    assert len("".join(f"{t} {c}\n" for t, c in listed)) > 128 * 1024
    assert not (array_dir / "tokens.part").exists()
    found = arrays.existing(node, [str(root / "jobs" / t.token) for t in tasks])
    assert found == {str(root / "jobs" / t.token): (name, i) for i, t in enumerate(tasks)}
