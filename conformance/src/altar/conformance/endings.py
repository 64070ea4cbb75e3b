"""Checks of provider endings (issue 22): the infrastructure ended a task, the task did not fail.

A preemption, a lost node, an eviction or an engine restart ends a running task through no
fault of its own. The backend must say so with ``TaskFailure.provider_ending`` (one of
:data:`~altar.execution.PROVIDER_ENDINGS`), so the runner reruns it from its provider budget
instead of charging the task's ``max_retries``; reported as ``exit_137`` or as a success, it
would fail good work or accept work that never finished.

The ``end_by_provider`` hook makes the fake provider end a running task the way the real one
would (what it records and reports, not a shortcut through the backend) and returns the
code the backend must report. A backend whose provider cannot end a task so (or whose fake
does not model it) leaves the hook at its default: the checks skip, naming why.
"""

from __future__ import annotations

import asyncio
import time

import altar.execution
import pytest
from altar.conformance._polling import POLL_BOUND_S, expect_state, poll_one
from altar.execution import ContainerTaskSpec, ExecutionBackend, TaskHandle, TaskState, TaskStatus

__all__ = ["ProviderEndingChecks"]

asyncio_test = pytest.mark.asyncio

# A provider may take a few polls to show the end (Docker's stop timeout, a late OOM flag
# a backend waits for): active states are polled again, this long at most.
_SETTLE_S = 2 * POLL_BOUND_S


class ProviderEndingChecks:
    """Mixed into :class:`~altar.conformance.ExecutionBackendContract`."""

    def end_by_provider(self, backend: ExecutionBackend, handle: TaskHandle) -> str | None:
        """Make the fake provider end the running task ``handle`` on its own account (a
        preemption, a node failure, an eviction, an engine restart), as the provider records
        it; return the ``provider_ending`` code the backend must then report (a key of
        ``PROVIDER_ENDINGS``). None: the provider cannot end a task so, or the fake does not
        model it; the checks skip."""
        return None

    def reopen(self, backend: ExecutionBackend) -> ExecutionBackend | None:
        raise NotImplementedError  # the contract's hook

    def _end_by_provider(self, backend: ExecutionBackend, handle: TaskHandle) -> str:
        # An altar-core older than issue 22 has no provider endings to report.
        known: dict[str, str] | None = getattr(altar.execution, "PROVIDER_ENDINGS", None)
        if known is None:
            pytest.skip("this altar-core has no provider endings (PROVIDER_ENDINGS)")
        expected = self.end_by_provider(backend, handle)
        if expected is None:
            pytest.skip(
                "end_by_provider hook not implemented (or the provider cannot end a task on "
                "its own account), so provider endings are unchecked; make the fake preempt, "
                "lose or evict the task and return the provider_ending code"
            )
        assert expected in known, (
            f"end_by_provider returned {expected!r}, expected one of {sorted(known)}"
        )
        return expected

    async def _settled(self, backend: ExecutionBackend, handle: TaskHandle) -> TaskStatus:
        """The first terminal status (polled again while the provider still shows it active)."""
        give_up = time.monotonic() + _SETTLE_S
        while True:
            status = await poll_one(backend, handle)
            if status.state.is_terminal or time.monotonic() >= give_up:
                return status
            await asyncio.sleep(0.05)

    @staticmethod
    def _expect_provider_ending(status: TaskStatus, expected: str, rule: str) -> None:
        expect_state(status, TaskState.FAILED, rule)
        failure = status.failure
        assert failure is not None, f"{rule}: a FAILED status must carry a TaskFailure"
        assert failure.provider_ending == expected, (
            f"{rule}: provider_ending is {failure.provider_ending!r} ({failure.reason}: "
            f"{failure.detail}), expected {expected!r}: the provider ended the task, so the "
            "runner must rerun it from its provider budget, not the task's retries"
        )
        assert not failure.deterministic, (
            f"{rule}: a provider ending is marked deterministic; the same task may well "
            "succeed when the provider runs it again"
        )
        assert not failure.reason.startswith("exit_"), (
            f"{rule}: the reason is {failure.reason!r}, an exit status the task never chose; "
            "keep the reason the backend reported before (job_failed, container_missing) "
            "and put the provider's words in the detail"
        )

    @asyncio_test
    async def test_a_provider_ending_is_reported_as_the_providers(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        handle = await backend.submit(spec)
        expected = self._end_by_provider(backend, handle)
        rule = f"a task the provider ended ({expected}) is the provider's failure, not the task's"
        self._expect_provider_ending(await self._settled(backend, handle), expected, rule)
        again = await poll_one(backend, handle)
        self._expect_provider_ending(again, expected, f"{rule} (polled again)")

    @asyncio_test
    async def test_a_provider_ending_reads_the_same_after_a_restart(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        handle = await backend.submit(spec)
        expected = self._end_by_provider(backend, handle)
        fresh = self.reopen(backend)
        if fresh is None:
            pytest.skip(
                "reopen hook not implemented, so what a restarted runner reads of a provider "
                "ending is unchecked"
            )
        rule = (
            f"a restarted process reads a task the provider ended ({expected}) from the "
            "provider, not from the memory of the process that saw it happen"
        )
        self._expect_provider_ending(await self._settled(fresh, handle), expected, rule)
