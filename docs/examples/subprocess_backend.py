"""A small execution backend that runs each task's command as a process on this machine.

It is the worked example of docs/extending/writing-a-backend.md: a thin backend class that
translates specs into calls on a *runtime seam* (the ``ProcessRuntime`` protocol), the real
runtime (``LocalProcesses``) and, in conformance/tests/test_example_backend.py, a fake runtime
that the conformance suite scripts.

The machine stands in for one image (``host_image``): a task naming another image, a GPU, or
a CPU or memory limit is refused with UnsupportedCapabilityError, because this backend cannot
provide it. Every task is detached from the submitting process and records its exit code in
a state directory, so a new backend instance on the same directory polls old handles.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Protocol

from altar.execution import (
    BackendUnavailableError,
    ContainerTaskSpec,
    ExecutionBackend,
    PathResolver,
    TaskFailure,
    TaskHandle,
    TaskState,
    TaskStatus,
    Transfer,
    UnsupportedCapabilityError,
    copy_and_verify,
    mint_handle,
)
from altar.execution.backend import DigestVerification

# --- the runtime seam -------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessRecord:
    """What the runtime knows about one task."""

    image: str  # what the task asked for; this machine stands in for it
    argv: list[str]
    env: dict[str, str]
    labels: dict[str, str]
    timeout_s: int | None
    started_at: float
    running: bool
    exit_code: int | None = None  # set once the process has exited
    finished_at: float | None = None
    ended_by: str | None = None  # "cancelled" or "timeout" when the backend stopped it


class ProcessRuntime(Protocol):
    """The provider as the backend sees it; the real runtime and the test fake implement it."""

    def start(
        self,
        task_id: str,
        image: str,
        argv: list[str],
        env: dict[str, str],
        labels: dict[str, str],
        cwd: str,
        timeout_s: int | None,
    ) -> None: ...

    def inspect(self, task_id: str) -> ProcessRecord | None: ...

    def stop(self, task_id: str, reason: str) -> None: ...

    def remove(self, task_id: str) -> None: ...

    def log_tail(self, task_id: str, lines: int) -> list[str]: ...


# --- the backend ------------------------------------------------------------------------


class SubprocessExecutionBackend(ExecutionBackend):
    """Runs tasks as local processes; inputs are staged into ``data_root``."""

    name: ClassVar[str] = "subprocess"
    input_digest_verification: ClassVar[DigestVerification | None] = "staging"

    def __init__(
        self,
        *,
        data_root: str | os.PathLike[str],
        host_image: str = "busybox:latest",
        runtime: ProcessRuntime | None = None,
    ) -> None:
        self.data_root = Path(data_root).absolute()
        self.host_image = host_image
        self.runtime = runtime or LocalProcesses(self.data_root / ".tasks")

    async def submit(self, spec: ContainerTaskSpec) -> TaskHandle:
        self._refuse_what_cannot_be_represented(spec)
        task_id = f"task-{uuid.uuid4().hex}"  # a fresh id: resubmitting runs the task again
        await asyncio.to_thread(
            self.runtime.start,
            task_id,
            spec.image,
            list(spec.command),
            dict(spec.env),
            dict(spec.labels),
            str(self.data_root),
            spec.timeout_s,
        )
        return mint_handle(self.name, spec, task_id)  # labels copied, plugin_identity kept

    def _refuse_what_cannot_be_represented(self, spec: ContainerTaskSpec) -> None:
        if spec.image != self.host_image:
            raise UnsupportedCapabilityError(
                f"this machine provides image {self.host_image!r}, not {spec.image!r}",
                capability="image",
            )
        resources = spec.resources
        if resources.gpu is not None:
            raise UnsupportedCapabilityError(
                f"task {spec.kind!r} needs {resources.count} GPU(s); the subprocess backend "
                "runs CPU work only",
                capability="gpu",
            )
        if resources.cpu is not None or resources.memory_gb is not None:
            raise UnsupportedCapabilityError(
                "the subprocess backend cannot limit CPU or memory; drop the request or use "
                "a container backend",
                capability="resources",
            )

    async def poll(self, handles: list[TaskHandle]) -> list[TaskStatus]:
        return [await asyncio.to_thread(self._status, handle) for handle in handles]

    def _status(self, handle: TaskHandle) -> TaskStatus:
        task_id = handle.external_id
        record = self.runtime.inspect(task_id)
        if record is None:
            failure = TaskFailure("container_missing", f"no task {task_id} in {self.data_root}")
            return TaskStatus(handle, TaskState.FAILED, failure)
        deadline = None if record.timeout_s is None else record.started_at + record.timeout_s
        if record.running and deadline is not None and time.time() >= deadline:
            self.runtime.stop(task_id, "timeout")  # enforce the deadline now
            record = self.runtime.inspect(task_id) or record
        overran = (
            record.timeout_s is not None
            and record.finished_at is not None
            and record.finished_at - record.started_at > record.timeout_s
        )
        if record.ended_by == "timeout" or overran:
            detail = f"task {task_id} ran past its {record.timeout_s} s timeout and was killed"
            return TaskStatus(handle, TaskState.FAILED, TaskFailure("timeout", detail))
        if record.ended_by == "cancelled":
            detail = f"task {task_id} was cancelled"
            return TaskStatus(handle, TaskState.FAILED, TaskFailure("cancelled", detail))
        if record.running:
            return TaskStatus(handle, TaskState.RUNNING)
        if record.exit_code == 0:
            return TaskStatus(handle, TaskState.SUCCEEDED)
        if record.exit_code is None:
            detail = f"task {task_id} vanished without an exit code"
            return TaskStatus(handle, TaskState.FAILED, TaskFailure("job_failed", detail))
        code = record.exit_code
        failure = TaskFailure(
            f"exit_{code}", f"task {task_id} exited with code {code}", True, exit_code=code
        )
        return TaskStatus(handle, TaskState.FAILED, failure)

    async def cancel(self, handle: TaskHandle) -> None:
        await asyncio.to_thread(self.runtime.stop, handle.external_id, "cancelled")

    async def cleanup(self, handles: list[TaskHandle]) -> None:
        for handle in handles:
            await asyncio.to_thread(self.runtime.stop, handle.external_id, "cancelled")
            await asyncio.to_thread(self.runtime.remove, handle.external_id)

    async def failure_detail(self, handle: TaskHandle) -> str | None:
        lines = await asyncio.to_thread(self.runtime.log_tail, handle.external_id, 20)
        return "\n".join(lines) if lines else None

    def path_resolver(self) -> PathResolver:
        return PathResolver(str(self.data_root))

    async def stage_inputs(self, transfers: list[Transfer]) -> None:
        for transfer in transfers:
            destination = Path(self.path_resolver().resolve(transfer.logical_path))
            await asyncio.to_thread(destination.parent.mkdir, parents=True, exist_ok=True)
            await asyncio.to_thread(copy_and_verify, transfer.uri, destination, transfer.digest)

    async def collect_outputs(self, transfers: list[Transfer]) -> None:
        for transfer in transfers:
            source = Path(self.path_resolver().resolve(transfer.logical_path))
            destination = Path(transfer.uri)
            await asyncio.to_thread(destination.parent.mkdir, parents=True, exist_ok=True)
            await asyncio.to_thread(copy_and_verify, source, destination, transfer.digest)


# --- the real runtime -------------------------------------------------------------------

# Runs as `python -c SHIM <task dir> <argv...>`: forks so the task outlives whoever started
# it, runs the command and writes its exit code with temp file + rename.
_SHIM = """
import os, subprocess, sys
task_dir = sys.argv[1]
if os.fork():
    os._exit(0)
os.setsid()
with open(os.path.join(task_dir, "pid.tmp"), "w") as f:
    f.write(str(os.getpid()))
os.replace(os.path.join(task_dir, "pid.tmp"), os.path.join(task_dir, "pid"))
if os.path.exists(os.path.join(task_dir, "ended_by")):
    sys.exit(0)  # stopped before it started (stop writes ended_by, then reads pid)
try:
    code = subprocess.call(sys.argv[2:])
except OSError as error:
    print(f"cannot run {sys.argv[2]!r}: {error}", flush=True)
    code = 127
with open(os.path.join(task_dir, "exit.tmp"), "w") as f:
    f.write(str(code))
os.replace(os.path.join(task_dir, "exit.tmp"), os.path.join(task_dir, "exit"))
"""


class LocalProcesses:
    """Detached local processes, each with a directory under ``state_dir``."""

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)

    def _reachable(self) -> None:
        # A vanished state directory (an unmounted volume, say) is an outage, not proof that
        # every task is gone: report it as transient instead of as missing tasks.
        if not self.state_dir.is_dir():
            raise BackendUnavailableError(
                f"task state directory {self.state_dir} is not available; is its volume mounted?"
            )

    def start(
        self,
        task_id: str,
        image: str,
        argv: list[str],
        env: dict[str, str],
        labels: dict[str, str],
        cwd: str,
        timeout_s: int | None,
    ) -> None:
        self._reachable()
        task_dir = self.state_dir / task_id
        task_dir.mkdir()
        Path(cwd).mkdir(parents=True, exist_ok=True)
        meta = {
            "image": image,
            "argv": argv,
            "env": env,
            "labels": labels,
            "timeout_s": timeout_s,
            "started_at": time.time(),
        }
        (task_dir / "task.json").write_text(json.dumps(meta))
        full_env = {"PATH": os.environ.get("PATH", os.defpath), **env}
        with open(task_dir / "log", "wb") as log:
            shim = subprocess.Popen(
                [sys.executable, "-c", _SHIM, str(task_dir), *argv],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=full_env,
                cwd=cwd,
            )
        shim.wait()  # returns at once: the shim forks the task and exits

    def inspect(self, task_id: str) -> ProcessRecord | None:
        self._reachable()
        task_dir = self.state_dir / task_id
        try:
            meta = json.loads((task_dir / "task.json").read_text())
        except (FileNotFoundError, NotADirectoryError):
            return None
        exit_code = _read_int(task_dir / "exit")
        ended_by = _read_text(task_dir / "ended_by")
        pid = _read_int(task_dir / "pid")
        running = exit_code is None and ended_by is None and (pid is None or _alive(pid))
        if not running and exit_code is None:
            exit_code = _read_int(task_dir / "exit")  # it may have exited just now
        finished_at = None
        if exit_code is not None:
            finished_at = (task_dir / "exit").stat().st_mtime
        return ProcessRecord(
            meta["image"], meta["argv"], meta["env"], meta["labels"], meta["timeout_s"],
            meta["started_at"], running,
            exit_code, finished_at, ended_by,
        )  # fmt: skip

    def stop(self, task_id: str, reason: str) -> None:
        task_dir = self.state_dir / task_id
        if not task_dir.is_dir() or (task_dir / "exit").exists():
            return  # unknown or finished: nothing to stop
        if not (task_dir / "ended_by").exists():
            (task_dir / "ended_by").write_text(reason)
        # Read the pid only after writing ended_by: a task that has no pid yet sees ended_by
        # and never runs its command.
        pid = _read_int(task_dir / "pid")
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)

    def remove(self, task_id: str) -> None:
        shutil.rmtree(self.state_dir / task_id, ignore_errors=True)

    def log_tail(self, task_id: str, lines: int) -> list[str]:
        text = _read_text(self.state_dir / task_id / "log") or ""
        return text.splitlines()[-lines:]


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text()
    except (FileNotFoundError, NotADirectoryError):
        return None


def _read_int(path: Path) -> int | None:
    text = _read_text(path)
    return int(text) if text else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
