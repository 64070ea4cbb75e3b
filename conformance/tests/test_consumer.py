"""The suite as a third party meets it: a fresh project with no asyncio configuration."""

from __future__ import annotations

import pytest

CONSUMER = """
from altar.conformance import ExecutionBackendContract
from altar.conformance.reference_contract import InProcessBackendContract


class TestReference(InProcessBackendContract):
    pass
"""


@pytest.mark.parametrize("ini", [None, "[pytest]\n"], ids=["no-ini-file", "empty-ini-file"])
def test_runs_without_any_configuration_with_warnings_as_errors(
    pytester: pytest.Pytester, ini: str | None
) -> None:
    # No configuration, no conftest, no markers: a separate process sees only what pip
    # installed. -W error: a start-up warning (pytest-asyncio's unset loop scope) would stop
    # the run with an INTERNALERROR before a single test.
    if ini is not None:
        pytester.makeini(ini)
    pytester.makepyfile(test_consumer=CONSUMER)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs", "-W", "error")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in result.stderr.str()
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == 0, result.stdout.str()
    assert outcomes.get("errors", 0) == 0, result.stdout.str()
    # Every test collected is the subclass's: the imported base class contributes none.
    assert outcomes["passed"] >= 40
    result.stdout.fnmatch_lines(["*max_timeout_s and unlimited_timeout_s are None*"])
    assert "ExecutionBackendContract::" not in result.stdout.str()


@pytest.mark.parametrize("mode", ["auto", "strict"])
def test_runs_under_either_asyncio_mode(pytester: pytest.Pytester, mode: str) -> None:
    pytester.makeini(
        f"[pytest]\nasyncio_mode = {mode}\nasyncio_default_fixture_loop_scope = function\n"
    )
    pytester.makepyfile(test_consumer=CONSUMER)
    passed, skipped, failed = pytester.inline_run("-p", "no:cacheprovider").listoutcomes()
    assert not failed
    assert len(passed) >= 40
    assert skipped


def test_base_class_alone_is_not_collected(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_nothing="from altar.conformance import ExecutionBackendContract as TestContract\n"
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes()  # nothing collected, even under a Test* name


def test_missing_required_hooks_fail_loudly(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(
        test_incomplete="""
import pytest
from altar.conformance import ExecutionBackendContract
from altar.conformance.reference import InProcessExecutionBackend


class TestIncomplete(ExecutionBackendContract):
    @pytest.fixture
    def backend(self, tmp_path):
        return InProcessExecutionBackend(data_root=tmp_path)
"""
    )
    recorder = pytester.inline_run("-p", "no:cacheprovider")
    _, _, failed = recorder.listoutcomes()
    names = {report.nodeid.rsplit("::", 1)[-1] for report in failed}
    assert "test_zero_exit_succeeds_without_failure" in names
    assert "test_timeout_reaches_the_platform" in names
    assert "test_expired_task_fails_with_timeout_reason" in names
    report = next(r for r in failed if r.nodeid.endswith("test_zero_exit_succeeds_without_failure"))
    assert "must implement finish_task" in report.longreprtext


def test_a_missing_backend_fixture_names_what_to_do(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(
        test_nobackend="""
from altar.conformance import ExecutionBackendContract


class TestNoBackend(ExecutionBackendContract):
    pass
"""
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "-k", "name_is_a_nonempty")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*Subclasses must provide a `backend` fixture*"])


def test_a_projects_own_loop_scope_wins(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = module\n")
    pytester.makepyfile(test_consumer=CONSUMER)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-W", "error", "--co")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines(["*asyncio_default_fixture_loop_scope=module*"])
