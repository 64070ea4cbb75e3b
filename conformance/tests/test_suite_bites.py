"""Proof that the suite bites: each deliberately broken backend fails exactly the rule it breaks.

Every broken backend is the in-process reference with one defect, run through the whole
suite in a pytester session. The test asserts the exact set of failing tests, so a defect
that slips through (or a check that fails for the wrong reason) shows up here.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass

import pytest

HEADER = """
import asyncio
import time
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
    entry_point: str | None = None  # installs `NAME = test_broken:BrokenBackend`

    base: str = "InProcessExecutionBackend"

    def module(self) -> str:
        backend = textwrap.indent(textwrap.dedent(self.backend_body).strip(), "    ")
        contract = textwrap.indent(textwrap.dedent(self.contract_body).strip() or "pass", "    ")
        return (
            f"{HEADER}\n\nclass BrokenBackend({self.base}):\n{backend}\n\n\n"
            f"class TestBroken(InProcessBackendContract):\n"
            f"    backend_class = BrokenBackend\n{contract}\n"
        )


ENDING_CHECKS = (
    "test_a_provider_ending_is_reported_as_the_providers",
    "test_a_provider_ending_reads_the_same_after_a_restart",
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
                "test_a_restarted_process_can_cancel_a_task",
                "test_a_resubmitted_key_adopts_the_task_after_a_restart",
                "test_list_submissions_finds_every_task_of_the_run",
                "test_a_provider_ending_reads_the_same_after_a_restart",
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
        frozenset(
            {
                "test_cancel_stops_a_running_task_and_is_idempotent",
                "test_cancel_reaches_the_provider_at_once",
                "test_a_restarted_process_can_cancel_a_task",
            }
        ),
    ),
    "cancel-acts-at-the-next-poll-of-this-instance": Broken(
        """
        async def cancel(self, handle):
            # remembered in memory: a new instance (a restarted runner) never learns of it
            self.__dict__.setdefault("to_cancel", set()).add(handle.external_id)

        async def poll(self, handles):
            for external_id in self.__dict__.pop("to_cancel", set()):
                self.fabric.kill(external_id)
            return await super().poll(handles)
        """,
        frozenset(
            {
                "test_cancel_reaches_the_provider_at_once",
                "test_a_restarted_process_can_cancel_a_task",
            }
        ),
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
    "strips-whitespace-from-env-values": Broken(
        """
        def _launch_record(self, spec):
            launched = super()._launch_record(spec)
            return replace(launched, env={k: v.strip() for k, v in launched.env.items()})
        """,
        frozenset({"test_env_values_reach_the_provider_exactly"}),
    ),
    "drops-the-plugin-identity": Broken(
        """
        async def submit(self, spec):
            return replace(await super().submit(spec), plugin_identity=None)
        """,
        frozenset(
            {
                "test_plugin_identity_is_kept_on_the_handle",
                "test_an_adopted_handle_keeps_the_plugin_identity",
            }
        ),
    ),
    "hard-codes-the-image": Broken(
        """
        def _launch_record(self, spec):
            return replace(super()._launch_record(spec), image="busybox:latest")
        """,
        frozenset(
            {"test_each_task_runs_its_own_image", "test_the_spec_image_reaches_the_provider"}
        ),
    ),
    "floors-a-fractional-cpu-request": Broken(
        """
        def _launch_record(self, spec):
            launched = super()._launch_record(spec)
            if launched.cpu is None:
                return launched
            return replace(launched, cpu=float(int(launched.cpu)))
        """,
        frozenset(
            {
                "test_cpu_request_reaches_the_provider_exactly",
                "test_cpu_request_is_honoured_at_the_provider",
            }
        ),
    ),
    "rounds-memory-down-to-whole-gib": Broken(
        """
        def _launch_record(self, spec):
            launched = super()._launch_record(spec)
            if launched.memory_bytes is None:
                return launched
            return replace(launched, memory_bytes=launched.memory_bytes >> 30 << 30)
        """,
        frozenset(
            {
                "test_memory_request_reaches_the_provider_exactly",
                "test_memory_request_is_enforced_at_the_provider",
            }
        ),
    ),
    "drops-the-plugin-identity-of-an-adopted-task": Broken(
        """
        async def submit(self, spec):
            handle = await super().submit(spec)
            key = spec.labels.get("altar.submission")
            seen = self.__dict__.setdefault("keys", set())
            if key is not None and key in seen:
                return replace(handle, plugin_identity=None)  # built from the found object
            seen.add(key)
            return handle
        """,
        frozenset({"test_an_adopted_handle_keeps_the_plugin_identity"}),
    ),
    "poll-blocks-the-event-loop-for-0.1-s": Broken(
        """
        async def poll(self, handles):
            time.sleep(0.1)  # a synchronous provider call
            return await super().poll(handles)
        """,
        frozenset({"test_poll_does_not_block_the_event_loop"}),
        select="block_the_event_loop",
    ),
    "submit-blocks-the-event-loop-for-0.1-s": Broken(
        """
        async def submit(self, spec):
            time.sleep(0.1)  # a synchronous provider call
            return await super().submit(spec)
        """,
        frozenset({"test_submit_does_not_block_the_event_loop"}),
        select="block_the_event_loop",
    ),
    "registered-under-another-name": Broken(
        """
        name = "in-process-renamed"
        """,
        frozenset({"test_backend_is_registered_under_its_name"}),
        entry_point="in-process-broken",
    ),
    "marks-a-timeout-deterministic": Broken(
        """
        async def poll(self, handles):
            statuses = await super().poll(handles)
            return [
                replace(s, failure=replace(s.failure, deterministic=True))
                if s.failure is not None and s.failure.reason == "timeout"
                else s
                for s in statuses
            ]
        """,
        frozenset(
            {"test_expired_task_fails_with_timeout_reason", "test_deadline_survives_a_restart"}
        ),
    ),
    "marks-a-cancel-deterministic": Broken(
        """
        async def poll(self, handles):
            statuses = await super().poll(handles)
            return [
                replace(s, failure=replace(s.failure, deterministic=True))
                if s.failure is not None and s.failure.reason == "cancelled"
                else s
                for s in statuses
            ]
        """,
        frozenset({"test_cancel_reaches_the_provider_at_once"}),
    ),
    "marks-an-in-task-digest-mismatch-retryable": Broken(
        """
        async def poll(self, handles):
            statuses = await super().poll(handles)
            return [
                replace(s, failure=replace(s.failure, deterministic=False))
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
    "starts-a-second-task-for-a-known-key": Broken(
        """
        async def submit(self, spec):
            unkeyed = {k: v for k, v in spec.labels.items() if k != "altar.submission"}
            handle = await super().submit(replace(spec, labels=unkeyed))
            return replace(handle, labels=dict(spec.labels))
        """,
        frozenset(
            {
                "test_a_resubmitted_key_adopts_the_running_task",
                "test_an_adopted_handle_keeps_the_plugin_identity",
                "test_a_resubmitted_key_adopts_the_finished_task[0]",
                "test_a_resubmitted_key_adopts_the_finished_task[3]",
                "test_a_resubmitted_key_adopts_the_task_after_a_restart",
                "test_a_resubmitted_key_starts_a_task_that_was_only_created",
                "test_list_submissions_finds_every_task_of_the_run",
            }
        ),
    ),
    "replaces-a-finished-task-of-the-same-key": Broken(
        """
        async def submit(self, spec):
            handle = await super().submit(spec)
            task = self.fabric.inspect(handle.external_id)
            if task is not None and task.state.is_terminal:
                self.fabric.remove(handle.external_id)  # "replace a finished Job"
                return await super().submit(spec)
            return handle
        """,
        frozenset(
            {
                "test_a_resubmitted_key_adopts_the_finished_task[0]",
                "test_a_resubmitted_key_adopts_the_finished_task[3]",
            }
        ),
    ),
    "reports-a-provider-ending-as-exit-137": Broken(
        """
        async def poll(self, handles):
            statuses = await super().poll(handles)
            return [
                replace(s, failure=TaskFailure("exit_137", "killed", False, 137))
                if s.failure is not None and s.failure.provider_ending is not None
                else s
                for s in statuses
            ]
        """,
        frozenset(ENDING_CHECKS),
    ),
    "reports-a-provider-ending-as-success": Broken(
        """
        async def poll(self, handles):
            statuses = await super().poll(handles)
            return [
                TaskStatus(s.handle, TaskState.SUCCEEDED)
                if s.failure is not None and s.failure.provider_ending is not None
                else s
                for s in statuses
            ]
        """,
        frozenset(ENDING_CHECKS),
    ),
    "reports-a-provider-ending-as-0.3.0-did": Broken(
        """
        async def poll(self, handles):
            statuses = await super().poll(handles)
            return [
                replace(s, failure=replace(s.failure, provider_ending=None))
                if s.failure is not None and s.failure.provider_ending is not None
                else s
                for s in statuses
            ]
        """,
        frozenset(ENDING_CHECKS),
    ),
    "lists-only-what-this-instance-submitted": Broken(
        """
        async def submit(self, spec):
            handle = await super().submit(spec)
            self.__dict__.setdefault("mine", []).append(handle)
            return handle

        async def list_submissions(self, run):
            mine = self.__dict__.get("mine", [])
            return [h for h in mine if h.labels.get("altar.run") == run]
        """,
        frozenset({"test_list_submissions_finds_every_task_of_the_run"}),
    ),
}


def _install_entry_point(pytester: pytest.Pytester, name: str) -> None:
    """A distribution registering the broken backend, found on sys.path like an installed one."""
    dist_info = pytester.path / "altar_conformance_broken-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: altar-conformance-broken\nVersion: 0.1\n"
    )
    (dist_info / "entry_points.txt").write_text(
        f"[altar.execution_backends]\n{name} = test_broken:BrokenBackend\n"
    )
    pytester.syspathinsert()


def _run(pytester: pytest.Pytester, broken: Broken, *extra: str) -> pytest.RunResult:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_broken=broken.module())
    if broken.entry_point:
        _install_entry_point(pytester, broken.entry_point)
    args = ["-p", "no:cacheprovider", "--tb=line", *extra]
    if broken.select:
        args += ["-k", broken.select]
    return pytester.runpytest_inprocess(*args)


def _failed_tests(result: pytest.RunResult, broken: Broken) -> set[str]:
    passed, _, failed = result.reprec.listoutcomes()  # type: ignore[attr-defined]
    assert passed or broken.select, "the broken backend passed nothing: the module is broken"
    return {report.nodeid.rsplit("::", 1)[-1] for report in failed}


def _crash_lines(result: pytest.RunResult) -> list[str]:
    """The one line ``--tb=line`` prints per failure: ``path:line: message``."""
    return [line for line in result.outlines if re.match(r"^/\S+\.py:\d+: ", line)]


@pytest.mark.parametrize("defect", sorted(CASES))
def test_suite_fails_a_backend_that_breaks_one_rule(pytester: pytest.Pytester, defect: str) -> None:
    broken = CASES[defect]
    result = _run(pytester, broken)
    assert _failed_tests(result, broken) == broken.expected_failures
    # Each failure explains itself in the one line --tb=line prints: what the suite saw and
    # what the contract wants, even with assertion rewriting off (an installed plugin whose
    # modules pytest did not rewrite).
    lines = _crash_lines(result)
    assert len(lines) == len(broken.expected_failures), result.outlines
    unexplained = [line for line in lines if "expected" not in line.partition(": ")[2]]
    assert not unexplained, unexplained


@pytest.mark.parametrize("defect", ["declares-no-verification-mode", "hard-codes-the-image"])
def test_failures_explain_themselves_without_assertion_rewriting(
    pytester: pytest.Pytester, defect: str
) -> None:
    broken = CASES[defect]
    result = _run(pytester, broken, "--assert=plain")
    assert _failed_tests(result, broken) == broken.expected_failures
    lines = _crash_lines(result)
    assert lines, result.outlines
    unexplained = [line for line in lines if "expected" not in line.partition(": ")[2]]
    assert not unexplained, unexplained


def test_the_unbroken_reference_passes_the_same_harness(pytester: pytest.Pytester) -> None:
    control = Broken("pass", frozenset())
    assert _failed_tests(_run(pytester, control), control) == set()


def test_a_leave_task_created_hook_written_for_0_2_still_works(pytester: pytest.Pytester) -> None:
    # 0.2's signature (backend, spec), reaching into the backend as 0.2 authors had to.
    legacy = Broken(
        "pass",
        frozenset(),
        contract_body="""
        def leave_task_created(self, backend, spec):
            launched = backend._launch_record(spec)
            return backend.fabric.launch(spec, launched, None, None, backend.data_root, start=False)
        """,
        select="only_created",
    )
    result = _run(pytester, legacy, "-rA")
    passed, _, _ = result.reprec.listoutcomes()  # type: ignore[attr-defined]
    assert [r.nodeid.rsplit("::", 1)[-1] for r in passed] == [
        "test_a_resubmitted_key_starts_a_task_that_was_only_created"
    ], result.outlines
    result.stdout.fnmatch_lines(["*DeprecationWarning*leave_task_created(backend, spec)*"])
