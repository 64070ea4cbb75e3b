"""The ``ExecutionBackend`` contract every backend implements."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import ClassVar, Literal

from altar.execution.types import (
    Capacity,
    ContainerTaskSpec,
    PathResolver,
    TaskHandle,
    TaskLogs,
    TaskStatus,
    Transfer,
)

__all__ = [
    "EXECUTION_BACKEND_GROUP",
    "DigestVerification",
    "ExecutionBackend",
    "poll_interval_cap",
    "poll_sequentially",
    "submit_window",
]

EXECUTION_BACKEND_GROUP = "altar.execution_backends"

DigestVerification = Literal["staging", "task"]


class ExecutionBackend(ABC):
    """Submits container tasks to one compute fabric and reports their state.

    Subclasses set ``name`` (also their registry key) and ``input_digest_verification``
    (``"staging"``: :meth:`stage_inputs` hashes what it materializes; ``"task"``: each task
    checks its own inputs and fails with ``input_digest_mismatch``), and implement
    :meth:`submit` and :meth:`poll`. Options are keyword-only constructor arguments.

    Backends never interpret a task's command. They map the spec onto provider primitives
    exactly, and raise :class:`~altar.execution.UnsupportedCapabilityError` for anything the
    provider cannot represent. A provider that cannot be reached raises
    :class:`~altar.execution.BackendUnavailableError`; it is never reported as a missing task.
    """

    name: ClassVar[str]
    input_digest_verification: ClassVar[DigestVerification | None] = None
    #: How soon a driver polls again after a change (it backs off from there while nothing
    #: changes). A backend whose poll is one cheap request for all tasks may lower it.
    poll_interval_s: ClassVar[float] = 0.2
    #: The longest pause a driver lets pass between polls, whatever its own backoff would
    #: allow; None (the default) leaves the pace to the driver. A backend whose poll is cheap
    #: and whose provider queries it paces itself (Slurm reads job records every poll and asks
    #: squeue once a minute) sets it to notice ends sooner. See :func:`poll_interval_cap`.
    max_poll_interval_s: ClassVar[float | None] = None
    #: True promises that :meth:`submit` of a spec whose ``altar.submission`` label matches a
    #: provider object this backend created earlier returns a handle to that object, in
    #: whatever state (created: start it; running; finished: adopt it, never replace it),
    #: instead of launching another. See :mod:`altar.execution.labels`.
    adopts_submissions: ClassVar[bool] = False
    #: The most submits a driver keeps in flight at once for this backend; None (the default)
    #: leaves the driver's own window (the runner's ``SUBMIT_WINDOW``, 64). That window bounds
    #: how many attempts a crash leaves in doubt, which only a backend that adopts by key
    #: (``adopts_submissions``) never runs twice: the runner honours a wider window only then.
    #: A backend that answers concurrent submits with one provider call (Slurm's job arrays)
    #: opens it so one call can take a whole batch. See :func:`submit_window`.
    submit_window: ClassVar[int | None] = None
    #: Modules the backend imports only on first use (its provider SDK); the registry checks
    #: them with importlib.util.find_spec, so ``altar backends`` can give the install hint
    #: without importing them.
    requires: ClassVar[tuple[str, ...]] = ()
    #: False when :meth:`stage_inputs` stages single files only, so ``altar check`` refuses
    #: a local directory input as staging would (default True: a directory may be staged).
    stages_directories: ClassVar[bool] = True

    @abstractmethod
    async def submit(self, spec: ContainerTaskSpec) -> TaskHandle:
        """Launch one task and return a durable handle once the provider accepted it.

        Submitting a spec that was submitted before must not raise: a provider that mints
        fresh ids launches another task; one that names tasks by spec adopts an active task
        and replaces a finished one.
        """

    @abstractmethod
    async def poll(self, handles: list[TaskHandle]) -> list[TaskStatus]:
        """Return one current status per handle, in the same order, without waiting."""

    async def list_submissions(self, run: str) -> list[TaskHandle] | None:
        """Every provider object labelled ``altar.run == run``, one handle each, or None.

        None (the default) means "cannot list". A backend that can list returns handles that
        carry the objects' labels (``altar.task``, ``altar.attempt``, ``altar.submission``) and
        the same ``backend`` and ``external_id`` that :meth:`submit` returned for each object
        (the runner knows its own tasks by that pair and removes a listed object it does not
        know), so the runner can adopt what its journal expected and cancel and clean up what
        it does not own. Objects already removed are not listed and not counted by
        :meth:`capacity`.
        """
        return None

    async def capacity(self) -> Capacity:
        """Free slots per pool; an empty report means autoscaling or unknown.

        A driver subtracts its own submits still in flight from this report, so count a task
        here once its submit has returned: counting it earlier makes the driver count it twice
        and leave a slot idle.
        """
        return Capacity()

    async def stage_inputs(self, transfers: list[Transfer]) -> None:  # noqa: B027 (optional hook)
        """Materialize inputs where tasks read them (``"staging"`` backends verify digests here)."""

    async def collect_outputs(self, transfers: list[Transfer]) -> None:  # noqa: B027 (optional hook)
        """Copy declared outputs from where tasks wrote them back to their ``uri``."""

    def path_resolver(self) -> PathResolver:
        """How logical paths appear inside a task."""
        return PathResolver()

    async def cancel(self, handle: TaskHandle) -> None:  # noqa: B027 (optional hook)
        """Stop a task. Idempotent; never raises for a task that no longer exists."""

    async def cleanup(self, handles: list[TaskHandle]) -> None:  # noqa: B027 (optional hook)
        """Release provider resources held by finished tasks (containers, Jobs, sandboxes).

        Idempotent; never raises for a task that no longer exists. The default does nothing.
        """

    async def failure_detail(self, handle: TaskHandle) -> str | None:
        """The tail of a task's log, or None. Never raises for a missing task."""
        return None

    async def task_logs(self, handle: TaskHandle) -> TaskLogs | None:
        """A task's whole stdout and stderr (``altar logs``), or None if they cannot be had.

        Optional (the default returns None; ``altar logs`` then shows :meth:`failure_detail`).
        Never raises for a missing task; may be called while the task runs.
        """
        return None

    async def check_spec(self, spec: ContainerTaskSpec) -> None:  # noqa: B027 (optional hook)
        """Refuse now what :meth:`submit` would refuse (``altar check``, ``altar run --dry-run``).

        Raise :class:`~altar.execution.UnsupportedCapabilityError` (or ValueError) for
        resources, GPU types or options the provider cannot represent. Must not create
        anything. The default accepts every spec (submit still checks).
        """

    async def check_backend(self) -> list[tuple[str, str]]:
        """Problems with the backend's own setup, all at once (``altar check``, ``--dry-run``).

        Each is (the option it concerns, e.g. ``"partition"``, or ``""`` for none, such as
        credentials from the environment; one line naming the fix). Read-only: may ask the
        provider, must not create anything. The default finds none.
        """
        return []

    async def image_present(self, image: str) -> bool | None:
        """Whether ``image`` can be run: True, False (the provider cannot get it), or None.

        None means the backend cannot tell without running a task (the default).
        """
        return None

    async def image_digest(self, image: str) -> str | None:
        """The content digest (``sha256:...``) ``image`` would run as, or None if unknown.

        The task cache keys a task by it, so a tag that moves to other bytes misses. Only a
        digest the provider really uses belongs here (a local engine's image id); None (the
        default) leaves a tag uncacheable unless the plan trusts tags.
        """
        return None

    async def await_completion(
        self,
        handles: list[TaskHandle],
        *,
        interval_s: float = 1.0,
        max_interval_s: float = 10.0,
        timeout_s: float | None = None,
    ) -> list[TaskStatus]:
        """Poll until every handle is terminal and return the final statuses, in order.

        One :meth:`poll` call per round for the handles still open; the pause starts at
        ``interval_s`` and doubles up to ``max_interval_s`` while nothing finishes. Raises
        TimeoutError once ``timeout_s`` seconds have passed with handles still open. (altar
        0.3.0 left this unimplemented; a backend with a native wait may override it.)
        """
        import asyncio  # here, not at the top: importing the contract must not load asyncio

        final: dict[int, TaskStatus] = {}
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        pause = interval_s
        while True:
            open_indexes = [i for i in range(len(handles)) if i not in final]
            if not open_indexes:
                return [final[i] for i in range(len(handles))]
            statuses = await self.poll([handles[i] for i in open_indexes])
            finished = 0
            for index, status in zip(open_indexes, statuses, strict=True):
                if status.state.is_terminal:
                    final[index] = status
                    finished += 1
            if len(final) == len(handles):
                continue
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(
                    f"{len(handles) - len(final)} of {len(handles)} task(s) still open "
                    f"after {timeout_s} s"
                )
            pause = interval_s if finished else min(max_interval_s, pause * 2)
            if deadline is not None:
                pause = max(0.0, min(pause, deadline - time.monotonic()))
            await asyncio.sleep(pause)

    async def recover(self, failures: list[TaskStatus], *, banned: set[str]) -> list[TaskHandle]:
        """Restart transiently failed tasks (e.g. away from ``banned`` hosts); default: none.

        Kept for altar 0.3.0 compatibility. The plan runner retries by resubmitting specs.
        """
        return []


async def poll_sequentially(
    handles: list[TaskHandle], poll_one: Callable[[TaskHandle], Awaitable[TaskStatus]]
) -> list[TaskStatus]:
    """``poll`` for a provider whose native probe is per task: one ``poll_one`` per handle."""
    return [await poll_one(handle) for handle in handles]


def poll_interval_cap(
    backend: ExecutionBackend, driver_cap: float, poll_interval_s: float
) -> float:
    """The backoff cap a driver uses for ``backend``: its own ``driver_cap``, lowered to the
    backend's ``max_poll_interval_s`` if that is set, never below ``poll_interval_s``."""
    cap = getattr(backend, "max_poll_interval_s", None)
    if cap is None:
        return driver_cap
    return max(poll_interval_s, min(driver_cap, float(cap)))


def submit_window(backend: ExecutionBackend, driver_window: int) -> int:
    """How many submits a driver keeps in flight at once for ``backend``: the backend's own
    ``submit_window`` if it adopts by key (an in-doubt submit is then adopted, never run
    twice, however many there are), else the driver's own ``driver_window``."""
    own = getattr(backend, "submit_window", None)
    if own is None or not backend.adopts_submissions:
        return driver_window
    return max(1, int(own))
