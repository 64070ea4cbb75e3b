"""``ExecutionBackendContract``: the portability suite every execution backend subclasses.

(Long by design: the suite is one class whose methods are its tests, so backends subclass a
single name; its helpers live in ``_polling``, ``looplag`` and ``adoption``.)

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

import hashlib
import re
from collections.abc import Awaitable
from dataclasses import replace
from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import pytest
from altar.conformance._polling import (
    ACTIVE,
    MISSING_TASK_ID,
    POLL_BOUND_S,
    expect_failure,
    expect_state,
    expect_states,
    missing_handle,
    poll,
    poll_one,
)
from altar.conformance.adoption import AdoptionChecks
from altar.conformance.endings import ProviderEndingChecks
from altar.conformance.launched import GIB, LaunchedTask
from altar.conformance.looplag import measure_blocking
from altar.conformance.provider import ProviderChecks
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
    Transfer,
    TransferIntegrityError,
    UnsupportedCapabilityError,
)
from altar.execution.registry import BackendRegistry

__all__ = ["CONFORMANCE_TIMEOUT_S", "MISSING_TASK_ID", "POLL_BOUND_S", "ExecutionBackendContract"]

CONFORMANCE_TIMEOUT_S = 90
"""The explicit ``timeout_s`` the timeout tests submit."""


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
    # Surrounding whitespace is part of the value: no stripping, no trimming of newlines.
    "ALTAR_CONFORMANCE_LEADING": "  leading",
    "ALTAR_CONFORMANCE_TRAILING": "trailing \t",
    "ALTAR_CONFORMANCE_BLANK": " ",
    "ALTAR_CONFORMANCE_NEWLINES": "\nwrapped\n",
}

# A plugin identity as a plan or journal carries it (plain data, not None).
PLUGIN_IDENTITY = {"plugin": "altar-conformance", "version": "0.2", "kind": "conformance"}

# Values every provider's label syntax accepts (Kubernetes: 63 chars of [A-Za-z0-9._-]).
CONFORMANCE_LABELS = {
    "job_id": "J",
    "kind": "conformance",
    "model_id": "model.v1-a_b",
    "fold": "0",
}

asyncio_test = pytest.mark.asyncio

T = TypeVar("T")


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class ExecutionBackendContract(ProviderChecks, AdoptionChecks, ProviderEndingChecks):
    """Subclass in a test module to run the portability suite against one backend.

    Required: the ``backend`` fixture and the hooks ``finish_task``, ``expire_task`` and
    ``launched_timeout``; ``fail_input_verification`` for a ``"task"`` verifying backend.
    Optional hooks (``write_task_log``, ``launched_task``, ``reopen``, ``oom_kill_task``,
    ``make_provider_unreachable``, ``unsupported_specs``, ``end_by_provider``, and those of
    the mixins) unlock more checks; left at their defaults those checks skip with the reason.
    Hooks are synchronous and receive the backend instance under test.
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

    @pytest.fixture
    def other_image(self, spec: ContainerTaskSpec) -> str:
        """A second image the fake holds, to prove ``spec.image`` is not hard-coded."""
        return "alpine:3.20" if spec.image != "alpine:3.20" else "busybox:1.36"

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
        assert fresh is not backend, (
            "reopen returned the backend under test, expected a new instance"
        )
        assert isinstance(fresh, ExecutionBackend), (
            f"reopen returned {fresh!r}, expected an ExecutionBackend"
        )
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
        assert handle.backend == backend.name, (
            f"the handle names backend {handle.backend!r}, expected {backend.name!r} (the "
            "backend's name)"
        )
        assert handle.external_id, f"the handle needs a non-empty external_id, got {handle!r}"
        assert handle.labels == spec.labels, (
            f"the handle carries labels {handle.labels!r}, expected the spec's {spec.labels!r}"
        )
        assert handle.plugin_identity == spec.plugin_identity, (
            f"the handle carries plugin_identity {handle.plugin_identity!r}, expected the "
            f"spec's {spec.plugin_identity!r}"
        )

    @asyncio_test
    async def test_plugin_identity_is_kept_on_the_handle(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        handle = await backend.submit(replace(spec, plugin_identity=dict(PLUGIN_IDENTITY)))
        assert handle.plugin_identity == PLUGIN_IDENTITY, (
            "submit must copy spec.plugin_identity onto the handle: the runner records which "
            f"plugin produced a task from it (got {handle.plugin_identity!r}, expected "
            f"{PLUGIN_IDENTITY!r})"
        )

    @asyncio_test
    async def test_poll_empty_returns_empty(self, backend: ExecutionBackend) -> None:
        statuses = await backend.poll([])
        assert statuses == [], f"poll([]) must return [], got {statuses!r}"

    @asyncio_test
    async def test_poll_returns_one_normalized_status_per_handle(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        handle = await backend.submit(spec)
        statuses = await poll(backend, [handle])
        assert len(statuses) == 1, f"one handle polled, {len(statuses)} statuses returned"

    @asyncio_test
    async def test_capacity_and_path_resolver_types(self, backend: ExecutionBackend) -> None:
        capacity = await backend.capacity()
        assert isinstance(capacity, Capacity), (
            f"capacity() must return a Capacity, got {capacity!r}"
        )
        resolver = backend.path_resolver()
        assert isinstance(resolver, PathResolver), (
            f"path_resolver() must return a PathResolver, got {resolver!r}"
        )
        first, second = resolver.resolve("jobs/J/x"), resolver.resolve("jobs/J/x")
        assert first == second, f"resolving jobs/J/x twice gave {first!r}, then {second!r}"

    @asyncio_test
    async def test_zero_exit_succeeds_without_failure(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        handle = await backend.submit(spec)
        self.finish_task(backend, handle, exit_code=0)
        status = await poll_one(backend, handle)
        expect_state(status, TaskState.SUCCEEDED, "exit 0 is success")

    @asyncio_test
    async def test_nonzero_exit_fails_with_stable_exit_reason(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        handle = await backend.submit(spec)
        self.finish_task(backend, handle, exit_code=3)
        status = await poll_one(backend, handle)
        rule = "exit 3 fails with reason exit_3 (an application exit code is deterministic)"
        expect_failure(status, "exit_3", deterministic=True, rule=rule)
        assert status.failure is not None
        assert status.failure.exit_code == 3, (
            f"{rule}: exit_code is {status.failure.exit_code!r}, expected 3"
        )
        assert status.failure.detail, (
            f"a failure needs a human-readable detail, got {status.failure.detail!r}"
        )

    @asyncio_test
    async def test_poll_preserves_handle_order(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        succeeded = await backend.submit(replace(spec, labels={**spec.labels, "shard": "0"}))
        failed = await backend.submit(replace(spec, labels={**spec.labels, "shard": "1"}))
        self.finish_task(backend, succeeded, exit_code=0)
        self.finish_task(backend, failed, exit_code=1)
        statuses = await poll(backend, [failed, succeeded])
        shards = [s.handle.labels.get("shard") for s in statuses]
        assert shards == ["1", "0"], (
            f"polled shards ['1', '0'] in that order; the statuses name shards {shards}"
        )
        rule = "poll returns the statuses in the order of the handles"
        expect_states(statuses, [TaskState.FAILED, TaskState.SUCCEEDED], rule)

    @asyncio_test
    async def test_resubmitting_an_active_spec_does_not_run_it_twice_at_once(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        first = await backend.submit(spec)
        second = await backend.submit(spec)  # must not raise
        assert second.labels == spec.labels, (
            f"the resubmit's handle carries labels {second.labels!r}, expected {spec.labels!r}"
        )
        assert second.plugin_identity == spec.plugin_identity, (
            f"the resubmit's handle carries plugin_identity {second.plugin_identity!r}, "
            f"expected {spec.plugin_identity!r}"
        )
        self.finish_task(backend, first, exit_code=0)
        if second.external_id == first.external_id:
            # Adopted: both handles name the one running task.
            statuses = await poll(backend, [first, second])
            rule = "an adopted resubmit names the one task"
            expect_states(statuses, [TaskState.SUCCEEDED, TaskState.SUCCEEDED], rule)
        else:
            # A second, independent task: finishing the first must not finish it.
            status = await poll_one(backend, second)
            assert not status.state.is_terminal, (
                "a resubmitted task finished together with the first submission (it reads as "
                f"{status.state.name}, expected PENDING or RUNNING until it ends itself)"
            )
            self.finish_task(backend, second, exit_code=0)
            rule = "the second, independent task finishes on its own"
            expect_state(await poll_one(backend, second), TaskState.SUCCEEDED, rule)

    @pytest.mark.parametrize("first_exit", [0, 3])
    @asyncio_test
    async def test_resubmitting_after_a_terminal_outcome_runs_the_task_again(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec, first_exit: int
    ) -> None:
        first = await backend.submit(spec)
        self.finish_task(backend, first, exit_code=first_exit)
        expected = TaskState.SUCCEEDED if first_exit == 0 else TaskState.FAILED
        expect_state(await poll_one(backend, first), expected, f"exit {first_exit}")
        again = await backend.submit(spec)
        assert again.labels == spec.labels, (
            f"the resubmit's handle carries labels {again.labels!r}, expected {spec.labels!r}"
        )
        rerun = await poll_one(backend, again)
        assert not rerun.state.is_terminal, (
            "a resubmitted spec must run again, not reuse the finished task's outcome (it reads "
            f"as {rerun.state.name}, expected PENDING or RUNNING)"
        )
        self.finish_task(backend, again, exit_code=0)
        final = await poll_one(backend, again)
        expect_state(final, TaskState.SUCCEEDED, "the rerun succeeds on its own exit code")

    @asyncio_test
    async def test_missing_task_is_a_terminal_failure(self, backend: ExecutionBackend) -> None:
        status = await poll_one(backend, missing_handle(backend))
        rule = "a task the provider cannot find fails as container_missing (it may be retried)"
        expect_failure(status, "container_missing", deterministic=False, rule=rule)

    @asyncio_test
    async def test_failure_detail_returns_the_end_of_a_failed_tasks_log(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        handle = await backend.submit(spec)
        lines = [f"log line {i}" for i in range(100)]
        wrote = self.write_task_log(backend, handle, lines)
        self.finish_task(backend, handle, exit_code=3)
        expect_state(await poll_one(backend, handle), TaskState.FAILED, "exit 3")
        detail = await backend.failure_detail(handle)
        assert detail is None or isinstance(detail, str), (
            f"failure_detail must return a str or None, got {detail!r}"
        )
        if wrote:
            assert detail is not None, "the task has a log, so failure_detail must return it"
            last = (detail.rstrip("\n").splitlines() or [""])[-1]
            assert last == "log line 99", (
                f"failure_detail ends with {last!r}, expected the log's last line 'log line 99'"
            )
            assert "log line 0" not in detail, (
                "failure_detail returns the tail of the log, but it holds the first of 100 "
                f"lines ({len(detail.splitlines())} lines returned)"
            )

    @asyncio_test
    async def test_failure_detail_of_a_missing_task_does_not_raise(
        self, backend: ExecutionBackend
    ) -> None:
        detail = await _quietly(
            backend.failure_detail(missing_handle(backend)), "failure_detail of a missing task"
        )
        assert detail is None or isinstance(detail, str), (
            f"failure_detail of a missing task must return a str or None, got {detail!r}"
        )

    @asyncio_test
    async def test_timeout_reaches_the_platform(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        unlimited = await backend.submit(replace(spec, timeout_s=None))
        seen = self.launched_timeout(backend, unlimited)
        assert seen == self.unlimited_timeout_s, (
            "a task without timeout_s must get no limit, or the provider's maximum when it "
            f"caps task lifetime (set unlimited_timeout_s): launched with {seen!r}, expected "
            f"{self.unlimited_timeout_s!r}"
        )
        limited = await backend.submit(replace(spec, timeout_s=CONFORMANCE_TIMEOUT_S))
        seen = self.launched_timeout(backend, limited)
        assert seen == CONFORMANCE_TIMEOUT_S, (
            f"timeout_s={CONFORMANCE_TIMEOUT_S} must reach the provider as the limit; it "
            f"launched with {seen!r}"
        )

    @asyncio_test
    async def test_expired_task_fails_with_timeout_reason(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        handle = await backend.submit(replace(spec, timeout_s=CONFORMANCE_TIMEOUT_S))
        self.expire_task(backend, handle)
        status = await poll_one(backend, handle)
        rule = (
            "an expired task fails as timeout, not deterministic (the same task may finish in "
            "time on a faster machine or a quieter provider)"
        )
        expect_failure(status, "timeout", deterministic=False, rule=rule)

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
            await _expect_staging_refused(backend, transfer, match)
        elif mode == "task":
            handle = await backend.submit(replace(spec, inputs=[transfer]))
            self.fail_input_verification(backend, handle)
            status = await poll_one(backend, handle)
            rule = "an in-task digest check that fails is input_digest_mismatch, deterministic"
            expect_failure(status, "input_digest_mismatch", deterministic=True, rule=rule)
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
            misnamed = _entry_points_loading(type(backend), backend.name)
            if misnamed:
                pytest.fail(
                    f"entry point {misnamed[0].name!r} ({misnamed[0].value}) loads the backend "
                    f"under test, whose name is {backend.name!r}: `altar` finds a backend by "
                    "its entry-point name and refuses one whose class says otherwise; expected "
                    "the entry-point name and the class attribute `name` to be the same"
                )
            pytest.skip(
                f"no installed distribution registers {backend.name!r} under the "
                f"{EXECUTION_BACKEND_GROUP!r} entry-point group, so `altar` cannot find it; "
                "add the entry point to check it"
            )
        # Loads and validates as `altar run` would: one distribution, a subclass, name == key.
        registered = registry.get(backend.name)
        assert isinstance(backend, registered), (
            f"entry point {backend.name!r} loads {registered.__module__}."
            f"{registered.__qualname__}; expected the backend under test "
            f"({type(backend).__module__}.{type(backend).__qualname__})"
        )

    @asyncio_test
    async def test_image_and_command_reach_the_provider_unchanged(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        handle = await backend.submit(replace(spec, command=list(HOSTILE_COMMAND)))
        launched = self._launched(backend, handle, "the image and command")
        assert launched.image == spec.image, (
            f"the image must reach the provider unchanged: launched {launched.image!r}, "
            f"expected {spec.image!r}"
        )
        assert launched.command == HOSTILE_COMMAND, (
            "the command must reach the provider as the same argv: no quoting, joining, "
            f"splitting, prefixing or dropped arguments (launched {launched.command!r}, "
            f"expected {HOSTILE_COMMAND!r})"
        )

    @asyncio_test
    async def test_each_task_runs_its_own_image(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec, other_image: str
    ) -> None:
        assert other_image != spec.image, (
            f"the other_image fixture must differ from spec.image (both are {spec.image!r})"
        )
        first = await backend.submit(spec)
        second = await self._submit_or_skip(
            backend, replace(spec, image=other_image), f"a second image ({other_image})"
        )
        images = [self._launched(backend, h, "the image").image for h in (first, second)]
        assert images == [spec.image, other_image], (
            f"two tasks were launched with images {images[0]!r} and {images[1]!r}, expected "
            f"{spec.image!r} and {other_image!r}: the image comes from each spec"
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
        wrong = {k: (v, HOSTILE_ENV[k]) for k, v in seen.items() if v != HOSTILE_ENV[k]}
        assert not wrong, (
            "every env value must reach the provider byte for byte; (launched, expected): "
            f"{wrong!r}"
        )

    @asyncio_test
    async def test_labels_reach_the_provider_exactly(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        handle = await backend.submit(replace(spec, labels=dict(CONFORMANCE_LABELS)))
        assert handle.labels == CONFORMANCE_LABELS, (
            f"the handle carries labels {handle.labels!r}, expected {CONFORMANCE_LABELS!r}"
        )
        launched = self._launched(backend, handle, "the labels")
        seen = {key: launched.labels.get(key) for key in CONFORMANCE_LABELS}
        assert seen == CONFORMANCE_LABELS, (
            f"every label must reach the provider unchanged: launched {seen!r}, expected "
            f"{CONFORMANCE_LABELS!r}"
        )

    @asyncio_test
    async def test_cpu_request_reaches_the_provider_exactly(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        request = replace(spec, resources=ResourceRequest(cpu=1.5))
        handle = await self._submit_or_skip(backend, request, "a CPU request")
        launched = self._launched(backend, handle, "the CPU request")
        assert launched.cpu is not None, (
            "1.5 CPUs were requested; the provider got no CPU request, expected 1.5"
        )
        assert float(launched.cpu) == 1.5, (
            f"1.5 CPUs were requested; the provider was asked for {launched.cpu}, expected 1.5"
        )

    @asyncio_test
    async def test_memory_request_reaches_the_provider_exactly(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        request = replace(spec, resources=ResourceRequest(memory_gb=1.5))
        handle = await self._submit_or_skip(backend, request, "a memory request")
        launched = self._launched(backend, handle, "the memory request")
        assert launched.memory_bytes == int(1.5 * GIB), (
            f"memory_gb=1.5 is 1.5 GiB; the provider was asked for {launched.memory_bytes} "
            f"bytes, expected {int(1.5 * GIB)}"
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
            f"a task that requires 1 GPU was launched with {launched.gpu_count}, expected 1 "
            "or UnsupportedCapabilityError: GPU work never runs on CPU"
        )

    @asyncio_test
    async def test_gpu_count_reaches_the_provider_exactly(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        request = replace(spec, resources=ResourceRequest(gpu="gpu", count=2))
        handle = await self._submit_or_skip(backend, request, "a 2-GPU request")
        launched = self._launched(backend, handle, "the GPU count")
        assert launched.gpu_count == 2, (
            f"ResourceRequest.count is the exact number of devices: {launched.gpu_count} "
            "launched, expected 2"
        )

    @asyncio_test
    async def test_cpu_task_is_given_no_gpu(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        handle = await backend.submit(replace(spec, resources=ResourceRequest()))
        launched = self._launched(backend, handle, "the GPU count of a CPU task")
        assert launched.gpu_count == 0, (
            f"a task with resources.gpu=None is CPU only; it launched with {launched.gpu_count} "
            "GPU(s), expected 0"
        )

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
            try:
                accepted = await backend.submit(variant)
            except UnsupportedCapabilityError:
                continue
            pytest.fail(
                f"submit accepted a spec unsupported_specs names ({variant!r}) and returned "
                f"{accepted!r}; expected UnsupportedCapabilityError"
            )

    @asyncio_test
    async def test_cancel_stops_a_running_task_and_is_idempotent(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        handle = await backend.submit(spec)
        expect_state(await poll_one(backend, handle), ACTIVE, "a submitted task is active")
        await backend.cancel(handle)
        await backend.cancel(handle)
        status = await poll_one(backend, handle)
        expect_state(status, TaskState.FAILED, "a cancelled task reads as failed")
        fresh = self.reopen(backend)
        if fresh is not None:
            # What the provider says, not what this process remembers: the task must be stopped.
            elsewhere = await poll_one(fresh, handle)
            rule = (
                "after cancel, a fresh backend reads the task as failed (cancel stops the task "
                "at the provider, not only in this process)"
            )
            expect_state(elsewhere, TaskState.FAILED, rule)

    @asyncio_test
    async def test_cancel_reaches_the_provider_at_once(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        handle = await backend.submit(spec)
        await backend.cancel(handle)
        # Before this instance polls again: a cancel kept in memory (or acted on at the next
        # poll) is lost when the runner stops right after it.
        fresh = self._reopen(backend)
        status = await poll_one(fresh, handle)
        rule = (
            "right after cancel returned, a fresh instance reads the task as failed (cancel "
            "stops the task at the provider before it returns)"
        )
        expect_state(status, TaskState.FAILED, rule)
        assert status.failure is not None, "a FAILED status must carry a TaskFailure"
        assert not status.failure.deterministic, (
            f"a cancelled task failed with {status.failure.reason!r} marked deterministic, "
            "expected deterministic=False: a cancel says nothing about the task"
        )

    @asyncio_test
    async def test_a_restarted_process_can_cancel_a_task(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        handle = await backend.submit(spec)
        expect_state(await poll_one(backend, handle), ACTIVE, "a submitted task is active")
        await self._reopen(backend).cancel(handle)
        status = await poll_one(self._reopen(backend), handle)
        rule = "a task cancelled by a restarted process is failed (cancel finds it by its handle)"
        expect_state(status, TaskState.FAILED, rule)
        rule = "the submitting instance reads a task another instance cancelled as failed"
        expect_state(await poll_one(backend, handle), TaskState.FAILED, rule)

    @asyncio_test
    async def test_cancel_of_a_missing_task_does_not_raise(self, backend: ExecutionBackend) -> None:
        for _ in range(2):
            await _quietly(backend.cancel(missing_handle(backend)), "cancel of a missing task")

    @asyncio_test
    async def test_cleanup_is_idempotent(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        handle = await backend.submit(spec)
        self.finish_task(backend, handle, exit_code=0)
        expect_state(await poll_one(backend, handle), TaskState.SUCCEEDED, "exit 0")
        await backend.cleanup([handle])
        await backend.cleanup([handle])
        await poll(backend, [handle])  # still one well-formed status per handle

    @asyncio_test
    async def test_cleanup_of_a_missing_task_does_not_raise(
        self, backend: ExecutionBackend
    ) -> None:
        for _ in range(2):
            await _quietly(backend.cleanup([missing_handle(backend)]), "cleanup of a missing task")

    @asyncio_test
    async def test_handle_survives_a_restart_while_running(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        handle = await backend.submit(spec)
        fresh = self._reopen(backend)
        status = await poll_one(fresh, handle)
        rule = "after a restart the running task is found again by its external_id alone"
        expect_state(status, ACTIVE, rule)
        self.finish_task(fresh, handle, exit_code=0)
        rule = "a fresh instance reads the task's end"
        expect_state(await poll_one(fresh, handle), TaskState.SUCCEEDED, rule)

    @pytest.mark.parametrize("exit_code", [0, 3])
    @asyncio_test
    async def test_handle_survives_a_restart_after_it_finished(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec, exit_code: int
    ) -> None:
        handle = await backend.submit(spec)
        self.finish_task(backend, handle, exit_code=exit_code)
        fresh = self._reopen(backend)
        status = await poll_one(fresh, handle)
        rule = "after a restart, a finished task reads as it finished"
        if exit_code == 0:
            expect_state(status, TaskState.SUCCEEDED, rule)
        else:
            expect_failure(status, f"exit_{exit_code}", deterministic=None, rule=rule)

    @asyncio_test
    async def test_deadline_survives_a_restart(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        handle = await backend.submit(replace(spec, timeout_s=CONFORMANCE_TIMEOUT_S))
        fresh = self._reopen(backend)
        seen = self.launched_timeout(fresh, handle)
        assert seen == CONFORMANCE_TIMEOUT_S, (
            f"after a restart the task's limit reads as {seen!r}, expected {CONFORMANCE_TIMEOUT_S}"
        )
        self.expire_task(fresh, handle)
        status = await poll_one(fresh, handle)
        rule = (
            "the deadline must live with the provider (or the handle), not in the process "
            "that submitted the task; a timeout is not deterministic"
        )
        expect_failure(status, "timeout", deterministic=False, rule=rule)

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
            statuses = await poll(backend, [handle])
        except BackendUnavailableError:
            return  # transient: the caller polls again later
        terminal = [s for s in statuses if s.state.is_terminal]
        assert not terminal, (
            f"the provider could not be asked, yet poll reported {terminal[0].state.name} "
            f"({terminal[0].failure}); expected BackendUnavailableError (or an active state): "
            "the task may well be running"
        )

    @asyncio_test
    async def test_poll_returns_promptly_while_a_task_runs(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        handle = await backend.submit(spec)
        # _poll fails if one poll takes POLL_BOUND_S; a running task must read as active.
        statuses = await poll(backend, [handle, missing_handle(backend), handle])
        rule = "a running task reads as active and a missing one as failed, in one prompt poll"
        expect_state(statuses[0], ACTIVE, rule)
        expect_state(statuses[1], TaskState.FAILED, rule)
        expect_state(statuses[2], ACTIVE, rule)

    @asyncio_test
    async def test_submit_does_not_block_the_event_loop(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        _, blocking = await measure_blocking(lambda: backend.submit(spec))
        assert not blocking.blocks, (
            f"every submit kept the event loop from running anything else for at least "
            f"{blocking.call_s:.3f} s, expected no more than idle waits ({blocking.idle_s:.3f} "
            "s); run blocking provider calls in a thread (asyncio.to_thread) or an async client"
        )

    @asyncio_test
    async def test_poll_does_not_block_the_event_loop(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        handle = await backend.submit(spec)
        results, blocking = await measure_blocking(lambda: backend.poll([handle]))
        counts = [len(statuses) for statuses in results]
        assert all(n == 1 for n in counts), (
            f"each poll of one handle must return one status; they returned {counts}"
        )
        assert not blocking.blocks, (
            f"every poll kept the event loop from running anything else for at least "
            f"{blocking.call_s:.3f} s, expected no more than idle waits ({blocking.idle_s:.3f} "
            "s); run blocking provider calls in a thread (asyncio.to_thread) or an async client"
        )

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
        try:
            accepted = await backend.submit(replace(spec, timeout_s=cap + 1))
        except ValueError as error:
            refusal = str(error)
        else:
            pytest.fail(
                f"timeout_s={cap + 1} is above the provider's maximum of {cap} s, yet submit "
                f"accepted it ({accepted.external_id!r}, launched with "
                f"{self.launched_timeout(backend, accepted)!r}); expected "
                "UnsupportedCapabilityError"
            )
        assert str(cap) in refusal, (
            f"the refusal of timeout_s={cap + 1} must name the maximum {cap}: {refusal}"
        )

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
        seen = self.launched_timeout(backend, handle)
        assert seen == cap, f"timeout_s={cap} (the maximum) launched as {seen!r}, expected {cap}"

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
        status = await poll_one(backend, handle)
        rule = "a memory kill reads as oom_killed, not deterministic (a bigger machine may do)"
        expect_failure(status, "oom_killed", deterministic=False, rule=rule)

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
        await _expect_staging_refused(backend, mismatched)
        after = source.read_bytes()
        assert after == b"actual bytes", (
            f"staging must never alter its source: it held b'actual bytes', now {after[:40]!r}"
        )

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
        assert destination.is_file(), (
            f"collect_outputs wrote nothing at {destination}, expected the {len(data)} bytes "
            "staged under the same logical path"
        )
        got = destination.read_bytes()
        assert got == data, (
            f"collect_outputs changed the bytes: {len(data)} staged, {len(got)} collected"
            + ("" if len(got) != len(data) else ", same length, different content")
        )


async def _quietly(call: Awaitable[T], what: str) -> T:
    """Await ``call``; an exception fails the test, naming it (the rule: never raise)."""
    try:
        return await call
    except Exception as error:
        pytest.fail(
            f"{what} raised {type(error).__name__}: {error}; expected it to return quietly "
            "(a task that no longer exists is not an error)"
        )


async def _expect_staging_refused(
    backend: ExecutionBackend, transfer: Transfer, match: str | None = None
) -> None:
    """``stage_inputs([transfer])`` raises TransferIntegrityError (whose message has ``match``)."""
    what = f"input {transfer.uri!r} (declared digest {transfer.digest})"
    try:
        await backend.stage_inputs([transfer])
    except TransferIntegrityError as error:
        refusal = str(error)
    except Exception as error:
        pytest.fail(
            f"staging {what} raised {type(error).__name__}({error}); expected "
            'TransferIntegrityError: a "staging" backend verifies digests while it copies'
        )
    else:
        pytest.fail(
            f'staging {what} succeeded; expected TransferIntegrityError: a "staging" backend '
            "hashes what it copies and refuses a mismatch or a directory before any task reads it"
        )
    assert match is None or re.search(match, refusal), (
        f"staging {what} raised TransferIntegrityError({refusal}); expected its message to "
        f"say {match!r}"
    )


def _entry_points_loading(cls: type, name: str) -> list[metadata.EntryPoint]:
    """Installed backend entry points, under another name, that load ``cls`` (or the class
    it inherits its ``name`` from)."""
    targets = {
        f"{klass.__module__}:{klass.__qualname__}"
        for klass in cls.__mro__
        if klass is not ExecutionBackend and getattr(klass, "name", None) == name
    }
    return [
        ep
        for ep in metadata.entry_points(group=EXECUTION_BACKEND_GROUP)
        if ep.name != name and ep.value.split("[")[0].replace(" ", "") in targets
    ]


_NO_VERIFICATION_MODE = (
    "{name} declares input_digest_verification = {mode!r}, expected where input digests are "
    'verified: "staging" (stage_inputs hashes what it copies and raises '
    'TransferIntegrityError) or "task" (each task checks its inputs and fails with '
    "input_digest_mismatch)"
)
