"""The submit window (issue 24): at most ``window`` submits in flight, so a crash leaves at most
that many attempts journaled ``submitting`` without a handle, however large the ready batch.

The kill test runs a plan in a child process against a provider that can neither list nor adopt
(each submit is an execution, appended to a record file before it answers), SIGKILLs it at
random instants of the batch submit, and resumes it.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

import pytest
from altar.execution import ContainerTaskSpec, ExecutionBackend, TaskHandle, TaskState, TaskStatus
from altar.execution.labels import LABEL_SUBMISSION, LABEL_TASK
from altar.execution.plans.plan import Plan, PlanTask
from altar.execution.run.runner import run_plan
from altar.execution.state.journal import Journal

from .runkit import FAST

CHILD = r'''
import asyncio, os, sys
from pathlib import Path
from altar.execution import ContainerTaskSpec, ExecutionBackend, TaskHandle, TaskState, TaskStatus
from altar.execution.labels import LABEL_SUBMISSION, LABEL_TASK
from altar.execution.plans.plan import Plan, PlanTask
from altar.execution.run import runner

class Forgetful(ExecutionBackend):
    """Runs what it is given; lists nothing and adopts nothing (an altar 0.3.0 provider)."""
    name = "forgetful"
    input_digest_verification = "staging"
    poll_interval_s = 0.0

    def __init__(self, record):
        self.fd = os.open(record, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self.count = 0

    async def submit(self, spec):
        task = spec.labels[LABEL_TASK]
        os.write(self.fd, (task + "\n").encode())  # accepted: it runs, whatever happens next
        await asyncio.sleep(0.0005 * (self.count % 3))
        self.count += 1
        return TaskHandle(self.name, f"{os.getpid()}-{self.count}", dict(spec.labels))

    async def poll(self, handles):
        return [TaskStatus(h, TaskState.SUCCEEDED) for h in handles]

run_dir, record, n, window = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
runner.SUBMIT_WINDOW = window
spec = lambda i: ContainerTaskSpec(kind="k", image="busybox", command=["true", str(i)])
plan = Plan("forgetful", {}, [PlanTask(f"t{i:05d}", spec(i)) for i in range(n)])
result = asyncio.run(runner.run_plan(
    plan, Forgetful(record), run_dir=run_dir, poll_interval_s=0.0, max_poll_interval_s=0.0
))
sys.exit(0 if result.ok else 1)
'''


def _child(tmp_path: Path, run_dir: Path, record: Path, n: int, window: int) -> list[str]:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    return [sys.executable, str(script), str(run_dir), str(record), str(n), str(window)]


def _executions(record: Path) -> list[str]:
    if not record.exists():
        return []
    return [line for line in record.read_text().splitlines() if line]


def _in_doubt(run_dir: Path) -> int:
    journal = Journal.load(run_dir)
    return sum(
        1
        for r in journal.tasks.values()
        for a in r.attempts
        if a.state == "submitting" and a.handle is None
    )


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_run_killed_mid_batch_leaves_at_most_the_window_in_doubt_and_runs_each_task_once(
    tmp_path, seed
):
    n, window = 1500, 8
    rng = random.Random(seed)
    at = rng.randint(n // 10, n * 9 // 10)  # executions before the SIGKILL
    run_dir, record = tmp_path / "run", tmp_path / "record"
    argv = _child(tmp_path, run_dir, record, n, window)
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120  # a hang guard, not a measurement
    while child.poll() is None and len(_executions(record)) < at:
        assert time.monotonic() < deadline, "the child never reached the kill point"
        time.sleep(0.002)
    if child.poll() is None:
        os.kill(child.pid, signal.SIGKILL)
    child.wait()
    before = _executions(record)
    assert len(before) < n, f"seed {seed}: the run ended before the kill; make it larger"
    assert _in_doubt(run_dir) <= window  # was every ready task before the window

    resumed = subprocess.run(argv, capture_output=True, timeout=300, check=False)
    assert resumed.returncode == 0, resumed.stderr.decode()[-2000:]
    runs: dict[str, int] = {}
    for task in _executions(record):
        runs[task] = runs.get(task, 0) + 1
    assert sorted(runs) == [f"t{i:05d}" for i in range(n)]  # every task ran
    twice = {task for task, count in runs.items() if count > 1}
    assert max(runs.values()) <= 2
    assert len(twice) <= window
    journal = Journal.load(run_dir)
    marked = {r.id for r in journal.tasks.values() if any(a.reexecuted for a in r.attempts)}
    assert twice <= marked  # every possible second execution is said
    assert len(marked) <= window
    assert all(r.state == "succeeded" for r in journal.tasks.values())


class Watching(ExecutionBackend):
    """Counts submits in flight and, at each submit, what a crash right then would leave."""

    name: ClassVar[str] = "watching"
    input_digest_verification: ClassVar[Any] = "staging"
    poll_interval_s: ClassVar[float] = 0.0

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.in_flight = 0
        self.most = 0
        self.most_in_doubt = 0
        self.keys: list[str] = []

    async def submit(self, spec: ContainerTaskSpec) -> TaskHandle:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        journal = Journal.load(self.run_dir)
        task = journal.tasks[spec.labels[LABEL_TASK]]
        assert task.last is not None
        assert task.last.key == spec.labels[LABEL_SUBMISSION]
        self.most_in_doubt = max(self.most_in_doubt, _in_doubt(self.run_dir))
        self.keys.append(spec.labels[LABEL_SUBMISSION])
        await asyncio.sleep(0.001)
        self.in_flight -= 1
        return TaskHandle(self.name, str(len(self.keys)), dict(spec.labels))

    async def poll(self, handles: list[TaskHandle]) -> list[TaskStatus]:
        return [TaskStatus(h, TaskState.SUCCEEDED) for h in handles]


@pytest.mark.asyncio
async def test_submits_stay_within_the_window_and_each_key_is_durable_before_its_submit(
    tmp_path, monkeypatch
):
    from altar.execution.run import runner

    monkeypatch.setattr(runner, "SUBMIT_WINDOW", 5)
    spec = ContainerTaskSpec(kind="k", image="busybox", command=["true"])
    plan = Plan("watching", {}, [PlanTask(f"t{i}", spec) for i in range(60)])
    backend = Watching(tmp_path / "run")
    fsyncs = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real(fd))[1])
    result = await run_plan(plan, backend, run_dir=tmp_path / "run", **FAST)
    assert result.ok
    assert len(set(backend.keys)) == 60
    assert backend.most == 5  # the window is used, and never exceeded
    assert backend.most_in_doubt <= 5
    # intents and handles are written per group, not per task (two each would be 240)
    assert len(fsyncs) < 120, len(fsyncs)
    lines = (tmp_path / "run" / "journal.log").read_text().splitlines()
    assert all(json.loads(line)["task"] for line in lines)


class Gathering(ExecutionBackend):
    """Adopts by key and answers submits in gathered batches: it opens a wider window."""

    name: ClassVar[str] = "gathering"
    input_digest_verification: ClassVar[Any] = "staging"
    poll_interval_s: ClassVar[float] = 0.0
    adopts_submissions: ClassVar[bool] = True
    submit_window: ClassVar[int | None] = 40

    def __init__(self) -> None:
        self.in_flight = 0
        self.most = 0

    async def submit(self, spec: ContainerTaskSpec) -> TaskHandle:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        await asyncio.sleep(0.01)  # the batch gathers while the submits wait
        self.in_flight -= 1
        return TaskHandle(self.name, spec.labels[LABEL_SUBMISSION], dict(spec.labels))

    async def poll(self, handles: list[TaskHandle]) -> list[TaskStatus]:
        return [TaskStatus(h, TaskState.SUCCEEDED) for h in handles]


class NotAdopting(Gathering):
    """Asks for the same wide window but cannot adopt: an in-doubt submit may run twice."""

    name: ClassVar[str] = "not-adopting"
    adopts_submissions: ClassVar[bool] = False


@pytest.mark.asyncio
@pytest.mark.parametrize(("backend_type", "most"), [(Gathering, 40), (NotAdopting, 5)])
async def test_a_backend_that_adopts_by_key_opens_its_own_window_and_no_other(
    tmp_path, monkeypatch, backend_type, most
):
    from altar.execution.run import runner

    monkeypatch.setattr(runner, "SUBMIT_WINDOW", 5)
    spec = ContainerTaskSpec(kind="k", image="busybox", command=["true"])
    plan = Plan(backend_type.name, {}, [PlanTask(f"t{i}", spec) for i in range(100)])
    backend = backend_type()
    result = await run_plan(plan, backend, run_dir=tmp_path / "run", **FAST)
    assert result.ok
    assert backend.most == most  # the backend's window, used and never exceeded


def test_submit_window_honours_a_backend_window_only_with_adoption():
    from altar.execution.backend import submit_window

    assert submit_window(Gathering(), 64) == 40
    assert submit_window(NotAdopting(), 64) == 64
    assert submit_window(Watching(Path("unused")), 64) == 64  # None: the driver's own
