"""``InProcessFabric``: the in-memory provider of the in-process reference backend.

It owns every task (what was launched, its deadline, its outcome and log), so a second
backend instance built on the same fabric polls the first one's handles, as a restarted
process would. A task runs ``runtime(spec, workdir)`` in a daemon thread; without a runtime
it runs until the fabric is told how it ends (the conformance hooks do that).

A thread cannot be killed: a cancelled or timed-out task's callable runs on, but its result
is ignored. Deadlines are enforced on the fabric's clock whether or not anyone polls: a task
that finishes after its deadline reads as ``timeout``.
"""

from __future__ import annotations

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

from altar.conformance.launched import LaunchedTask
from altar.execution import (
    LABEL_RUN,
    LABEL_SUBMISSION,
    BackendUnavailableError,
    ContainerTaskSpec,
    TaskFailure,
    TaskState,
    TransferIntegrityError,
)

__all__ = ["FabricTask", "InProcessFabric", "Runtime", "run_command_locally", "task_log"]

Runtime = Callable[[ContainerTaskSpec, Path], int | None]
"""A task body: ``runtime(spec, workdir) -> exit code`` (None means 0)."""

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

    Its scripting methods (:meth:`finish`, :meth:`expire`, :meth:`oom_kill`,
    :meth:`lose_supervisor`, :meth:`write_log`)
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
        key = spec.labels.get(LABEL_SUBMISSION)
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
                if task.spec.labels.get(LABEL_RUN) == run
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

    def lose_supervisor(self, external_id: str) -> None:
        """What runs the task dies under it (a killed supervisor): the provider's ending."""
        self._end(external_id, exit_code=None, ended_by="engine_lost")

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
        if task.ended_by == "engine_lost":
            return TaskState.FAILED, TaskFailure(
                "job_failed",
                f"engine_lost: the supervisor of task {external_id} died; the task ended with it",
                provider_ending="engine_lost",
            )
        if task.exit_code == 0:
            return TaskState.SUCCEEDED, None
        return TaskState.FAILED, TaskFailure(
            f"exit_{task.exit_code}",
            f"task {external_id} ({task.spec.kind}) exited with code {task.exit_code}",
            deterministic=True,
            exit_code=task.exit_code,
        )
