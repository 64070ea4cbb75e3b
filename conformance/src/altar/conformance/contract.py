"""``ExecutionBackendContract``: the portability suite every execution backend subclasses.

A backend's test module subclasses the contract, provides a ``backend`` fixture wired to a
fake provider and implements the scripting hooks, which act on the fake *without* going
through the backend (the way a real provider changes under a backend's feet)::

    class TestMyBackend(ExecutionBackendContract):
        @pytest.fixture
        def backend(self, tmp_path): ...
        def finish_task(self, backend, handle, *, exit_code): ...
        def expire_task(self, backend, handle): ...
        def launched_timeout(self, backend, handle): ...

Every asynchronous test carries its own ``pytest.mark.asyncio`` marker, so the suite runs
whatever ``asyncio_mode`` the implementer configured (or none). Optional hooks left at their
defaults make the tests that need them skip with a reason; they never pass silently.

Tests that script a task's lifecycle (finish, expire, OOM-kill, restart, a failed input
check) submit the ``spec`` fixture with its image and command unchanged (only its labels,
``timeout_s``, memory request or inputs change), so a fake may give the fixture's command its
own meaning. Tests that only read back what was launched also change the command,
environment and resources; the image always comes from ``spec``.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import pytest
from altar.conformance.launched import GIB, LaunchedTask
from altar.execution import (
    EXECUTION_BACKEND_GROUP,
    BackendUnavailableError,
    Capacity,
    ContainerTaskSpec,
    ExecutionBackend,
    PathResolver,
    ResourceRequest,
    TaskHandle,
    TaskState,
    TaskStatus,
    Transfer,
    TransferIntegrityError,
    UnsupportedCapabilityError,
)
from altar.execution.registry import BackendRegistry

__all__ = ["CONFORMANCE_TIMEOUT_S", "MISSING_TASK_ID", "POLL_BOUND_S", "ExecutionBackendContract"]

CONFORMANCE_TIMEOUT_S = 90
"""The explicit ``timeout_s`` the timeout tests submit."""

POLL_BOUND_S = 5.0
"""How long one ``poll`` may take before the suite says it waited for a task."""

MISSING_TASK_ID = "altar-conformance-missing"
"""The ``external_id`` of a task no provider has ever seen."""

# Arguments a shell, a YAML renderer or an argv joiner would be tempted to touch.
HOSTILE_COMMAND = [
    "sh",
    "-c",
    'printf "%s\\n" "$@"',
    "conformance",
    "two  spaces",
    "'single' \"double\" `tick`",
    "$(touch /tmp/altar-conformance-injected) ${HOME} $$",
    "",
    "--flag=a b",
    "line one\nline two",
    "../../etc/passwd",
    "semi;colon|pipe&amp>redirect",
    "unicode µ ß 漢",
]

HOSTILE_ENV = {
    "ALTAR_CONFORMANCE_PLAIN": "1",
    "ALTAR_CONFORMANCE_SPACES": "a b  c",
    "ALTAR_CONFORMANCE_QUOTES": "'single' \"double\" `tick`",
    "ALTAR_CONFORMANCE_SUBST": "$(id) ${HOME} $$ %PATH%",
    "ALTAR_CONFORMANCE_NEWLINE": "one\ntwo",
    "ALTAR_CONFORMANCE_EMPTY": "",
    "ALTAR_CONFORMANCE_EQUALS": "k=v=w",
    "ALTAR_CONFORMANCE_UNICODE": "µ ß 漢",
}

# Values every provider's label syntax accepts (Kubernetes: 63 chars of [A-Za-z0-9._-]).
CONFORMANCE_LABELS = {
    "job_id": "J",
    "kind": "conformance",
    "model_id": "model.v1-a_b",
    "fold": "0",
}

_ACTIVE = (TaskState.PENDING, TaskState.RUNNING)

asyncio_test = pytest.mark.asyncio


def _missing_handle(backend: ExecutionBackend) -> TaskHandle:
    return TaskHandle(backend.name, MISSING_TASK_ID, {"job_id": "J"})


def _check_status(status: object, handle: TaskHandle) -> TaskStatus:
    assert isinstance(status, TaskStatus), f"poll must return TaskStatus objects, got {status!r}"
    assert isinstance(status.state, TaskState), f"state must be a TaskState, got {status.state!r}"
    assert status.handle.external_id == handle.external_id, (
        f"poll returned the status of {status.handle.external_id!r} for {handle.external_id!r}"
    )
    if status.state is TaskState.FAILED:
        assert status.failure is not None, "a FAILED status must carry a TaskFailure"
    else:
        assert status.failure is None, (
            f"only a FAILED status carries a failure; {status.state} carries {status.failure!r}"
        )
    return status


async def _poll(backend: ExecutionBackend, handles: list[TaskHandle]) -> list[TaskStatus]:
    """Poll with a bound: poll reports the current state and never waits for a task."""
    started = time.monotonic()
    try:
        statuses = await asyncio.wait_for(backend.poll(list(handles)), POLL_BOUND_S)
    except TimeoutError:
        pytest.fail(
            f"poll did not return within {POLL_BOUND_S} s; poll must report the current state "
            "of each task without waiting for any of them to finish"
        )
    elapsed = time.monotonic() - started
    assert elapsed < POLL_BOUND_S, (
        f"poll blocked the event loop for {elapsed:.1f} s; run blocking provider calls in a "
        "thread and never wait for a task inside poll"
    )
    assert isinstance(statuses, list), f"poll must return a list, got {type(statuses).__name__}"
    assert len(statuses) == len(handles), (
        f"poll must return exactly one status per handle: {len(handles)} handles, "
        f"{len(statuses)} statuses"
    )
    return [_check_status(s, h) for s, h in zip(statuses, handles, strict=True)]


async def _poll_one(backend: ExecutionBackend, handle: TaskHandle) -> TaskStatus:
    (status,) = await _poll(backend, [handle])
    return status


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class ExecutionBackendContract:
    """Subclass in a test module to run the portability suite against one backend.

    Required: the ``backend`` fixture and the hooks ``finish_task``, ``expire_task`` and
    ``launched_timeout``; ``fail_input_verification`` for a ``"task"`` verifying backend.
    Optional hooks (``write_task_log``, ``launched_task``, ``reopen``, ``oom_kill_task``,
    ``make_provider_unreachable``, ``unsupported_specs``) unlock more checks; left at their
    defaults those checks skip with the reason. Hooks are synchronous and receive the backend
    instance under test.
    """

    # The base class is not a test class; every subclass is (see __init_subclass__).
    __test__: ClassVar[bool] = False

    unlimited_timeout_s: ClassVar[int | None] = None
    """The limit a ``timeout_s=None`` task gets; set it when the provider caps task lifetime."""

    max_timeout_s: ClassVar[int | None] = None
    """The longest explicit ``timeout_s`` the provider accepts; a longer one must raise.

    Defaults to ``unlimited_timeout_s``: a capped provider gives a task without a limit its
    maximum, so that maximum is also the longest explicit limit (see :meth:`timeout_cap`).
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # pytest reads __test__ through inheritance: without this, subclasses would inherit
        # False and never be collected. A subclass may still set __test__ = False itself.
        if "__test__" not in cls.__dict__:
            cls.__test__ = True

    # ------------------------------------------------------------------ fixtures

    @pytest.fixture
    def backend(self) -> ExecutionBackend:
        """The backend under test, wired to a fake provider. Subclasses must override it."""
        raise NotImplementedError("Subclasses must provide a `backend` fixture")

    @pytest.fixture
    def spec(self) -> ContainerTaskSpec:
        """The task the lifecycle tests submit; override it if your fake needs another."""
        return ContainerTaskSpec(
            kind="conformance",
            image="busybox:latest",
            command=["true"],
            labels={"job_id": "J", "kind": "conformance"},
        )

    # ------------------------------------------------------------------ hooks

    def finish_task(self, backend: ExecutionBackend, handle: TaskHandle, *, exit_code: int) -> None:
        """Make the fake provider report that the task exited with ``exit_code``."""
        raise NotImplementedError(f"{type(self).__name__} must implement finish_task")

    def expire_task(self, backend: ExecutionBackend, handle: TaskHandle) -> None:
        """Make the fake show the task running past its deadline, as the provider would."""
        raise NotImplementedError(f"{type(self).__name__} must implement expire_task")

    def launched_timeout(self, backend: ExecutionBackend, handle: TaskHandle) -> int | None:
        """The limit the provider would enforce for the task, including its own defaults."""
        raise NotImplementedError(f"{type(self).__name__} must implement launched_timeout")

    def write_task_log(
        self, backend: ExecutionBackend, handle: TaskHandle, lines: list[str]
    ) -> bool:
        """Put ``lines`` in the task's log on the fake; return False if the backend reads no log."""
        return False

    def fail_input_verification(self, backend: ExecutionBackend, handle: TaskHandle) -> None:
        """For ``"task"`` verification: make the task's in-task digest check fail."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement fail_input_verification for a backend "
            'with input_digest_verification = "task"'
        )

    def launched_task(self, backend: ExecutionBackend, handle: TaskHandle) -> LaunchedTask | None:
        """What the provider was asked to run for ``handle``; None leaves mapping unchecked."""
        return None

    def reopen(self, backend: ExecutionBackend) -> ExecutionBackend | None:
        """A fresh backend instance on the same fake provider (a process restart), or None.

        The restart tests then pass the fresh instance to the other hooks; the cancel test
        polls a cancelled task through it, to see what the provider (not the process) says.
        """
        return None

    def oom_kill_task(self, backend: ExecutionBackend, handle: TaskHandle) -> bool:
        """Make the fake report an OOM kill of the task; return False if it cannot."""
        return False

    def make_provider_unreachable(self, backend: ExecutionBackend) -> bool:
        """Make the fake fail every request as an unreachable provider would (refused
        connections, 5xx); return False if it cannot."""
        return False

    def unsupported_specs(self, spec: ContainerTaskSpec) -> list[ContainerTaskSpec]:
        """Variants of ``spec`` the backend cannot represent and must refuse at submit."""
        return []

    # ------------------------------------------------------------------ helpers

    def timeout_cap(self) -> int | None:
        """The longest ``timeout_s`` the provider accepts: ``max_timeout_s``, else
        ``unlimited_timeout_s`` (None: the provider does not cap task lifetime)."""
        return self.max_timeout_s if self.max_timeout_s is not None else self.unlimited_timeout_s

    def _launched(self, backend: ExecutionBackend, handle: TaskHandle, what: str) -> LaunchedTask:
        launched = self.launched_task(backend, handle)
        if launched is None:
            pytest.skip(
                f"launched_task hook not implemented, so {what} cannot be read back from the "
                "provider; implement launched_task to check it"
            )
        assert isinstance(launched, LaunchedTask), (
            f"launched_task must return a LaunchedTask, got {launched!r}"
        )
        return launched

    def _reopen(self, backend: ExecutionBackend) -> ExecutionBackend:
        fresh = self.reopen(backend)
        if fresh is None:
            pytest.skip(
                "reopen hook not implemented, so handle durability across a restart is "
                "unchecked; return a fresh backend on the same fake provider to check it"
            )
        assert fresh is not backend, "reopen must build a new backend instance"
        assert isinstance(fresh, ExecutionBackend), f"reopen returned {fresh!r}"
        return fresh

    async def _submit_or_skip(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec, what: str
    ) -> TaskHandle:
        try:
            return await backend.submit(spec)
        except UnsupportedCapabilityError as error:
            pytest.skip(f"backend refuses {what} explicitly (UnsupportedCapabilityError: {error})")

    # ============================================================ 0.3.0 tests

    def test_name_is_a_nonempty_discriminator(self, backend: ExecutionBackend) -> None:
        assert isinstance(backend.name, str), f"name must be a str, got {backend.name!r}"
        assert backend.name, "name must not be empty"

    @asyncio_test
    async def test_submit_returns_handle_stamped_with_name_and_labels(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        handle = await backend.submit(spec)
        assert isinstance(handle, TaskHandle), f"submit must return a TaskHandle, got {handle!r}"
        assert handle.backend == backend.name
        assert handle.external_id, "the handle needs a non-empty external_id"
        assert handle.labels == spec.labels
        assert handle.plugin_identity == spec.plugin_identity

    @asyncio_test
    async def test_poll_empty_returns_empty(self, backend: ExecutionBackend) -> None:
        assert await backend.poll([]) == []

    @asyncio_test
    async def test_poll_returns_one_normalized_status_per_handle(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        handle = await backend.submit(spec)
        statuses = await _poll(backend, [handle])
        assert len(statuses) == 1

    @asyncio_test
    async def test_capacity_and_path_resolver_types(self, backend: ExecutionBackend) -> None:
        assert isinstance(await backend.capacity(), Capacity)
        resolver = backend.path_resolver()
        assert isinstance(resolver, PathResolver)
        assert resolver.resolve("jobs/J/x") == resolver.resolve("jobs/J/x")

    @asyncio_test
    async def test_zero_exit_succeeds_without_failure(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        handle = await backend.submit(spec)
        self.finish_task(backend, handle, exit_code=0)
        status = await _poll_one(backend, handle)
        assert status.state is TaskState.SUCCEEDED
        assert status.failure is None

    @asyncio_test
    async def test_nonzero_exit_fails_with_stable_exit_reason(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        handle = await backend.submit(spec)
        self.finish_task(backend, handle, exit_code=3)
        status = await _poll_one(backend, handle)
        assert status.state is TaskState.FAILED
        assert status.failure is not None
        assert status.failure.reason == "exit_3"
        assert status.failure.exit_code == 3
        assert status.failure.deterministic, "an application exit code is deterministic"
        assert status.failure.detail, "a failure needs a human-readable detail"

    @asyncio_test
    async def test_poll_preserves_handle_order(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        succeeded = await backend.submit(replace(spec, labels={**spec.labels, "shard": "0"}))
        failed = await backend.submit(replace(spec, labels={**spec.labels, "shard": "1"}))
        self.finish_task(backend, succeeded, exit_code=0)
        self.finish_task(backend, failed, exit_code=1)
        statuses = await _poll(backend, [failed, succeeded])
        assert [s.handle.labels["shard"] for s in statuses] == ["1", "0"]
        assert [s.state for s in statuses] == [TaskState.FAILED, TaskState.SUCCEEDED]

    @asyncio_test
    async def test_resubmitting_an_active_spec_does_not_run_it_twice_at_once(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        first = await backend.submit(spec)
        second = await backend.submit(spec)  # must not raise
        assert second.labels == spec.labels
        assert second.plugin_identity == spec.plugin_identity
        self.finish_task(backend, first, exit_code=0)
        if second.external_id == first.external_id:
            # Adopted: both handles name the one running task.
            statuses = await _poll(backend, [first, second])
            assert [s.state for s in statuses] == [TaskState.SUCCEEDED, TaskState.SUCCEEDED]
        else:
            # A second, independent task: finishing the first must not finish it.
            status = await _poll_one(backend, second)
            assert not status.state.is_terminal, (
                "a resubmitted task finished together with the first submission"
            )
            self.finish_task(backend, second, exit_code=0)
            assert (await _poll_one(backend, second)).state is TaskState.SUCCEEDED

    @pytest.mark.parametrize("first_exit", [0, 3])
    @asyncio_test
    async def test_resubmitting_after_a_terminal_outcome_runs_the_task_again(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec, first_exit: int
    ) -> None:
        first = await backend.submit(spec)
        self.finish_task(backend, first, exit_code=first_exit)
        expected = TaskState.SUCCEEDED if first_exit == 0 else TaskState.FAILED
        assert (await _poll_one(backend, first)).state is expected
        again = await backend.submit(spec)
        assert again.labels == spec.labels
        rerun = await _poll_one(backend, again)
        assert not rerun.state.is_terminal, (
            f"a resubmitted spec must run again, not reuse the finished task's outcome "
            f"({rerun.state})"
        )
        self.finish_task(backend, again, exit_code=0)
        final = await _poll_one(backend, again)
        assert final.state is TaskState.SUCCEEDED
        assert final.failure is None

    @asyncio_test
    async def test_missing_task_is_a_terminal_failure(self, backend: ExecutionBackend) -> None:
        status = await _poll_one(backend, _missing_handle(backend))
        assert status.state is TaskState.FAILED, (
            f"a task the provider cannot find must fail, not stay {status.state}"
        )
        assert status.failure is not None
        assert status.failure.reason == "container_missing"
        assert not status.failure.deterministic, "a missing task may be retried"

    @asyncio_test
    async def test_failure_detail_returns_the_end_of_a_failed_tasks_log(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        handle = await backend.submit(spec)
        lines = [f"log line {i}" for i in range(100)]
        wrote = self.write_task_log(backend, handle, lines)
        self.finish_task(backend, handle, exit_code=3)
        assert (await _poll_one(backend, handle)).state is TaskState.FAILED
        detail = await backend.failure_detail(handle)
        assert detail is None or isinstance(detail, str)
        if wrote:
            assert detail is not None, "the task has a log, so failure_detail must return it"
            assert detail.rstrip("\n").splitlines()[-1] == "log line 99"
            assert "log line 0" not in detail, "failure_detail returns the tail of the log"

    @asyncio_test
    async def test_failure_detail_of_a_missing_task_does_not_raise(
        self, backend: ExecutionBackend
    ) -> None:
        detail = await backend.failure_detail(_missing_handle(backend))
        assert detail is None or isinstance(detail, str)

    @asyncio_test
    async def test_timeout_reaches_the_platform(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        unlimited = await backend.submit(replace(spec, timeout_s=None))
        assert self.launched_timeout(backend, unlimited) == self.unlimited_timeout_s, (
            "a task without timeout_s must get no limit, or the provider's maximum when it "
            "caps task lifetime (set unlimited_timeout_s)"
        )
        limited = await backend.submit(replace(spec, timeout_s=CONFORMANCE_TIMEOUT_S))
        assert self.launched_timeout(backend, limited) == CONFORMANCE_TIMEOUT_S

    @asyncio_test
    async def test_expired_task_fails_with_timeout_reason(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        handle = await backend.submit(replace(spec, timeout_s=CONFORMANCE_TIMEOUT_S))
        self.expire_task(backend, handle)
        status = await _poll_one(backend, handle)
        assert status.state is TaskState.FAILED
        assert status.failure is not None
        assert status.failure.reason == "timeout"

    @asyncio_test
    async def test_input_digest_mismatch_is_rejected_before_compute(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec, tmp_path: Path
    ) -> None:
        source = tmp_path / "weights.bin"
        source.write_bytes(b"actual bytes")
        mismatched = Transfer(
            uri=str(source),
            logical_path="models/conformance/weights.bin",
            digest=_digest(b"expected bytes"),
        )
        await self._check_rejected(backend, spec, mismatched)
        if backend.input_digest_verification == "staging":
            await backend.stage_inputs([replace(mismatched, digest=_digest(b"actual bytes"))])

    @asyncio_test
    async def test_input_digest_on_a_directory_is_rejected(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec, tmp_path: Path
    ) -> None:
        directory = tmp_path / "weights"
        directory.mkdir()
        (directory / "part-0.bin").write_bytes(b"part")
        transfer = Transfer(
            uri=str(directory),
            logical_path="models/conformance/weights",
            digest=_digest(b"part"),
        )
        await self._check_rejected(backend, spec, transfer, match="regular file")

    async def _check_rejected(
        self,
        backend: ExecutionBackend,
        spec: ContainerTaskSpec,
        transfer: Transfer,
        match: str | None = None,
    ) -> None:
        mode = backend.input_digest_verification
        if mode == "staging":
            with pytest.raises(TransferIntegrityError, match=match):
                await backend.stage_inputs([transfer])
        elif mode == "task":
            handle = await backend.submit(replace(spec, inputs=[transfer]))
            self.fail_input_verification(backend, handle)
            status = await _poll_one(backend, handle)
            assert status.state is TaskState.FAILED
            assert status.failure is not None
            assert status.failure.reason == "input_digest_mismatch"
            if match is None:
                assert status.failure.deterministic, "a digest mismatch is deterministic"
        else:
            pytest.fail(_NO_VERIFICATION_MODE.format(name=type(backend).__name__, mode=mode))

    # ============================================================ beyond 0.3.0

    def test_declares_where_input_digests_are_verified(self, backend: ExecutionBackend) -> None:
        mode = backend.input_digest_verification
        if mode not in ("staging", "task"):
            pytest.fail(_NO_VERIFICATION_MODE.format(name=type(backend).__name__, mode=mode))

    def test_backend_is_registered_under_its_name(self, backend: ExecutionBackend) -> None:
        registry = BackendRegistry()  # installed entry points only, nothing cached
        if backend.name not in registry.names():
            pytest.skip(
                f"no installed distribution registers {backend.name!r} under the "
                f"{EXECUTION_BACKEND_GROUP!r} entry-point group, so `altar` cannot find it; "
                "add the entry point to check it"
            )
        # Loads and validates as `altar run` would: one distribution, a subclass, name == key.
        registered = registry.get(backend.name)
        assert isinstance(backend, registered), (
            f"entry point {backend.name!r} loads {registered.__module__}."
            f"{registered.__qualname__}, not the backend under test "
            f"({type(backend).__module__}.{type(backend).__qualname__})"
        )

    @asyncio_test
    async def test_image_and_command_reach_the_provider_unchanged(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        handle = await backend.submit(replace(spec, command=list(HOSTILE_COMMAND)))
        launched = self._launched(backend, handle, "the image and command")
        assert launched.image == spec.image, "the image must reach the provider unchanged"
        assert launched.command == HOSTILE_COMMAND, (
            "the command must reach the provider as the same argv: no quoting, joining, "
            "splitting, prefixing or dropped arguments"
        )

    @asyncio_test
    async def test_env_values_reach_the_provider_exactly(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        handle = await self._submit_or_skip(
            backend, replace(spec, env=dict(HOSTILE_ENV)), "environment values"
        )
        launched = self._launched(backend, handle, "the environment")
        seen = {key: launched.env.get(key) for key in HOSTILE_ENV}
        assert seen == HOSTILE_ENV, "every env value must reach the provider byte for byte"

    @asyncio_test
    async def test_labels_reach_the_provider_exactly(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        handle = await backend.submit(replace(spec, labels=dict(CONFORMANCE_LABELS)))
        assert handle.labels == CONFORMANCE_LABELS
        launched = self._launched(backend, handle, "the labels")
        seen = {key: launched.labels.get(key) for key in CONFORMANCE_LABELS}
        assert seen == CONFORMANCE_LABELS, "every label must reach the provider unchanged"

    @asyncio_test
    async def test_cpu_request_reaches_the_provider_exactly(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        request = replace(spec, resources=ResourceRequest(cpu=1.5))
        handle = await self._submit_or_skip(backend, request, "a CPU request")
        launched = self._launched(backend, handle, "the CPU request")
        assert launched.cpu is not None, "1.5 CPUs were requested; the provider got no request"
        assert float(launched.cpu) == 1.5, (
            f"1.5 CPUs were requested; the provider was asked for {launched.cpu}"
        )

    @asyncio_test
    async def test_memory_request_reaches_the_provider_exactly(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        request = replace(spec, resources=ResourceRequest(memory_gb=1.5))
        handle = await self._submit_or_skip(backend, request, "a memory request")
        launched = self._launched(backend, handle, "the memory request")
        assert launched.memory_bytes == int(1.5 * GIB), (
            f"memory_gb=1.5 is {int(1.5 * GIB)} bytes (GiB); the provider was asked for "
            f"{launched.memory_bytes}"
        )

    @asyncio_test
    async def test_gpu_request_is_never_turned_into_cpu_work(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        request = replace(spec, resources=ResourceRequest(gpu="gpu", count=1))
        try:
            handle = await backend.submit(request)
        except UnsupportedCapabilityError:
            return  # refusing a GPU task explicitly is correct
        launched = self._launched(backend, handle, "the GPU request")
        assert launched.gpu_count == 1, (
            f"a task that requires 1 GPU was launched with {launched.gpu_count}; raise "
            "UnsupportedCapabilityError instead of running GPU work on CPU"
        )

    @asyncio_test
    async def test_gpu_count_reaches_the_provider_exactly(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        request = replace(spec, resources=ResourceRequest(gpu="gpu", count=2))
        handle = await self._submit_or_skip(backend, request, "a 2-GPU request")
        launched = self._launched(backend, handle, "the GPU count")
        assert launched.gpu_count == 2, (
            f"ResourceRequest.count is the exact number of devices: 2 requested, "
            f"{launched.gpu_count} launched"
        )

    @asyncio_test
    async def test_cpu_task_is_given_no_gpu(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        handle = await backend.submit(replace(spec, resources=ResourceRequest()))
        launched = self._launched(backend, handle, "the GPU count of a CPU task")
        assert launched.gpu_count == 0, "a task with resources.gpu=None is CPU only"

    @asyncio_test
    async def test_unsupported_specs_are_rejected_at_submit(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        refused = self.unsupported_specs(spec)
        if not refused:
            pytest.skip(
                "unsupported_specs names no spec, so explicit refusal is unchecked; return the "
                "specs your provider cannot represent to check that submit refuses them"
            )
        for variant in refused:
            with pytest.raises(UnsupportedCapabilityError):
                await backend.submit(variant)

    @asyncio_test
    async def test_cancel_stops_a_running_task_and_is_idempotent(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        handle = await backend.submit(spec)
        assert (await _poll_one(backend, handle)).state in _ACTIVE
        await backend.cancel(handle)
        await backend.cancel(handle)
        status = await _poll_one(backend, handle)
        assert status.state is TaskState.FAILED, (
            f"a cancelled task must read as FAILED, not {status.state}"
        )
        fresh = self.reopen(backend)
        if fresh is not None:
            # What the provider says, not what this process remembers: the task must be stopped.
            elsewhere = await _poll_one(fresh, handle)
            assert elsewhere.state is TaskState.FAILED, (
                f"after cancel, a fresh backend still reads the task as {elsewhere.state}; "
                "cancel must stop the task at the provider, not only in this process"
            )

    @asyncio_test
    async def test_cancel_of_a_missing_task_does_not_raise(self, backend: ExecutionBackend) -> None:
        await backend.cancel(_missing_handle(backend))
        await backend.cancel(_missing_handle(backend))

    @asyncio_test
    async def test_cleanup_is_idempotent(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        handle = await backend.submit(spec)
        self.finish_task(backend, handle, exit_code=0)
        assert (await _poll_one(backend, handle)).state is TaskState.SUCCEEDED
        await backend.cleanup([handle])
        await backend.cleanup([handle])
        await _poll(backend, [handle])  # still one well-formed status per handle

    @asyncio_test
    async def test_cleanup_of_a_missing_task_does_not_raise(
        self, backend: ExecutionBackend
    ) -> None:
        await backend.cleanup([_missing_handle(backend)])
        await backend.cleanup([_missing_handle(backend)])

    @asyncio_test
    async def test_handle_survives_a_restart_while_running(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        handle = await backend.submit(spec)
        fresh = self._reopen(backend)
        status = await _poll_one(fresh, handle)
        assert status.state in _ACTIVE, (
            f"after a restart the running task reads as {status.state} "
            f"({status.failure}); external_id must be enough to find it again"
        )
        self.finish_task(fresh, handle, exit_code=0)
        assert (await _poll_one(fresh, handle)).state is TaskState.SUCCEEDED

    @pytest.mark.parametrize("exit_code", [0, 3])
    @asyncio_test
    async def test_handle_survives_a_restart_after_it_finished(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec, exit_code: int
    ) -> None:
        handle = await backend.submit(spec)
        self.finish_task(backend, handle, exit_code=exit_code)
        fresh = self._reopen(backend)
        status = await _poll_one(fresh, handle)
        if exit_code == 0:
            assert status.state is TaskState.SUCCEEDED
        else:
            assert status.state is TaskState.FAILED
            assert status.failure is not None
            assert status.failure.reason == f"exit_{exit_code}"

    @asyncio_test
    async def test_deadline_survives_a_restart(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        handle = await backend.submit(replace(spec, timeout_s=CONFORMANCE_TIMEOUT_S))
        fresh = self._reopen(backend)
        assert self.launched_timeout(fresh, handle) == CONFORMANCE_TIMEOUT_S
        self.expire_task(fresh, handle)
        status = await _poll_one(fresh, handle)
        assert status.state is TaskState.FAILED
        assert status.failure is not None
        assert status.failure.reason == "timeout", (
            "the deadline must live with the provider (or the handle), not in the process "
            "that submitted the task"
        )

    @asyncio_test
    async def test_an_unreachable_provider_is_not_a_missing_task(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        handle = await backend.submit(spec)
        if not self.make_provider_unreachable(backend):
            pytest.skip(
                "make_provider_unreachable hook not implemented, so outage handling is "
                "unchecked; make the fake fail requests as the unreachable provider would"
            )
        try:
            statuses = await _poll(backend, [handle])
        except BackendUnavailableError:
            return  # transient: the caller polls again later
        terminal = [s for s in statuses if s.state.is_terminal]
        assert not terminal, (
            f"the provider could not be asked, yet poll reported {terminal[0].state} "
            f"({terminal[0].failure}); raise BackendUnavailableError instead: the task may "
            "well be running"
        )

    @asyncio_test
    async def test_poll_returns_promptly_while_a_task_runs(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        handle = await backend.submit(spec)
        # _poll fails if one poll takes POLL_BOUND_S; a running task must read as active.
        statuses = await _poll(backend, [handle, _missing_handle(backend), handle])
        assert statuses[0].state in _ACTIVE
        assert statuses[1].state is TaskState.FAILED
        assert statuses[2].state in _ACTIVE

    @asyncio_test
    async def test_timeout_above_the_provider_maximum_is_rejected(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        cap = self.timeout_cap()
        if cap is None:
            pytest.skip(
                "max_timeout_s and unlimited_timeout_s are None: the provider does not cap "
                "task lifetime"
            )
        # UnsupportedCapabilityError is a ValueError; the message names the maximum.
        with pytest.raises(ValueError, match=str(cap)):
            await backend.submit(replace(spec, timeout_s=cap + 1))

    @asyncio_test
    async def test_timeout_at_the_provider_maximum_is_accepted(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        cap = self.timeout_cap()
        if cap is None:
            pytest.skip(
                "max_timeout_s and unlimited_timeout_s are None: the provider does not cap "
                "task lifetime"
            )
        handle = await backend.submit(replace(spec, timeout_s=cap))
        assert self.launched_timeout(backend, handle) == cap

    @asyncio_test
    async def test_oom_kill_is_reported_as_oom_killed(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        try:
            handle = await backend.submit(replace(spec, resources=ResourceRequest(memory_gb=1)))
        except UnsupportedCapabilityError:
            handle = await backend.submit(spec)
        if not self.oom_kill_task(backend, handle):
            pytest.skip(
                "oom_kill_task hook not implemented, so OOM reporting is unchecked; make the "
                "fake report a memory kill the way the provider does and return True"
            )
        status = await _poll_one(backend, handle)
        assert status.state is TaskState.FAILED
        assert status.failure is not None
        assert status.failure.reason == "oom_killed", (
            f"a memory kill must read as oom_killed, not {status.failure.reason!r}"
        )
        assert not status.failure.deterministic, "an OOM kill may succeed on a bigger machine"

    @asyncio_test
    async def test_rejected_input_leaves_the_source_untouched(
        self, backend: ExecutionBackend, tmp_path: Path
    ) -> None:
        if backend.input_digest_verification != "staging":
            pytest.skip("only a staging backend copies inputs before a task runs")
        source = tmp_path / "weights.bin"
        source.write_bytes(b"actual bytes")
        mismatched = Transfer(
            uri=str(source),
            logical_path="models/conformance/untouched.bin",
            digest=_digest(b"expected bytes"),
        )
        with pytest.raises(TransferIntegrityError):
            await backend.stage_inputs([mismatched])
        assert source.read_bytes() == b"actual bytes", "staging must never alter its source"

    @asyncio_test
    async def test_collect_outputs_moves_the_bytes(
        self, backend: ExecutionBackend, tmp_path: Path
    ) -> None:
        cls = type(backend)
        if backend.input_digest_verification == "task":
            pytest.skip('a "task" backend keeps inputs and outputs on the tasks\' volume')
        if (
            cls.stage_inputs is ExecutionBackend.stage_inputs
            or cls.collect_outputs is ExecutionBackend.collect_outputs
        ):
            pytest.skip("the backend does not move bytes (stage_inputs/collect_outputs not set)")
        # Staging writes where tasks read; collecting reads where tasks write. Both sides are
        # the task storage, so a staged file must come back byte for byte.
        data = bytes(range(256)) * 257 + b"\x00altar\n"
        source = tmp_path / "roundtrip-source.bin"
        source.write_bytes(data)
        logical = "conformance/roundtrip/data.bin"
        await backend.stage_inputs([Transfer(str(source), logical, digest=_digest(data))])
        destination = tmp_path / "collected" / "data.bin"
        await backend.collect_outputs([Transfer(str(destination), logical)])
        assert destination.is_file(), f"collect_outputs did not write {destination}"
        assert destination.read_bytes() == data, "collect_outputs changed the bytes"


_NO_VERIFICATION_MODE = (
    "{name} declares input_digest_verification = {mode!r}; declare where input digests are "
    'verified: "staging" (stage_inputs hashes what it copies and raises '
    'TransferIntegrityError) or "task" (each task checks its inputs and fails with '
    "input_digest_mismatch)"
)
