"""The exactly-once capability checks: adopting a submission by its idempotency key.

The runner journals a key per (run, task, attempt) before it submits, and passes it with the
run, task and attempt as reserved labels (``altar.run``, ``altar.task``, ``altar.attempt``,
``altar.submission``). A backend declaring ``adopts_submissions = True`` promises that a
submit carrying a key it has seen returns a handle to that provider object, in whatever
state it is (created: started now; running; finished: adopted, never replaced), and may
implement ``list_submissions(run)`` so a restarted runner finds what a run left behind.
Backends that do not declare it skip these checks with the reason.
"""

from __future__ import annotations

import inspect
import warnings
from dataclasses import replace
from typing import Any

import pytest
from altar.conformance._polling import ACTIVE, expect_state, expect_states, poll, poll_one
from altar.execution import (
    LABEL_SUBMISSION,
    ContainerTaskSpec,
    ExecutionBackend,
    TaskHandle,
    TaskState,
    submission_key,
    submission_labels,
)

__all__ = ["AdoptionChecks", "keyed", "submission_key"]

CONFORMANCE_RUN = "altar-conformance-run"

# A plugin identity as a plan or journal carries it (plain data, not None).
ADOPTED_IDENTITY = {"plugin": "altar-conformance", "version": "0.2", "kind": "adopted"}

asyncio_test = pytest.mark.asyncio


def keyed(
    spec: ContainerTaskSpec, *, task: str = "t1", attempt: int = 1, run: str = CONFORMANCE_RUN
) -> ContainerTaskSpec:
    """``spec`` with the reserved labels the runner adds to a submission."""
    return replace(spec, labels={**spec.labels, **submission_labels(run, task, attempt)})


def _require_adoption(backend: ExecutionBackend) -> None:
    if getattr(type(backend), "adopts_submissions", False) is not True:
        pytest.skip(
            f"{type(backend).__name__} declares adopts_submissions = False, so a resubmit "
            "after an in-doubt submit may start a second task; set it True once submit finds "
            "its earlier provider object by the altar.submission label"
        )


class AdoptionChecks:
    """Mixed into :class:`~altar.conformance.ExecutionBackendContract`."""

    # Declared here for the checks; the contract class defines them.
    def finish_task(self, backend: ExecutionBackend, handle: TaskHandle, *, exit_code: int) -> None:
        raise NotImplementedError

    def reopen(self, backend: ExecutionBackend) -> ExecutionBackend | None:
        raise NotImplementedError

    def leave_task_created(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec, key: str
    ) -> str | None:
        """Make the fake hold a provider object for ``spec`` that was created but never
        started (a submit killed between create and start), under the submission key ``key``
        (``spec``'s ``altar.submission`` label), as the provider's create would record it.

        Return the ``external_id`` the backend's ``submit`` returns for that object: the id
        the fake's create answered, or, for a backend that names objects by key, the name its
        documented public naming function gives ``key``. None: the provider has no such state
        (or the hook is not implemented). Overrides written for 0.2's ``(backend, spec)``
        still work, with a DeprecationWarning.
        """
        return None

    def _leave_task_created(self, backend: ExecutionBackend, spec: ContainerTaskSpec) -> str | None:
        hook: Any = self.leave_task_created
        key = spec.labels[LABEL_SUBMISSION]
        if len(inspect.signature(hook).parameters) == 2:
            warnings.warn(
                f"{type(self).__name__}.leave_task_created(backend, spec) is deprecated; "
                "accept the submission key too: leave_task_created(backend, spec, key)",
                DeprecationWarning,
                stacklevel=2,
            )
            created: str | None = hook(backend, spec)
            return created
        created = hook(backend, spec, key)
        return created

    def test_adopts_submissions_is_a_bool(self, backend: ExecutionBackend) -> None:
        flag = getattr(type(backend), "adopts_submissions", False)
        assert isinstance(flag, bool), f"adopts_submissions is {flag!r}, expected a bool"

    @asyncio_test
    async def test_a_resubmitted_key_adopts_the_running_task(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        _require_adoption(backend)
        submission = keyed(spec)
        first = await backend.submit(submission)
        again = await backend.submit(submission)
        assert again.external_id == first.external_id, (
            f"the resubmitted key returned {again.external_id!r}, expected {first.external_id!r}:"
            " a submit whose altar.submission label matches a task this backend created "
            "returns a handle to that task, never another"
        )
        assert again.labels == submission.labels, (
            f"the adopted handle carries labels {again.labels!r}, expected the submitted "
            f"spec's {submission.labels!r}"
        )
        rule = "a resubmitted key adopts the running task"
        expect_state(await poll_one(backend, again), ACTIVE, rule)
        self.finish_task(backend, first, exit_code=0)
        statuses = await poll(backend, [first, again])
        expect_states(statuses, [TaskState.SUCCEEDED, TaskState.SUCCEEDED], rule)

    @asyncio_test
    async def test_an_adopted_handle_keeps_the_plugin_identity(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        _require_adoption(backend)
        submission = replace(keyed(spec), plugin_identity=dict(ADOPTED_IDENTITY))
        first = await backend.submit(submission)
        again = await backend.submit(submission)
        assert again.external_id == first.external_id, (
            f"the resubmitted key started another task ({first.external_id!r}, then "
            f"{again.external_id!r}); expected the same one"
        )
        assert again.plugin_identity == ADOPTED_IDENTITY, (
            "a handle returned for an adopted task must carry the spec's plugin_identity, as "
            f"a fresh submit's does (got {again.plugin_identity!r}, expected "
            f"{ADOPTED_IDENTITY!r}); return mint_handle(self.name, spec, external_id) on the "
            "adoption path too"
        )

    @pytest.mark.parametrize("exit_code", [0, 3])
    @asyncio_test
    async def test_a_resubmitted_key_adopts_the_finished_task(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec, exit_code: int
    ) -> None:
        _require_adoption(backend)
        submission = keyed(spec)
        first = await backend.submit(submission)
        self.finish_task(backend, first, exit_code=exit_code)
        expected = TaskState.SUCCEEDED if exit_code == 0 else TaskState.FAILED
        outcome = expect_state(await poll_one(backend, first), expected, f"exit {exit_code}")
        again = await backend.submit(submission)
        assert again.external_id == first.external_id, (
            f"the resubmitted key of a finished task returned {again.external_id!r}, expected "
            f"{first.external_id!r}: a finished task with the same altar.submission key is "
            "adopted, not replaced (the runner resubmits after an in-doubt submit)"
        )
        adopted = await poll_one(backend, again)
        assert adopted.state is outcome.state, (
            f"the adopted task reads as {adopted.state.name}, expected {outcome.state.name} "
            "(how it had finished)"
        )
        assert adopted.failure == outcome.failure, (
            f"the adopted task's failure is {adopted.failure!r}, but it had finished with "
            f"{outcome.failure!r}"
        )

    @asyncio_test
    async def test_a_resubmitted_key_adopts_the_task_after_a_restart(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        _require_adoption(backend)
        submission = keyed(spec)
        first = await backend.submit(submission)
        fresh = self.reopen(backend)
        if fresh is None:
            pytest.skip(
                "reopen hook not implemented, so adoption by a restarted runner is unchecked"
            )
        again = await fresh.submit(submission)
        assert again.external_id == first.external_id, (
            f"a restarted process's resubmit returned {again.external_id!r}, expected "
            f"{first.external_id!r}: find the task by its altar.submission label on the "
            "provider, not in the memory of the process that submitted it"
        )
        expect_state(await poll_one(fresh, again), ACTIVE, "a restarted process adopts the task")

    @asyncio_test
    async def test_a_resubmitted_key_starts_a_task_that_was_only_created(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        _require_adoption(backend)
        submission = keyed(spec)
        created = self._leave_task_created(backend, submission)
        if created is None:
            pytest.skip(
                "leave_task_created hook not implemented (or the provider has no created "
                "state), so adopting a created-but-never-started task is unchecked"
            )
        rule = "a created-but-never-started task is started by the resubmit"
        expect_state(await poll_one(backend, _handle(backend, created, submission)), ACTIVE, rule)
        handle = await backend.submit(submission)
        assert handle.external_id == created, (
            f"the resubmit returned {handle.external_id!r}, expected {created!r}: a task "
            "created under this altar.submission key but never started is started, not "
            "created again"
        )
        expect_state(await poll_one(backend, handle), ACTIVE, rule)
        self.finish_task(backend, handle, exit_code=0)
        expect_state(await poll_one(backend, handle), TaskState.SUCCEEDED, rule)

    @asyncio_test
    async def test_another_attempt_is_another_task(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        _require_adoption(backend)
        rule = "another attempt is another task"
        first = await backend.submit(keyed(spec, attempt=1))
        self.finish_task(backend, first, exit_code=3)
        expect_state(await poll_one(backend, first), TaskState.FAILED, rule)
        second = await backend.submit(keyed(spec, attempt=2))
        assert second.external_id != first.external_id, (
            f"both attempts got {first.external_id!r}, expected two tasks: a new attempt "
            "carries a new altar.submission key and runs as a new task"
        )
        expect_state(await poll_one(backend, second), ACTIVE, rule)

    @asyncio_test
    async def test_list_submissions_finds_every_task_of_the_run(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        _require_adoption(backend)
        running = await backend.submit(keyed(spec, task="t1"))
        finished = await backend.submit(keyed(spec, task="t2"))
        self.finish_task(backend, finished, exit_code=0)
        await backend.submit(keyed(spec, task="t1", run="altar-conformance-other-run"))
        await backend.submit(spec)  # carries no run at all
        lister = self.reopen(backend) or backend
        listing: Any = getattr(lister, "list_submissions", None)
        found = None if listing is None else await listing(CONFORMANCE_RUN)
        if found is None:
            pytest.skip(
                "list_submissions returns None (cannot list), so a restarted runner cannot "
                "find the provider objects its journal does not know"
            )
        assert isinstance(found, list), f"list_submissions must return a list, got {found!r}"
        strays = [h for h in found if not isinstance(h, TaskHandle)]
        assert not strays, f"list_submissions must return TaskHandles, got {strays!r}"
        by_id = {h.external_id: h for h in found}
        wanted = {running.external_id, finished.external_id}
        assert set(by_id) == wanted, (
            "list_submissions(run) must return one handle per provider object labelled "
            f"altar.run == {CONFORMANCE_RUN!r}, running or finished, and nothing else "
            f"(got {sorted(by_id)}, expected {sorted(wanted)})"
        )
        for mine in (running, finished):
            listed = by_id[mine.external_id]
            assert listed.backend == backend.name, (
                f"a listed handle names backend {listed.backend!r}, expected {backend.name!r}"
            )
            carried = {key: listed.labels.get(key) for key in mine.labels}
            assert carried == mine.labels, (
                "a listed handle carries the labels its task was submitted with "
                f"(got {carried!r}, expected {mine.labels!r})"
            )


def _handle(backend: ExecutionBackend, external_id: str, spec: ContainerTaskSpec) -> TaskHandle:
    return TaskHandle(backend.name, external_id, dict(spec.labels), spec.plugin_identity)
