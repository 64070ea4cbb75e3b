"""``InProcessExecutionBackend``: the reference backend, running tasks on this machine.

Two providers stand behind it. From the ``altar`` command (and by default) each task's argv
runs as a local process under a supervisor, recorded in the data root
(:class:`~altar.conformance.processes.ProcessFabric`): the host stands in for the image, a
task survives the runner that submitted it, and a restarted runner finds it by its handle or
its ``altar.submission`` key. Given a Python callable as ``runtime`` (or None, which the
conformance suite scripts), tasks live in an :class:`~altar.conformance.fabric.InProcessFabric`
in this process instead.

``workdir`` is the data root: a task finds the file with logical path ``p`` at
``workdir / p`` (which is what :meth:`InProcessExecutionBackend.path_resolver` resolves).
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import os
from pathlib import Path
from typing import ClassVar, Literal

from altar.conformance.fabric import (
    FabricTask,
    InProcessFabric,
    Runtime,
    run_command_locally,
    task_log,
)
from altar.conformance.launched import LaunchedTask
from altar.conformance.processes import ProcessFabric, ProcessTask
from altar.execution import (
    Capacity,
    ContainerTaskSpec,
    ExecutionBackend,
    LocalStager,
    PathResolver,
    TaskFailure,
    TaskHandle,
    TaskState,
    TaskStatus,
    Transfer,
    UnsupportedCapabilityError,
    collect_output,
    mint_handle,
    verify_file_digest,
)
from altar.execution.backend import DigestVerification

__all__ = [
    "COMMAND_RUNTIME",
    "FabricTask",
    "InProcessExecutionBackend",
    "InProcessFabric",
    "InProcessTaskVerifyingBackend",
    "Runtime",
    "run_command_locally",
    "task_log",
]

COMMAND_RUNTIME = "command"
"""The default runtime: each task's argv as a supervised local process (see module doc)."""

LOG_TAIL_LINES = 20


def _whole(name: str, value: object, least: int, what: str = "") -> None:
    """Refuse an option that is not a whole number of at least ``least``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        wanted = what or ("zero or more" if least == 0 else f"a whole number of {least} or more")
        raise ValueError(f"{name} must be {wanted}, got {value!r}")


class InProcessExecutionBackend(ExecutionBackend):
    """Runs each task on this machine: the reference backend.

    ``runtime`` says what a task is. ``"command"`` (the default, and what ``altar run`` gets
    unless a plan names another) runs the task's argv as a local process under a supervisor,
    recorded in the data root; the image is not used (the host stands in for it, so plans
    name commands this machine has, such as BusyBox's). A callable, or its
    ``'module:function'`` name, runs ``runtime(spec, workdir)`` in a thread of this process;
    None runs tasks until the fabric is told how they end (how the conformance suite drives
    the backend).

    Options: ``data_root`` (where staged inputs land, tasks run and their records live;
    default ``./.altar-in-process-data``; a relative path in a plan is resolved against the
    plan's folder), ``gpus`` (devices the host offers; a task asking for more is refused,
    never run on CPU), ``max_timeout_s`` (a lifetime cap: ``timeout_s=None`` gets it and a
    longer explicit limit is refused), ``slots`` (reported CPU capacity) and ``fabric``
    (share one with another instance to model a restart).
    """

    name: ClassVar[str] = "in-process"
    input_digest_verification: ClassVar[DigestVerification | None] = "staging"
    adopts_submissions: ClassVar[bool] = True

    def __init__(
        self,
        runtime: Runtime | str | None = COMMAND_RUNTIME,
        *,
        data_root: str | os.PathLike[str] | None = None,
        gpus: int = 0,
        max_timeout_s: int | None = None,
        slots: int = 4,
        fabric: InProcessFabric | ProcessFabric | None = None,
    ) -> None:
        # options come from a plan's TOML: a wrong type is refused here, before anything runs
        _whole("gpus", gpus, 0)
        _whole("slots", slots, 1)
        if max_timeout_s is not None:
            _whole("max_timeout_s", max_timeout_s, 1, "a positive number of seconds")
        self.runtime: Runtime | Literal["command"] | None
        if runtime == COMMAND_RUNTIME:
            self.runtime = "command"
        elif isinstance(runtime, str):
            self.runtime = _load_runtime(runtime)
        else:
            self.runtime = runtime
        self.data_root = Path(data_root if data_root is not None else ".altar-in-process-data")
        self.data_root = self.data_root.absolute()
        self.gpus = gpus
        self.max_timeout_s = max_timeout_s
        self.slots = slots
        self.fabric: InProcessFabric | ProcessFabric
        if fabric is not None:
            self.fabric = fabric
        elif self.runtime == COMMAND_RUNTIME:
            self.fabric = ProcessFabric(self.data_root)
        else:
            self.fabric = InProcessFabric()

    def reopen(self) -> InProcessExecutionBackend:
        """A fresh instance on the same provider and options (a restarted process).

        Supervised processes are found again through the data root alone; an in-memory
        fabric is shared.
        """
        shared = self.fabric if isinstance(self.fabric, InProcessFabric) else None
        return type(self)(
            self.runtime,
            data_root=self.data_root,
            gpus=self.gpus,
            max_timeout_s=self.max_timeout_s,
            slots=self.slots,
            fabric=shared,
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
        if resources.gpu is not None and resources.count > self.gpus:
            raise UnsupportedCapabilityError(
                f"task {spec.kind!r} requires {resources.count} GPU(s) from pool "
                f"{resources.gpu!r} but this in-process backend offers {self.gpus}; "
                "run it on a backend with GPUs (a GPU task never runs on CPU)",
                capability="gpu",
            )
        return LaunchedTask.of(spec)

    async def check_spec(self, spec: ContainerTaskSpec) -> None:
        self._timeout_for(spec)
        self._launch_record(spec)  # refuses a GPU request this backend cannot serve

    async def submit(self, spec: ContainerTaskSpec) -> TaskHandle:
        timeout_s = self._timeout_for(spec)
        launched = self._launch_record(spec)
        fabric = self.fabric
        if isinstance(fabric, ProcessFabric):
            await asyncio.to_thread(self.data_root.mkdir, parents=True, exist_ok=True)
            checks = self._input_checks(spec)
            launch = functools.partial(fabric.launch, spec, launched, timeout_s, checks)
            external_id = await asyncio.to_thread(launch)
        else:
            runtime = None if self.runtime == "command" else self.runtime
            if runtime is not None:
                await asyncio.to_thread(self.data_root.mkdir, parents=True, exist_ok=True)
                if self.input_digest_verification == "task":
                    runtime = _checking_inputs_first(runtime, self.path_resolver())
            external_id = fabric.launch(spec, launched, timeout_s, runtime, self.data_root)
        return mint_handle(self.name, spec, external_id)

    def _input_checks(self, spec: ContainerTaskSpec) -> list[tuple[str, str]]:
        """For "task" verification: (path, digest) of each input the task checks first."""
        if self.input_digest_verification != "task":
            return []
        resolver = self.path_resolver()
        return [
            (resolver.resolve(t.logical_path), t.digest)
            for t in spec.inputs
            if t.digest is not None
        ]

    async def _inspect(
        self, external_id: str, *, with_log: bool = False
    ) -> FabricTask | ProcessTask | None:
        if isinstance(self.fabric, ProcessFabric):
            inspect = functools.partial(self.fabric.inspect, external_id, with_log=with_log)
            return await asyncio.to_thread(inspect)
        return self.fabric.inspect(external_id)

    async def poll(self, handles: list[TaskHandle]) -> list[TaskStatus]:
        statuses = []
        for handle in handles:
            task = await self._inspect(handle.external_id)
            if task is None:
                statuses.append(
                    TaskStatus(
                        handle,
                        TaskState.FAILED,
                        TaskFailure(
                            "container_missing",
                            f"task {handle.external_id} is not known to this in-process "
                            f"backend (data root {self.data_root})",
                        ),
                    )
                )
            else:
                statuses.append(TaskStatus(handle, task.state, task.failure))
        return statuses

    async def list_submissions(self, run: str) -> list[TaskHandle] | None:
        found = await asyncio.to_thread(self.fabric.of_run, run)
        return [mint_handle(self.name, spec, external_id) for external_id, spec in found]

    async def cancel(self, handle: TaskHandle) -> None:
        await asyncio.to_thread(self.fabric.kill, handle.external_id)

    async def cleanup(self, handles: list[TaskHandle]) -> None:
        for handle in handles:
            await asyncio.to_thread(self.fabric.kill, handle.external_id)
            await asyncio.to_thread(self.fabric.remove, handle.external_id)

    async def failure_detail(self, handle: TaskHandle) -> str | None:
        task = await self._inspect(handle.external_id, with_log=True)
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

    def _stager(self) -> LocalStager:
        verify = self.input_digest_verification != "task"  # "task": the task judges its inputs
        return LocalStager(self.host_path, backend=self.name, verify=verify)

    async def stage_inputs(self, transfers: list[Transfer]) -> None:
        await asyncio.to_thread(self._stager().stage_all, transfers)

    async def collect_outputs(self, transfers: list[Transfer]) -> None:
        await asyncio.to_thread(self._collect_outputs, transfers)

    def _collect_outputs(self, transfers: list[Transfer]) -> None:
        for transfer in transfers:
            collect_output(self.host_path(transfer.logical_path), transfer, backend=self.name)


class InProcessTaskVerifyingBackend(InProcessExecutionBackend):
    """The reference with ``"task"`` verification: each task hashes its inputs before it runs.

    ``stage_inputs`` copies bytes without judging them; a task whose digest-bearing input does
    not match fails with ``input_digest_mismatch`` and its command (or runtime) never runs. A
    runtime that raises TransferIntegrityError (after its own check) fails the same way.
    """

    input_digest_verification: ClassVar[DigestVerification | None] = "task"


def _load_runtime(reference: str) -> Runtime:
    """Import ``module:attribute`` (how a plan file names a runtime in its backend options)."""
    module_name, _, attribute = reference.partition(":")
    if not module_name or not attribute:
        raise ValueError(
            f"runtime must be {COMMAND_RUNTIME!r} or name a callable as 'module:function', got "
            f"{reference!r} (for example 'altar.conformance.reference:run_command_locally')"
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
