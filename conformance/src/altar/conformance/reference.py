"""``InProcessExecutionBackend``: the reference backend, running a Python callable as each task.

The "provider" is an :class:`InProcessFabric`: it owns every task (what was launched, its
deadline, its outcome and log), so a second backend instance built on the same fabric polls
the first one's handles, as a restarted process would. The backend keeps no task state of
its own.

A task runs ``runtime(spec, workdir)`` in a daemon thread, so ``submit`` returns at once.
``workdir`` is the data root: a task finds the file with logical path ``p`` at ``workdir / p``
(which is what :meth:`InProcessExecutionBackend.path_resolver` resolves). The callable returns
the exit code (None means 0); an exception is exit 1 with its traceback as the task's log.
Without a runtime, tasks run until the fabric is told how they end (the conformance hooks do
that), which is how the suite drives the backend.

A thread cannot be killed: a cancelled or timed-out task's callable runs on, but its result
is ignored. Deadlines are enforced on the fabric's clock whether or not anyone polls: a task
that finishes after its deadline reads as ``timeout``.
"""

from __future__ import annotations

import asyncio
import importlib
import itertools
import os
import secrets
import subprocess
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from altar.conformance.launched import GIB, LaunchedTask
from altar.execution import (
    BackendUnavailableError,
    Capacity,
    ContainerTaskSpec,
    ExecutionBackend,
    PathResolver,
    TaskFailure,
    TaskHandle,
    TaskState,
    TaskStatus,
    Transfer,
    TransferIntegrityError,
    UnsupportedCapabilityError,
    copy_and_verify,
    verify_file_digest,
    verify_transfer_digest,
)
from altar.execution.backend import DigestVerification
from altar.execution.digest import require_digest_file

__all__ = [
    "InProcessExecutionBackend",
    "InProcessFabric",
    "InProcessTaskVerifyingBackend",
    "Runtime",
    "run_command_locally",
    "task_log",
]

Runtime = Callable[[ContainerTaskSpec, Path], int | None]
"""A task body: ``runtime(spec, workdir) -> exit code`` (None means 0)."""

SUBMISSION_LABEL = "altar.submission"
RUN_LABEL = "altar.run"
LOG_TAIL_LINES = 20
OOM_EXIT_CODE = 137
TIMEOUT_EXIT_CODE = 124
COMMAND_NOT_FOUND_EXIT_CODE = 127


_running = threading.local()


def task_log(*lines: str) -> None:
    """Append lines to the log of the task whose runtime calls this (no-op elsewhere)."""
    append: Callable[[list[str]], None] | None = getattr(_running, "append_log", None)
    if append is not None:
        append(list(lines))


def run_command_locally(spec: ContainerTaskSpec, workdir: Path) -> int:
    """A runtime that runs ``spec.command`` as a local process: the host stands in for the image.

    The argv runs as is (no shell), in ``workdir``, with ``PATH`` and the spec's ``env`` only,
    and is killed at ``timeout_s``. Suits commands the test machine can run too, such as BusyBox
    shell commands in a plan rendered with the backend's path resolver.
    """
    if not spec.command:
        task_log("the task has an empty command; there is nothing to run")
        return COMMAND_NOT_FOUND_EXIT_CODE
    env = {"PATH": os.environ.get("PATH", os.defpath), **spec.env}
    try:
        completed = subprocess.run(
            spec.command,
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=spec.timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        task_log(f"killed after its timeout of {spec.timeout_s} s")
        return TIMEOUT_EXIT_CODE
    except (FileNotFoundError, PermissionError) as error:
        task_log(f"cannot run {spec.command[0]!r}: {error}")
        return COMMAND_NOT_FOUND_EXIT_CODE
    output = (completed.stdout + completed.stderr).decode("utf-8", errors="replace")
    task_log(*output.splitlines())
    return completed.returncode


@dataclass
class _Task:
    spec: ContainerTaskSpec
    launched: LaunchedTask
    timeout_s: int | None
    started: float | None  # None: created, never started
    key: str | None = None
    finished: float | None = None
    exit_code: int | None = None
    ended_by: str | None = None  # None: the task's own exit; else why it was ended
    log: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class FabricTask:
    """A snapshot of one task on the fabric."""

    external_id: str
    launched: LaunchedTask
    timeout_s: int | None
    state: TaskState
    failure: TaskFailure | None
    log: tuple[str, ...]


class InProcessFabric:
    """The in-process provider: a thread-safe table of tasks, shared by backend instances.

    Its scripting methods (:meth:`finish`, :meth:`expire`, :meth:`oom_kill`, :meth:`write_log`)
    change a task the way a real provider would change under a backend's feet.
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._tasks: dict[str, _Task] = {}
        # Ids unique across fabrics too, as a provider's are: a lost task is never confused
        # with a new one that happens to get the same number.
        self._prefix = f"in-process-{secrets.token_hex(3)}"
        self._ids = itertools.count(1)
        self.reachable = True  # False: every provider call fails, as in an outage

    def _answer(self) -> None:
        if not self.reachable:
            raise BackendUnavailableError(
                "the in-process fabric is unreachable (outage simulated); try again later"
            )

    # -- provider API used by the backend

    def launch(
        self,
        spec: ContainerTaskSpec,
        launched: LaunchedTask,
        timeout_s: int | None,
        runtime: Runtime | None,
        workdir: Path,
        *,
        start: bool = True,
    ) -> str:
        """Run a task; one whose ``altar.submission`` key is known is adopted, not rerun.

        An adopted task that was only created is started now; a running or finished one is
        left as it is. ``start=False`` only creates it (a submit killed before its start).
        """
        self._answer()
        key = spec.labels.get(SUBMISSION_LABEL)
        with self._lock:
            known = self._by_key(key)
            if known is not None:
                external_id, task = known
                if task.started is not None or not start:
                    return external_id
                task.started = self._clock()
            else:
                external_id = f"{self._prefix}-{next(self._ids)}"
                started = self._clock() if start else None
                self._tasks[external_id] = _Task(spec, launched, timeout_s, started, key)
                if not start:
                    return external_id
        if runtime is not None:
            thread = threading.Thread(
                target=self._run,
                args=(external_id, runtime, spec, workdir),
                name=f"altar-{external_id}",
                daemon=True,
            )
            thread.start()
        return external_id

    def _by_key(self, key: str | None) -> tuple[str, _Task] | None:
        if key is None:
            return None
        for external_id, task in self._tasks.items():
            if task.key == key:
                return external_id, task
        return None

    def of_run(self, run: str) -> list[tuple[str, ContainerTaskSpec]]:
        """Every task labelled ``altar.run == run``, in launch order."""
        self._answer()
        with self._lock:
            return [
                (external_id, task.spec)
                for external_id, task in self._tasks.items()
                if task.spec.labels.get(RUN_LABEL) == run
            ]

    def inspect(self, external_id: str) -> FabricTask | None:
        self._answer()
        with self._lock:
            task = self._tasks.get(external_id)
            if task is None:
                return None
            self._enforce_deadline(task)
            state, failure = self._outcome(external_id, task)
            return FabricTask(
                external_id, task.launched, task.timeout_s, state, failure, tuple(task.log)
            )

    def kill(self, external_id: str) -> None:
        """Stop a task (no-op for a finished or unknown one)."""
        self._answer()
        self._end(external_id, exit_code=None, ended_by="cancelled")

    def remove(self, external_id: str) -> None:
        """Forget a task (no-op for an unknown one)."""
        self._answer()
        with self._lock:
            self._tasks.pop(external_id, None)

    # -- scripting

    def finish(self, external_id: str, exit_code: int) -> None:
        """The task's process exits with ``exit_code``."""
        self._end(external_id, exit_code=exit_code, ended_by=None)

    def expire(self, external_id: str) -> None:
        """The task has been running past its deadline (its start moves into the past)."""
        with self._lock:
            task = self._tasks[external_id]
            if task.timeout_s is not None and task.finished is None and task.started is not None:
                task.started -= task.timeout_s + 1

    def oom_kill(self, external_id: str) -> None:
        """The task is killed for exceeding its memory limit."""
        self._end(external_id, exit_code=OOM_EXIT_CODE, ended_by="oom_killed")

    def fail_input_verification(self, external_id: str) -> None:
        """The task's own check of its inputs fails before its command runs."""
        self._append_log(external_id, ["an input does not match its digest"])
        self._end(external_id, exit_code=1, ended_by="input_digest_mismatch")

    def write_log(self, external_id: str, lines: list[str]) -> None:
        with self._lock:
            self._tasks[external_id].log.extend(lines)

    # -- internals

    def _run(
        self, external_id: str, runtime: Runtime, spec: ContainerTaskSpec, workdir: Path
    ) -> None:
        _running.append_log = lambda lines: self._append_log(external_id, lines)
        ended_by = None
        try:
            code = runtime(spec, workdir)
            exit_code = 0 if code is None else int(code)
        except TransferIntegrityError as error:  # the task checked its inputs and one is wrong
            self._append_log(external_id, [str(error)])
            exit_code, ended_by = 1, "input_digest_mismatch"
        except BaseException:  # the task's own failure, reported like a crashed process
            self._append_log(external_id, traceback.format_exc().splitlines())
            exit_code = 1
        finally:
            _running.append_log = None
        self._end(external_id, exit_code=exit_code, ended_by=ended_by)

    def _append_log(self, external_id: str, lines: list[str]) -> None:
        with self._lock:
            task = self._tasks.get(external_id)
            if task is not None:
                task.log.extend(lines)

    def _end(self, external_id: str, *, exit_code: int | None, ended_by: str | None) -> None:
        with self._lock:
            task = self._tasks.get(external_id)
            if task is None:
                return
            self._enforce_deadline(task)
            if task.finished is not None:
                return  # first ending wins: a process exits once
            task.finished = self._clock()
            task.exit_code = exit_code
            task.ended_by = ended_by

    def _enforce_deadline(self, task: _Task) -> None:
        # Called with the lock held. A running task past its deadline is killed now, whether
        # or not anyone polls (ending calls come through here too).
        if task.finished is None and task.timeout_s is not None and task.started is not None:
            deadline = task.started + task.timeout_s
            if self._clock() >= deadline:
                task.finished = deadline
                task.ended_by = "timeout"

    @staticmethod
    def _outcome(external_id: str, task: _Task) -> tuple[TaskState, TaskFailure | None]:
        if task.finished is None:
            return (TaskState.PENDING if task.started is None else TaskState.RUNNING), None
        if task.ended_by == "timeout" or (
            task.timeout_s is not None
            and task.started is not None
            and task.finished - task.started > task.timeout_s
        ):
            return TaskState.FAILED, TaskFailure(
                "timeout", f"task {external_id} ran past its timeout of {task.timeout_s} s"
            )
        if task.ended_by == "input_digest_mismatch":
            detail = f"task {external_id} found an input that does not match its digest"
            tail = f": {task.log[-1]}" if task.log else ""
            return TaskState.FAILED, TaskFailure(
                "input_digest_mismatch", detail + tail, deterministic=True
            )
        if task.ended_by == "cancelled":
            return TaskState.FAILED, TaskFailure("cancelled", f"task {external_id} was cancelled")
        if task.ended_by == "oom_killed":
            return TaskState.FAILED, TaskFailure(
                "oom_killed",
                f"task {external_id} was killed for exceeding its memory limit",
                exit_code=task.exit_code,
            )
        if task.exit_code == 0:
            return TaskState.SUCCEEDED, None
        return TaskState.FAILED, TaskFailure(
            f"exit_{task.exit_code}",
            f"task {external_id} ({task.spec.kind}) exited with code {task.exit_code}",
            deterministic=True,
            exit_code=task.exit_code,
        )


class InProcessExecutionBackend(ExecutionBackend):
    """Runs each task as a Python callable in this process: the reference backend.

    ``runtime`` is the callable each task runs, or its ``'module:function'`` name (as a plan's
    ``[backend] options`` give it); None runs tasks until the fabric is told how they end.
    Options: ``data_root`` (where staged inputs land and tasks read and write; default
    ``./.altar-in-process-data``), ``gpus`` (devices the host offers; a task asking for more
    is refused, never run on CPU), ``max_timeout_s`` (a lifetime cap: ``timeout_s=None``
    gets it and a longer explicit limit is refused), ``slots`` (reported CPU capacity) and
    ``fabric`` (share one with another instance to model a restart).
    """

    name: ClassVar[str] = "in-process"
    input_digest_verification: ClassVar[DigestVerification | None] = "staging"
    adopts_submissions: ClassVar[bool] = True

    def __init__(
        self,
        runtime: Runtime | str | None = None,
        *,
        data_root: str | os.PathLike[str] | None = None,
        gpus: int = 0,
        max_timeout_s: int | None = None,
        slots: int = 4,
        fabric: InProcessFabric | None = None,
    ) -> None:
        if gpus < 0:
            raise ValueError(f"gpus must be zero or more, got {gpus}")
        if max_timeout_s is not None and max_timeout_s < 1:
            raise ValueError(
                f"max_timeout_s must be a positive number of seconds, got {max_timeout_s}"
            )
        self.runtime = _load_runtime(runtime) if isinstance(runtime, str) else runtime
        self.data_root = Path(data_root if data_root is not None else ".altar-in-process-data")
        self.data_root = self.data_root.absolute()
        self.gpus = gpus
        self.max_timeout_s = max_timeout_s
        self.slots = slots
        self.fabric = fabric if fabric is not None else InProcessFabric()

    def reopen(self) -> InProcessExecutionBackend:
        """A fresh instance on the same fabric and options (a restarted process)."""
        return type(self)(
            self.runtime,
            data_root=self.data_root,
            gpus=self.gpus,
            max_timeout_s=self.max_timeout_s,
            slots=self.slots,
            fabric=self.fabric,
        )

    # -- submission

    def _timeout_for(self, spec: ContainerTaskSpec) -> int | None:
        if self.max_timeout_s is None:
            return spec.timeout_s
        if spec.timeout_s is None:
            return self.max_timeout_s
        if spec.timeout_s > self.max_timeout_s:
            raise UnsupportedCapabilityError(
                f"timeout_s={spec.timeout_s} exceeds this backend's maximum task lifetime of "
                f"{self.max_timeout_s} s; split the task or pass timeout_s <= {self.max_timeout_s}",
                capability="timeout_s",
            )
        return spec.timeout_s

    def _launch_record(self, spec: ContainerTaskSpec) -> LaunchedTask:
        resources = spec.resources
        gpu_count = 0
        if resources.gpu is not None:
            if resources.count > self.gpus:
                raise UnsupportedCapabilityError(
                    f"task {spec.kind!r} requires {resources.count} GPU(s) from pool "
                    f"{resources.gpu!r} but this in-process backend offers {self.gpus}; "
                    "run it on a backend with GPUs (a GPU task never runs on CPU)",
                    capability="gpu",
                )
            gpu_count = resources.count
        memory = None if resources.memory_gb is None else int(resources.memory_gb * GIB)
        return LaunchedTask(
            image=spec.image,
            command=list(spec.command),
            env=dict(spec.env),
            labels=dict(spec.labels),
            cpu=resources.cpu,
            memory_bytes=memory,
            gpu_count=gpu_count,
        )

    async def submit(self, spec: ContainerTaskSpec) -> TaskHandle:
        timeout_s = self._timeout_for(spec)
        launched = self._launch_record(spec)
        runtime = self.runtime
        if runtime is not None:
            await asyncio.to_thread(self.data_root.mkdir, parents=True, exist_ok=True)
            if self.input_digest_verification == "task":
                runtime = _checking_inputs_first(runtime, self.path_resolver())
        external_id = self.fabric.launch(spec, launched, timeout_s, runtime, self.data_root)
        return TaskHandle(self.name, external_id, dict(spec.labels), spec.plugin_identity)

    async def poll(self, handles: list[TaskHandle]) -> list[TaskStatus]:
        statuses = []
        for handle in handles:
            task = self.fabric.inspect(handle.external_id)
            if task is None:
                statuses.append(
                    TaskStatus(
                        handle,
                        TaskState.FAILED,
                        TaskFailure(
                            "container_missing",
                            f"task {handle.external_id} is not known to this in-process fabric",
                        ),
                    )
                )
            else:
                statuses.append(TaskStatus(handle, task.state, task.failure))
        return statuses

    async def list_submissions(self, run: str) -> list[TaskHandle] | None:
        return [
            TaskHandle(self.name, external_id, dict(spec.labels), spec.plugin_identity)
            for external_id, spec in self.fabric.of_run(run)
        ]

    async def cancel(self, handle: TaskHandle) -> None:
        self.fabric.kill(handle.external_id)

    async def cleanup(self, handles: list[TaskHandle]) -> None:
        for handle in handles:
            self.fabric.kill(handle.external_id)
            self.fabric.remove(handle.external_id)

    async def failure_detail(self, handle: TaskHandle) -> str | None:
        task = self.fabric.inspect(handle.external_id)
        if task is None or not task.log:
            return None
        return "\n".join(task.log[-LOG_TAIL_LINES:])

    async def capacity(self) -> Capacity:
        pools = {"cpu": self.slots}
        if self.gpus:
            pools["gpu"] = self.gpus
        return Capacity(pools)

    def path_resolver(self) -> PathResolver:
        return PathResolver(str(self.data_root))

    # -- data movement

    def host_path(self, logical_path: str) -> Path:
        """Where a logical path lives on this host (refuses paths that leave the data root)."""
        return Path(self.path_resolver().resolve(logical_path))

    async def stage_inputs(self, transfers: list[Transfer]) -> None:
        await asyncio.to_thread(self._stage_inputs, transfers)

    async def collect_outputs(self, transfers: list[Transfer]) -> None:
        await asyncio.to_thread(self._collect_outputs, transfers)

    def _stage_inputs(self, transfers: list[Transfer]) -> None:
        for transfer in transfers:
            source = Path(_local_path(transfer.uri))
            destination = self.host_path(transfer.logical_path)
            if self.input_digest_verification == "task":
                # Tasks check their own inputs: copy the bytes, let the task judge them.
                if source.is_file() and source.resolve() != destination.resolve():
                    destination.parent.mkdir(parents=True, exist_ok=True)
                    copy_and_verify(source, destination)
                continue
            require_digest_file(transfer, source)
            if source.resolve() == destination.resolve():
                # Already in place: verify it where it is; never copy a file onto itself.
                verify_transfer_digest(transfer, destination)
                continue
            destination.parent.mkdir(parents=True, exist_ok=True)
            copy_and_verify(
                source,
                destination,
                transfer.digest,
                label=f"staged input {transfer.uri!r} ({transfer.logical_path!r})",
            )

    def _collect_outputs(self, transfers: list[Transfer]) -> None:
        for transfer in transfers:
            source = self.host_path(transfer.logical_path)
            destination = Path(_local_path(transfer.uri))
            if source.resolve() == destination.resolve():
                continue
            if not source.is_file():
                raise FileNotFoundError(
                    f"output {transfer.logical_path!r} was not written by its task "
                    f"(expected {source})"
                )
            destination.parent.mkdir(parents=True, exist_ok=True)
            label = f"output {transfer.logical_path!r}"
            copy_and_verify(source, destination, transfer.digest, label=label)


class InProcessTaskVerifyingBackend(InProcessExecutionBackend):
    """The reference with ``"task"`` verification: each task hashes its inputs before it runs.

    ``stage_inputs`` copies bytes without judging them; a task whose digest-bearing input does
    not match fails with ``input_digest_mismatch`` and its runtime is never called. A runtime
    that raises TransferIntegrityError (after its own check) fails the same way.
    """

    input_digest_verification: ClassVar[DigestVerification | None] = "task"


def _load_runtime(reference: str) -> Runtime:
    """Import ``module:attribute`` (how a plan file names a runtime in its backend options)."""
    module_name, _, attribute = reference.partition(":")
    if not module_name or not attribute:
        raise ValueError(
            f"runtime must name a callable as 'module:function', got {reference!r} "
            "(for example 'altar.conformance.reference:run_command_locally')"
        )
    try:
        value = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"runtime {reference!r} cannot be imported: {error}") from error
    if not callable(value):
        raise ValueError(f"runtime {reference!r} is not callable")
    runtime: Runtime = value
    return runtime


def _checking_inputs_first(runtime: Runtime, resolver: PathResolver) -> Runtime:
    def check_then_run(spec: ContainerTaskSpec, workdir: Path) -> int | None:
        for transfer in spec.inputs:
            if transfer.digest is not None:
                verify_file_digest(resolver.resolve(transfer.logical_path), transfer.digest)
        return runtime(spec, workdir)

    return check_then_run


def _local_path(uri: str) -> str:
    if uri.startswith("file://"):
        return uri.removeprefix("file://")
    if "://" in uri:
        raise UnsupportedCapabilityError(
            f"the in-process backend reads and writes local paths only, got {uri!r}",
            capability="storage",
        )
    return uri
