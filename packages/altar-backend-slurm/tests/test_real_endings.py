"""Slurm's own endings and its submit limits, on the real Slurm of ``scripts/services``.

That Slurm preempts by partition priority (``PreemptType=preempt/partition_prio``,
``PreemptMode=CANCEL``): a job in partition ``high`` that needs the node's CPUs cancels jobs of
the default partition, which end PREEMPTED. ``scontrol update ... state=down`` ends the jobs
on the node (NODE_FAIL). QOS ``limited`` allows 20 live jobs per user
(``AccountingStorageEnforce=limits,qos``).

The cluster is shared with other tests. A job to preempt or to lose its node asks for all the
node's CPUs, so once it runs nothing else does: the preemptor and the downed node end only it.
Setting the node down still stalls everyone's pending jobs for a moment, and a whole-node job
may wait long behind a stream of small ones, so those tests are ``serial`` (``scripts/test``
runs them alone, after the parallel run).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from altar.backends.slurm import SlurmExecutionBackend
from altar.execution import (
    ContainerTaskSpec,
    ProviderLimitError,
    ResourceRequest,
    TaskHandle,
    TaskState,
    TaskStatus,
)
from altar.execution.labels import submission_labels

from .queue_filling import LOW_PRIORITY, QUEUE_FILLING

pytestmark = [pytest.mark.slurm, pytest.mark.docker]

WAIT_S = 300  # a whole-node job may wait behind other tests' jobs on the 2-CPU node


@dataclass(frozen=True)
class Site:
    partition: str
    high: str
    limited_qos: str
    node: str
    cpus: int


def _run(*argv: str, check: bool = True) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


@pytest.fixture
def site(slurm_cluster: dict[str, str], service_env: dict[str, str]) -> Site:
    high = service_env.get("ALTAR_TEST_SLURM_HIGH_PARTITION", "high")
    qos = service_env.get("ALTAR_TEST_SLURM_LIMITED_QOS", "limited")
    partitions = _run("sinfo", "-h", "-o", "%R").split()
    qos_names = _run("sacctmgr", "-n", "-P", "show", "qos", "format=name").split()
    if high not in partitions or qos not in qos_names:
        message = (
            f"this Slurm has no partition {high!r} or QOS {qos!r}: it runs an older "
            "scripts/services config; apply it with `scripts/services down --only slurm && "
            "scripts/services up --only slurm`"
        )
        if os.environ.get("ALTAR_REQUIRE_SERVICES") == "1":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    node, cpus = _run("sinfo", "-h", "-N", "-o", "%N %c").splitlines()[0].split()
    return Site(slurm_cluster["partition"], high, qos, node, int(cpus))


def _backend(
    data_root: Path, docker_host: str, site: Site, **options: Any
) -> SlurmExecutionBackend:
    return SlurmExecutionBackend(
        data_root=str(data_root),
        partition=site.partition,
        container_runtime="docker",
        runtime_options=["-H", docker_host],
        **options,
    )


def _spec(command: list[str], task: str, **resources: Any) -> ContainerTaskSpec:
    image = os.environ.get("ALTAR_TEST_IMAGE", "busybox:latest")
    return ContainerTaskSpec(
        kind="endings",
        image=image,
        command=command,
        labels=submission_labels(f"endings-{os.getpid()}-{time.monotonic_ns()}", task, 1),
        resources=ResourceRequest(**resources),
    )


async def _until(
    backend: SlurmExecutionBackend, handle: TaskHandle, done: Callable[[TaskStatus], bool]
) -> TaskStatus:
    deadline = time.monotonic() + WAIT_S
    while True:
        (status,) = await backend.poll([handle])
        if done(status):
            return status
        assert time.monotonic() < deadline, f"gave up waiting; last {status}"
        await asyncio.sleep(0.5)


def _containers(docker_host: str, token: str) -> str:
    return _run("docker", "-H", docker_host, "ps", "-a", "-q", "--filter", f"name=altar-{token}")


def _node_ready(site: Site) -> bool:
    state = _run("sinfo", "-h", "-N", "-n", site.node, "-o", "%T", check=False)
    return state.split("\n")[0].rstrip("*") in ("idle", "mixed", "allocated", "completing")


def _resume(site: Site) -> None:
    # ReturnToService=2 may have brought it back already ("Invalid node state specified").
    _run("scontrol", "update", f"nodename={site.node}", "state=resume", check=False)
    deadline = time.monotonic() + 60
    while not _node_ready(site):
        assert time.monotonic() < deadline, "the node did not come back"
        time.sleep(0.5)


def _preempt(site: Site) -> str:
    """A one-CPU job in the high partition: it needs the CPUs the node's one job holds."""
    return _run(
        "sbatch", "--parsable", f"--partition={site.high}", "--cpus-per-task=1",
        "--no-requeue", "--job-name=altar-test-preemptor", "--output=/dev/null",
        "--wrap", "sleep 1",
    ).split(";")[0]  # fmt: skip


@pytest.mark.serial
@pytest.mark.asyncio
async def test_a_job_preempted_by_a_higher_tier_job_is_a_provider_ending(
    tmp_path: Path, docker_host: str, site: Site
) -> None:
    backend = _backend(tmp_path / "data", docker_host, site)
    handle = await backend.submit(_spec(["sleep", "300"], "victim", cpu=site.cpus))
    await _until(backend, handle, lambda s: s.state is TaskState.RUNNING)
    preemptor = _preempt(site)
    try:
        status = await _until(backend, handle, lambda s: s.state.is_terminal)
    finally:
        _run("scancel", preemptor, check=False)
    failure = status.failure
    assert failure is not None, status
    assert (status.state, failure.reason, failure.provider_ending) == (
        TaskState.FAILED,
        "job_failed",
        "preempted",
    ), failure
    assert failure.exit_code is None
    assert not failure.deterministic
    assert failure.detail is not None
    assert "Slurm state PREEMPTED" in failure.detail
    assert f"node {site.node}" in failure.detail
    token = handle.external_id.split(":", 1)[1]
    assert _containers(docker_host, token) == ""  # the trap removed the container
    await backend.cleanup([handle])


@pytest.mark.serial
@pytest.mark.asyncio
async def test_a_job_on_a_node_set_down_is_node_lost(
    tmp_path: Path, docker_host: str, site: Site
) -> None:
    backend = _backend(tmp_path / "data", docker_host, site)
    handle = await backend.submit(_spec(["sleep", "300"], "on-lost-node", cpu=site.cpus))
    await _until(backend, handle, lambda s: s.state is TaskState.RUNNING)
    _run("scontrol", "update", f"nodename={site.node}", "state=down", "reason=altar-test")
    try:
        status = await _until(backend, handle, lambda s: s.state.is_terminal)
    finally:
        _resume(site)
    failure = status.failure
    assert failure is not None, status
    assert (failure.reason, failure.provider_ending, failure.deterministic) == (
        "job_failed",
        "node_lost",
        False,
    ), failure
    assert failure.detail is not None
    assert "Slurm state NODE_FAIL" in failure.detail
    assert f"node {site.node}" in failure.detail
    await backend.cleanup([handle])


@pytest.mark.serial
@pytest.mark.asyncio
async def test_the_qos_submit_limit_is_a_provider_limit_and_capacity_counts_it(
    tmp_path: Path, docker_host: str, site: Site
) -> None:
    backend = _backend(
        tmp_path / "data", docker_host, site, qos=site.limited_qos, max_submits_per_minute=None
    )
    assert (await backend.capacity()).pools == {"cpu": 20, "gpu": 20}
    # 20 held jobs of the same user under the QOS: they count, and never take a CPU.
    held = [
        _run(
            "sbatch", "--parsable", f"--qos={site.limited_qos}", "--hold",
            "--job-name=altar-test-held", "--output=/dev/null", "--wrap", "true",
        ).split(";")[0]
        for _ in range(20)
    ]  # fmt: skip
    try:
        with pytest.raises(ProviderLimitError) as raised:
            await backend.submit(_spec(["true"], "beyond"))
    finally:
        _run("scancel", *held, check=False)
    assert raised.value.limit == "QOSMaxSubmitJobPerUserLimit"
    assert "QOSMaxSubmitJobPerUserLimit" in str(raised.value)
    assert not list((tmp_path / "data").glob(".altar-slurm/jobs/*"))  # no litter
    handle = await backend.submit(_spec(["true"], "beyond"))  # the same key, once room is made
    assert (await backend.capacity()).pools["cpu"] == 19
    status = await _until(backend, handle, lambda s: s.state.is_terminal)
    assert status.state is TaskState.SUCCEEDED, status
    assert (await backend.capacity()).pools["cpu"] == 20
    await backend.cleanup([handle])


# -- end to end: altar run ----------------------------------------------------------------------


def _altar(*args: str) -> list[str]:
    altar = shutil.which("altar", path=os.path.dirname(sys.executable)) or "altar"
    return [altar, *args]


def _toml(value: Any) -> str:
    """A TOML value: JSON's strings, numbers and arrays are TOML's; a table is inline."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)


def _plan(path: Path, options: dict[str, Any], tasks: list[str], **top: Any) -> Path:
    lines = [f"{key} = {_toml(value)}" for key, value in top.items()]
    lines += ["", "[backend]", 'type = "slurm"', "", "[backend.options]"]
    lines += [f"{key} = {_toml(value)}" for key, value in options.items()]
    path.write_text("\n".join(lines) + "\n\n" + "\n".join(tasks))
    return path


def _task(task_id: str, command: list[str], cpu: int | None = None) -> str:
    image = os.environ.get("ALTAR_TEST_IMAGE", "busybox:latest")
    text = (
        f'[[tasks]]\nid = "{task_id}"\nkind = "e2e"\nimage = "{image}"\n'
        f"command = {json.dumps(command)}\n"
    )
    if cpu is not None:
        text += f"resources = {{ cpu = {cpu} }}\n"
    return text


def _options(data_root: Path, docker_host: str, site: Site, **more: Any) -> dict[str, Any]:
    return {
        "container_runtime": "docker",
        "runtime_options": ["-H", docker_host],
        "partition": site.partition,
        "data_root": str(data_root),
        **more,
    }


def _our_jobs(data_root: Path) -> dict[str, str]:
    """job id -> state of the jobs whose working directory is under ``data_root``."""
    text = _run("squeue", "--me", "--states=all", "-h", "-O", "JobID:|,State:|,WorkDir:|")
    jobs = {}
    for line in text.splitlines():
        job_id, state, work_dir = line.rstrip("|").split("|", 2)
        if work_dir.startswith(str(data_root)):
            jobs[job_id.strip()] = state.strip()
    return jobs


def _run_json(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stdout + done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _watch(
    run: subprocess.Popen[str], data_root: Path, act: Callable[[str], bool], times: int
) -> list[str]:
    """Call ``act(job id)`` on each new running job of ``data_root`` until it said yes
    ``times`` times; the job ids it acted on."""
    acted: list[str] = []
    seen: set[str] = set()
    deadline = time.monotonic() + 2 * WAIT_S
    while len(acted) < times:
        assert run.poll() is None, "altar run ended before the test could act"
        assert time.monotonic() < deadline, f"acted on {acted} only"
        for job_id, state in _our_jobs(data_root).items():
            if state == "RUNNING" and job_id not in seen:
                seen.add(job_id)
                time.sleep(1)  # the container is up: the task runs
                if act(job_id):
                    acted.append(job_id)
        time.sleep(0.5)
    return acted


@pytest.mark.serial
def test_a_task_preempted_twice_succeeds_on_its_third_attempt_with_no_retries(
    tmp_path: Path, docker_host: str, site: Site
) -> None:
    data_root = tmp_path / "cluster data"
    plan = _plan(
        tmp_path / "plan.toml",
        _options(data_root, docker_host, site),
        [_task("wanted", ["sh", "-c", "echo ran >> /mnt/volume/ledger; sleep 15"], site.cpus)],
        max_retries=0,
    )
    run_dir = tmp_path / "run"
    args = ["run", str(plan), "--json", "--run-dir", str(run_dir)]
    preemptors: list[str] = []

    def preempt(job_id: str) -> bool:
        preemptors.append(_preempt(site))
        return True

    with subprocess.Popen(
        _altar(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as run:
        try:
            victims = _watch(run, data_root, preempt, 2)
            stdout, stderr = run.communicate(timeout=2 * WAIT_S)
        finally:
            if run.poll() is None:
                run.kill()
            _run("scancel", *preemptors, check=False)
    result = _run_json(subprocess.CompletedProcess(args, run.returncode, stdout, stderr))
    (task,) = result["tasks"]
    assert (task["status"], task["attempts"]) == ("succeeded", 3), task
    assert task["provider_endings"] == {"preempted": 2}, task
    states = _run("sacct", "-X", "-n", "-P", "-o", "State", "-j", ",".join(victims)).split()
    assert states == ["PREEMPTED", "PREEMPTED"]
    status = _run(*_altar("status", str(run_dir)))
    assert "3 (2 preempted)" in status, status
    ran = (data_root / "ledger").read_text().splitlines()
    assert len(ran) == 3  # each attempt ran once, never two at a time


@pytest.mark.serial
def test_a_task_on_a_node_set_down_is_run_again_once_the_node_returns(
    tmp_path: Path, docker_host: str, site: Site
) -> None:
    data_root = tmp_path / "cluster data"
    plan = _plan(
        tmp_path / "plan.toml",
        _options(data_root, docker_host, site),
        [_task("on-node", ["sh", "-c", "echo ran >> /mnt/volume/ledger; sleep 10"], site.cpus)],
        max_retries=0,
    )
    run_dir = tmp_path / "run"
    args = ["run", str(plan), "--json", "--run-dir", str(run_dir)]

    def down(job_id: str) -> bool:
        _run("scontrol", "update", f"nodename={site.node}", "state=down", "reason=altar-test")
        deadline = time.monotonic() + 60
        while _our_jobs(data_root).get(job_id) in ("RUNNING", "COMPLETING"):
            assert time.monotonic() < deadline, "the job outlived its node"
            time.sleep(0.5)
        time.sleep(3)  # the runner sees the node gone before it comes back
        _resume(site)
        return True

    with subprocess.Popen(
        _altar(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as run:
        try:
            (lost,) = _watch(run, data_root, down, 1)
            stdout, stderr = run.communicate(timeout=2 * WAIT_S)
        finally:
            if run.poll() is None:
                run.kill()
            if not _node_ready(site):
                _resume(site)
    result = _run_json(subprocess.CompletedProcess(args, run.returncode, stdout, stderr))
    (task,) = result["tasks"]
    assert (task["status"], task["attempts"]) == ("succeeded", 2), task
    assert task["provider_endings"] == {"node_lost": 1}, task
    assert _run("sacct", "-X", "-n", "-P", "-o", "State", "-j", lost) == "NODE_FAIL"
    status = _run(*_altar("status", str(run_dir)))
    assert "2 (1 node lost)" in status, status


@QUEUE_FILLING
@pytest.mark.slow
def test_many_tasks_under_a_20_job_qos_all_succeed_with_no_retry_used(
    tmp_path: Path, docker_host: str, site: Site
) -> None:
    count = 300  # the size: 15 times the QOS's 20-job limit (wall time: see slurm.md)
    data_root = tmp_path / "cluster data"
    plan = _plan(
        tmp_path / "plan.toml",
        # 20 jobs always queued for the whole run: other tests' jobs go first
        _options(data_root, docker_host, site, qos=site.limited_qos, extra_directives=LOW_PRIORITY),
        [_task(f"t{i:03d}", ["true"]) for i in range(count)],
        max_retries=0,
        max_provider_retries=0,
    )
    done = subprocess.run(
        _altar("run", str(plan), "--json", "--run-dir", str(tmp_path / "run")),
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    result = _run_json(done)
    assert result["counts"] == {"succeeded": count}, result["counts"]
    assert {t["attempts"] for t in result["tasks"]} == {1}
