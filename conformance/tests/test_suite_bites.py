"""Proof that the suite bites: each deliberately broken backend fails exactly the rule it breaks.

Every broken backend is the in-process reference with one defect, run through the whole
suite in a pytester session. The test asserts the exact set of failing tests, so a defect
that slips through (or a check that fails for the wrong reason) shows up here.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

import pytest

HEADER = """
import asyncio
from dataclasses import replace

from altar.conformance.reference import InProcessExecutionBackend, InProcessTaskVerifyingBackend
from altar.conformance.reference_contract import InProcessBackendContract
from altar.execution import ResourceRequest, TaskFailure, TaskState, TaskStatus
"""


@dataclass(frozen=True)
class Broken:
    """One defect: the backend subclass body, contract class attributes, expected failures."""

    backend_body: str
    expected_failures: frozenset[str]
    contract_body: str = ""
    select: str | None = None  # -k expression, for defects that make many tests slow

    base: str = "InProcessExecutionBackend"

    def module(self) -> str:
        backend = textwrap.indent(textwrap.dedent(self.backend_body).strip(), "    ")
        contract = textwrap.indent(textwrap.dedent(self.contract_body).strip() or "pass", "    ")
        return (
            f"{HEADER}\n\nclass BrokenBackend({self.base}):\n{backend}\n\n\n"
            f"class TestBroken(InProcessBackendContract):\n"
            f"    backend_class = BrokenBackend\n{contract}\n"
        )


CASES = {
    "rewrites-the-command": Broken(
        """
        def _launch_record(self, spec):
            launched = super()._launch_record(spec)
            return replace(launched, command=["sh", "-c", " ".join(launched.command)])
        """,
        frozenset({"test_image_and_command_reach_the_provider_unchanged"}),
    ),
    "drops-an-env-value": Broken(
        """
        def _launch_record(self, spec):
            launched = super()._launch_record(spec)
            return replace(launched, env={k: v for k, v in launched.env.items() if v})
        """,
        frozenset({"test_env_values_reach_the_provider_exactly"}),
    ),
    "runs-a-gpu-task-on-cpu": Broken(
        """
        def _launch_record(self, spec):
            cpu_only = replace(spec.resources, gpu=None)
            return super()._launch_record(replace(spec, resources=cpu_only))
        """,
        frozenset(
            {
                "test_gpu_request_is_never_turned_into_cpu_work",
                "test_gpu_count_reaches_the_provider_exactly",
                "test_unsupported_specs_are_rejected_at_submit",
            }
        ),
    ),
    "reports-oom-as-exit-137": Broken(
        """
        async def poll(self, handles):
            statuses = await super().poll(handles)
            return [
                replace(s, failure=TaskFailure("exit_137", "exited", True, 137))
                if s.failure is not None and s.failure.reason == "oom_killed"
                else s
                for s in statuses
            ]
        """,
        frozenset({"test_oom_kill_is_reported_as_oom_killed"}),
    ),
    "loses-a-handle-across-a-restart": Broken(
        """
        def reopen(self):
            # Task state lived in the old process: the new instance starts from nothing.
            return type(self)(self.runtime, data_root=self.data_root)
        """,
        frozenset(
            {
                "test_handle_survives_a_restart_while_running",
                "test_handle_survives_a_restart_after_it_finished[0]",
                "test_handle_survives_a_restart_after_it_finished[3]",
                "test_deadline_survives_a_restart",
            }
        ),
    ),
    "raises-when-cancelling-a-missing-task": Broken(
        """
        async def cancel(self, handle):
            if self.fabric.inspect(handle.external_id) is None:
                raise KeyError(f"no task {handle.external_id}")
            await super().cancel(handle)
        """,
        frozenset({"test_cancel_of_a_missing_task_does_not_raise"}),
    ),
    "cancel-only-marks-the-task-in-this-process": Broken(
        """
        async def cancel(self, handle):
            # never tells the provider: the task keeps running (and billing) elsewhere
            self.__dict__.setdefault("cancelled", set()).add(handle.external_id)

        async def poll(self, handles):
            statuses = await super().poll(handles)
            cancelled = self.__dict__.get("cancelled", set())
            return [
                TaskStatus(s.handle, TaskState.FAILED, TaskFailure("cancelled", "cancelled"))
                if s.handle.external_id in cancelled
                else s
                for s in statuses
            ]
        """,
        frozenset({"test_cancel_stops_a_running_task_and_is_idempotent"}),
    ),
    "reports-a-missing-task-as-running-forever": Broken(
        """
        async def poll(self, handles):
            statuses = await super().poll(handles)
            return [
                TaskStatus(s.handle, TaskState.RUNNING)
                if s.failure is not None and s.failure.reason == "container_missing"
                else s
                for s in statuses
            ]
        """,
        frozenset(
            {
                "test_missing_task_is_a_terminal_failure",
                "test_poll_returns_promptly_while_a_task_runs",
            }
        ),
    ),
    "reports-an-unreachable-provider-as-a-missing-task": Broken(
        """
        async def poll(self, handles):
            try:
                return await super().poll(handles)
            except ConnectionError:
                failure = TaskFailure("container_missing", "not found")
                return [TaskStatus(h, TaskState.FAILED, failure) for h in handles]
        """,
        frozenset({"test_an_unreachable_provider_is_not_a_missing_task"}),
    ),
    "declares-no-verification-mode": Broken(
        """
        input_digest_verification = None
        """,
        frozenset(
            {
                "test_declares_where_input_digests_are_verified",
                "test_input_digest_mismatch_is_rejected_before_compute",
                "test_input_digest_on_a_directory_is_rejected",
            }
        ),
    ),
    "reports-an-in-task-digest-mismatch-as-an-exit-code": Broken(
        """
        async def poll(self, handles):
            statuses = await super().poll(handles)
            return [
                replace(s, failure=TaskFailure("exit_1", "exited", True, 1))
                if s.failure is not None and s.failure.reason == "input_digest_mismatch"
                else s
                for s in statuses
            ]
        """,
        frozenset(
            {
                "test_input_digest_mismatch_is_rejected_before_compute",
                "test_input_digest_on_a_directory_is_rejected",
            }
        ),
        base="InProcessTaskVerifyingBackend",
    ),
    "never-enforces-a-deadline": Broken(
        """
        async def poll(self, handles):
            statuses = await super().poll(handles)
            return [
                TaskStatus(s.handle, TaskState.RUNNING)
                if s.failure is not None and s.failure.reason == "timeout"
                else s
                for s in statuses
            ]
        """,
        frozenset(
            {"test_expired_task_fails_with_timeout_reason", "test_deadline_survives_a_restart"}
        ),
    ),
    "clamps-a-timeout-above-the-cap": Broken(
        """
        def _timeout_for(self, spec):
            return min(spec.timeout_s or self.max_timeout_s, self.max_timeout_s)
        """,
        frozenset({"test_timeout_above_the_provider_maximum_is_rejected"}),
        contract_body="unlimited_timeout_s = 3600\nmax_timeout_s = 3600",
    ),
    "clamps-a-timeout-above-the-cap-declared-as-unlimited-timeout-only": Broken(
        """
        def _timeout_for(self, spec):
            return min(spec.timeout_s or self.max_timeout_s, self.max_timeout_s)
        """,
        frozenset({"test_timeout_above_the_provider_maximum_is_rejected"}),
        # what the seed tells a capped backend to set: the cap checks must still run
        contract_body="unlimited_timeout_s = 3600",
    ),
    "collects-no-bytes": Broken(
        """
        async def collect_outputs(self, transfers):
            pass
        """,
        frozenset({"test_collect_outputs_moves_the_bytes"}),
    ),
    "poll-waits-for-the-task": Broken(
        """
        async def poll(self, handles):
            while True:
                statuses = await super().poll(handles)
                if all(s.state.is_terminal for s in statuses):
                    return statuses
                await asyncio.sleep(0.05)
        """,
        frozenset({"test_poll_returns_promptly_while_a_task_runs"}),
        # Every test that polls a running task waits out the bound; run the one that matters.
        select="test_poll_returns_promptly_while_a_task_runs",
    ),
}


def _failed_tests(pytester: pytest.Pytester, broken: Broken) -> set[str]:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_broken=broken.module())
    args = ["-p", "no:cacheprovider"]
    if broken.select:
        args += ["-k", broken.select]
    recorder = pytester.inline_run(*args)
    passed, _, failed = recorder.listoutcomes()
    assert passed or broken.select, "the broken backend passed nothing: the module is broken"
    return {report.nodeid.rsplit("::", 1)[-1] for report in failed}


@pytest.mark.parametrize("defect", sorted(CASES))
def test_suite_fails_a_backend_that_breaks_one_rule(pytester: pytest.Pytester, defect: str) -> None:
    broken = CASES[defect]
    assert _failed_tests(pytester, broken) == broken.expected_failures


def test_the_unbroken_reference_passes_the_same_harness(pytester: pytest.Pytester) -> None:
    control = Broken("pass", frozenset())
    assert _failed_tests(pytester, control) == set()
