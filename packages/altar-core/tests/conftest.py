"""A scripted fake provider and backend for runner, compare and CLI tests.

The provider keeps its tasks across backend instances (a "restarted" runner builds a new
backend on the same provider, as a real one would reconnect). Each poll advances every task
one step: pending -> running -> the scripted outcome. It checks what a real provider cannot
tell but our tests care about: a spec never has two live tasks at once, and every poll asks
about every live task this run knows.

:class:`AdoptingFakeBackend` behaves like a provider that keeps labels on what it creates (Docker,
Kubernetes): a submit whose ``altar.submission`` key it already holds returns that task, in
whatever state, and ``list_submissions`` returns every task still there carrying the run's label.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from altar.execution import (
    PROVIDER_ENDINGS,
    BackendUnavailableError,
    Capacity,
    ContainerTaskSpec,
    ExecutionBackend,
    PathResolver,
    ProviderLimitError,
    TaskFailure,
    TaskHandle,
    TaskLogs,
    TaskState,
    TaskStatus,
    Transfer,
    UnsupportedCapabilityError,
)
from altar.execution import registry as registry_module
from altar.execution.cli import command as cli
from altar.execution.labels import LABEL_RUN, LABEL_SUBMISSION
from altar.execution.registry import BackendRegistry
from altar.execution.transfer_progress import report


@dataclass
class FakeTask:
    id: str
    key: str
    spec: ContainerTaskSpec
    outcome: str
    steps: int = 0
    cancelled: bool = False
    removed: bool = False

    def state(self, duration: int) -> TaskState:
        if self.cancelled:
            return TaskState.FAILED
        if self.steps == 0:
            return TaskState.PENDING
        if self.steps < duration:
            return TaskState.RUNNING
        return TaskState.SUCCEEDED if self.outcome == "ok" else TaskState.FAILED


@dataclass
class FakeProvider:
    """Outcomes per task key (the spec's ``task`` label, else its kind), one per attempt."""

    script: dict[str, list[str]] = field(default_factory=dict)
    duration: int = 2
    slots: int | None = None
    root: Path | None = None
    mount_root: str = "/mnt/volume"
    tasks: dict[str, FakeTask] = field(default_factory=dict)
    submits: dict[str, int] = field(default_factory=dict)
    poll_calls: list[list[str]] = field(default_factory=list)
    stage_calls: list[list[Transfer]] = field(default_factory=list)
    collect_calls: list[list[Transfer]] = field(default_factory=list)
    cleanup_calls: list[list[str]] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    launched: dict[str, list[str]] = field(default_factory=dict)
    max_live: int = 0
    ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    unavailable_polls: int = 0
    unavailable_cancels: int = 0
    cancels_in_flight: int = 0
    max_cancels_in_flight: int = 0
    hang_submits: set[str] = field(default_factory=set)
    slow_submits: dict[str, float] = field(default_factory=dict)  # accepted at once, returns later
    in_submit: set[str] = field(default_factory=set)  # accepted, but submit has not returned
    collect_errors: list[BaseException] = field(default_factory=list)  # raised by next collects
    output_bytes: dict[str, bytes] = field(default_factory=dict)
    # staging "copies" these inputs (logical path -> bytes) in a worker thread, reporting
    # progress in stage_chunks steps stage_step_s apart, the size included unless told not to
    stage_bytes: dict[str, int] = field(default_factory=dict)
    stage_chunks: int = 10
    stage_step_s: float = 0.0
    stage_reports_size: bool = True
    stage_error: str | None = None  # raised once every input was "copied"
    adoptions: list[str] = field(default_factory=list)  # ids a keyed submit returned again
    limit_refusals: int = 0  # submits refused with ProviderLimitError ("limit" outcomes)
    list_calls: list[str] = field(default_factory=list)

    def live(self) -> list[FakeTask]:
        return [
            t
            for t in self.tasks.values()
            if not t.state(self.duration).is_terminal and not t.removed
        ]

    def key(self, spec: ContainerTaskSpec) -> str:
        return spec.labels.get("task", spec.kind)

    def by_submission(self, key: str | None) -> FakeTask | None:
        if not key:
            return None
        for task in self.tasks.values():
            if not task.removed and task.spec.labels.get(LABEL_SUBMISSION) == key:
                return task
        return None

    def plant(
        self, external_id: str, spec: ContainerTaskSpec, *, steps: int = 0, outcome: str = "ok"
    ) -> FakeTask:
        """A task the provider holds that no submit returned (a lost duplicate, say)."""
        task = FakeTask(external_id, self.key(spec), spec, outcome, steps=steps)
        self.tasks[external_id] = task
        return task

    def executions(self, key: str) -> int:
        """Provider tasks ever created for one task key (what a ledger on the data root counts)."""
        return sum(1 for task in self.tasks.values() if task.key == key)


class FakeBackend(ExecutionBackend):
    name = "fake"
    input_digest_verification = "staging"

    def __init__(self, *, provider: FakeProvider | None = None, slots: int | None = None) -> None:
        self.provider = provider or FakeProvider(slots=slots)

    async def submit(self, spec: ContainerTaskSpec) -> TaskHandle:
        p = self.provider
        key = p.key(spec)
        if key in p.hang_submits:
            p.hang_submits.discard(key)
            await asyncio.Event().wait()  # never returns; the provider never saw it
        if self.adopts_submissions:
            found = p.by_submission(spec.labels.get(LABEL_SUBMISSION))
            if found is not None:  # already there: this task, whatever its state
                p.adoptions.append(found.id)
                return self._handle(found)
        attempt = p.submits.get(key, 0)
        script = p.script.get(key, ["ok"])
        outcome = script[min(attempt, len(script) - 1)]
        if outcome == "unavailable":
            p.submits[key] = attempt + 1
            raise BackendUnavailableError("fake provider is down")
        if outcome == "reject":
            raise UnsupportedCapabilityError(f"fake cannot run a {spec.resources.gpu} GPU")
        if outcome == "limit":  # like a namespace quota or a per-user submit limit
            p.submits[key] = attempt + 1
            p.limit_refusals += 1
            raise ProviderLimitError("fake quota exceeded: 0 of 4 left", limit="fake quota")
        if outcome == "submit_error":
            p.submits[key] = attempt + 1
            raise RuntimeError("fake submit exploded")
        assert all(t.key != key for t in p.live()), f"{key} would run twice at once"
        p.submits[key] = attempt + 1
        task = FakeTask(f"fake-{next(p.ids)}", key, spec, outcome)
        p.tasks[task.id] = task
        p.launched[task.id] = list(spec.command)
        p.max_live = max(p.max_live, len(p.live()))
        if key in p.slow_submits:  # like a container created, then started: it runs already
            p.in_submit.add(task.id)
            try:
                await asyncio.sleep(p.slow_submits.pop(key))
            finally:
                p.in_submit.discard(task.id)
        return self._handle(task)

    def _handle(self, task: FakeTask) -> TaskHandle:
        return TaskHandle(self.name, task.id, dict(task.spec.labels), task.spec.plugin_identity)

    async def poll(self, handles: list[TaskHandle]) -> list[TaskStatus]:
        p = self.provider
        p.poll_calls.append([h.external_id for h in handles])
        if p.unavailable_polls:
            p.unavailable_polls -= 1
            raise BackendUnavailableError("fake provider timed out")
        live = {t.id for t in p.live()} - p.in_submit
        asked = {h.external_id for h in handles}
        assert live <= asked, f"poll skipped live tasks {sorted(live - asked)}"
        result = []
        for handle in handles:
            task = p.tasks.get(handle.external_id)
            if task is None or task.removed:
                failure = TaskFailure("container_missing", f"{handle.external_id} not found")
                result.append(TaskStatus(handle, TaskState.FAILED, failure))
                continue
            if not task.state(p.duration).is_terminal:
                task.steps += 1
            state = task.state(p.duration)
            failure = None
            if state is TaskState.SUCCEEDED:
                self._write_outputs(task)
            if state is TaskState.FAILED:
                failure = self._failure(task)
            result.append(TaskStatus(handle, state, failure))
        return result

    def _failure(self, task: FakeTask) -> TaskFailure:
        if task.cancelled:
            return TaskFailure("cancelled", "cancelled")
        if task.outcome.startswith("exit_"):
            code = int(task.outcome.removeprefix("exit_"))
            return TaskFailure(task.outcome, f"exited with {code}", True, code)
        if task.outcome == "oom":
            return TaskFailure("oom_killed", "killed for memory", False, 137)
        if task.outcome in PROVIDER_ENDINGS:  # as a scheduler reports it: no exit status
            return TaskFailure(
                "job_failed", f"{task.outcome} by the fake", provider_ending=task.outcome
            )
        return TaskFailure(task.outcome, f"{task.outcome} happened", False)

    def _write_outputs(self, task: FakeTask) -> None:
        root = self.provider.root
        if root is None:
            return
        for transfer in task.spec.outputs:
            path = root / transfer.logical_path.lstrip("/")
            path.parent.mkdir(parents=True, exist_ok=True)
            content = self.provider.output_bytes.get(task.key, f"{task.key}\n".encode())
            path.write_bytes(content)

    async def capacity(self) -> Capacity:
        if self.provider.slots is None:
            return Capacity()
        return Capacity({"cpu": max(0, self.provider.slots - len(self.provider.live()))})

    async def stage_inputs(self, transfers: list[Transfer]) -> None:
        self.provider.stage_calls.append(list(transfers))
        if self.provider.stage_bytes:
            await asyncio.to_thread(self._copy_inputs, transfers)
        if self.provider.stage_error:
            raise OSError(self.provider.stage_error)

    def _copy_inputs(self, transfers: list[Transfer]) -> None:
        p = self.provider
        for transfer in transfers:
            size = p.stage_bytes.get(transfer.logical_path)
            if size is None:
                continue
            for step in range(1, p.stage_chunks + 1):
                time.sleep(p.stage_step_s)
                report(
                    transfer.logical_path,
                    size * step // p.stage_chunks,
                    size if p.stage_reports_size else None,
                )

    async def collect_outputs(self, transfers: list[Transfer]) -> None:
        self.provider.collect_calls.append(list(transfers))
        if self.provider.collect_errors:
            raise self.provider.collect_errors.pop(0)
        root = self.provider.root
        if root is None:
            return
        for transfer in transfers:
            _copy(root / transfer.logical_path.lstrip("/"), Path(transfer.uri))

    def path_resolver(self) -> PathResolver:
        return PathResolver(self.provider.mount_root)

    async def cancel(self, handle: TaskHandle) -> None:
        p = self.provider
        if p.unavailable_cancels:
            p.unavailable_cancels -= 1
            raise BackendUnavailableError("fake provider refused the connection")
        p.cancels_in_flight += 1
        p.max_cancels_in_flight = max(p.max_cancels_in_flight, p.cancels_in_flight)
        try:
            await asyncio.sleep(0.01)  # a round trip to the provider
        finally:
            p.cancels_in_flight -= 1
        p.cancelled.append(handle.external_id)
        task = p.tasks.get(handle.external_id)
        if task is not None:
            task.cancelled = True

    async def cleanup(self, handles: list[TaskHandle]) -> None:
        self.provider.cleanup_calls.append([h.external_id for h in handles])
        for handle in handles:
            task = self.provider.tasks.get(handle.external_id)
            if task is not None and task.state(self.provider.duration).is_terminal:
                task.removed = True

    async def failure_detail(self, handle: TaskHandle) -> str | None:
        task = self.provider.tasks.get(handle.external_id)
        return f"log tail of {task.key}: it went wrong" if task else None

    async def task_logs(self, handle: TaskHandle) -> TaskLogs | None:
        """One stdout line per step the task ran; its failure on stderr once it ended."""
        task = self.provider.tasks.get(handle.external_id)
        if task is None or task.removed:
            return None
        stdout = "".join(f"{task.key} step {n}\n" for n in range(task.steps))
        ended = task.state(self.provider.duration).is_terminal
        stderr = f"{task.key}: {task.outcome}\n" if ended and task.outcome != "ok" else ""
        return TaskLogs(stdout, stderr)


class AdoptingFakeBackend(FakeBackend):
    """A fake provider that finds tasks by their submission key and lists a run's tasks."""

    adopts_submissions = True

    async def list_submissions(self, run: str) -> list[TaskHandle] | None:
        p = self.provider
        p.list_calls.append(run)
        if p.unavailable_polls:
            p.unavailable_polls -= 1
            raise BackendUnavailableError("fake provider timed out")
        return [
            self._handle(task)
            for task in p.tasks.values()
            if not task.removed and task.spec.labels.get(LABEL_RUN) == run
        ]


def _copy(source: Path, destination: Path) -> None:
    os.makedirs(destination.parent, exist_ok=True)
    destination.write_bytes(source.read_bytes())


@pytest.fixture
def provider() -> FakeProvider:
    return FakeProvider()


@pytest.fixture
def fake_backend_class() -> type[FakeBackend]:
    return FakeBackend


@pytest.fixture
def adopting_backend_class() -> type[AdoptingFakeBackend]:
    return AdoptingFakeBackend


# -- the altar CLI's tests: a `fake` backend registered for `altar ...` commands ---------

CLI_PLAN = """\
[backend]
type = "fake"
options = { slots = 2 }

[[tasks]]
kind = "fold"
image = "busybox:latest"
command = ["sh", "-c", "echo 0 > /mnt/volume/jobs/demo/fold-0.txt"]
labels = { task = "fold-0" }
outputs = [{ uri = "out/fold-0.txt", logical_path = "jobs/demo/fold-0.txt" }]

[[tasks]]
kind = "fold"
image = "busybox:latest"
command = ["sh", "-c", "echo 1 > /mnt/volume/jobs/demo/fold-1.txt"]
labels = { task = "fold-1" }
outputs = [{ uri = "out/fold-1.txt", logical_path = "jobs/demo/fold-1.txt" }]

[[tasks]]
kind = "fold"
image = "busybox:latest"
command = ["sh", "-c", "echo 2 > /mnt/volume/jobs/demo/fold-2.txt"]
labels = { task = "fold-2" }
outputs = [{ uri = "out/fold-2.txt", logical_path = "jobs/demo/fold-2.txt" }]

[[tasks]]
kind = "summarize"
image = "busybox:latest"
command = ["sh", "-c", "cat /mnt/volume/jobs/demo/fold-*.txt > /mnt/volume/jobs/demo/summary.txt"]
labels = { task = "summary" }
inputs = [
  { uri = "out/fold-0.txt", logical_path = "jobs/demo/fold-0.txt" },
  { uri = "out/fold-1.txt", logical_path = "jobs/demo/fold-1.txt" },
  { uri = "out/fold-2.txt", logical_path = "jobs/demo/fold-2.txt" },
]
outputs = [{ uri = "out/summary.txt", logical_path = "jobs/demo/summary.txt" }]
"""


@pytest.fixture
def fake_registry(monkeypatch, tmp_path, fake_backend_class, provider):
    """Register a ``fake`` backend whose instances share one provider (like a real one)."""
    provider.root = tmp_path / "volume"
    provider.duration = 2

    class Fake(fake_backend_class):
        poll_interval_s = 0.0

        def __init__(self, *, slots: int | None = None, poll_s: float = 0.0) -> None:
            super().__init__(provider=provider)
            provider.slots = slots

    registry = BackendRegistry("altar.test_cli_no_entry_points")  # only what we register
    registry.register("fake", Fake)
    monkeypatch.setattr(registry_module, "default_registry", registry)
    monkeypatch.setattr(cli, "default_registry", registry)
    monkeypatch.setattr(cli, "MAX_POLL_INTERVAL_S", 0.0)
    return provider


@pytest.fixture
def plan_file(tmp_path):
    path = tmp_path / "plan.toml"
    path.write_text(CLI_PLAN)
    return path
