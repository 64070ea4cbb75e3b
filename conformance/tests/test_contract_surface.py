"""The suite keeps altar 0.3.0's test names and hook signatures, so old subclasses keep working."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import altar.conformance
import pytest
from altar.conformance import ExecutionBackendContract, LaunchedTask, ProviderTask
from altar.execution import ContainerTaskSpec, ResourceRequest

V030_TESTS = {
    "test_name_is_a_nonempty_discriminator",
    "test_submit_returns_handle_stamped_with_name_and_labels",
    "test_poll_empty_returns_empty",
    "test_poll_returns_one_normalized_status_per_handle",
    "test_capacity_and_path_resolver_types",
    "test_zero_exit_succeeds_without_failure",
    "test_nonzero_exit_fails_with_stable_exit_reason",
    "test_poll_preserves_handle_order",
    "test_resubmitting_an_active_spec_does_not_run_it_twice_at_once",
    "test_resubmitting_after_a_terminal_outcome_runs_the_task_again",
    "test_missing_task_is_a_terminal_failure",
    "test_failure_detail_returns_the_end_of_a_failed_tasks_log",
    "test_failure_detail_of_a_missing_task_does_not_raise",
    "test_timeout_reaches_the_platform",
    "test_expired_task_fails_with_timeout_reason",
    "test_input_digest_mismatch_is_rejected_before_compute",
    "test_input_digest_on_a_directory_is_rejected",
}

# name -> (parameters after self, keyword-only parameters)
HOOKS = {
    "finish_task": (["backend", "handle", "exit_code"], {"exit_code"}),
    "expire_task": (["backend", "handle"], set()),
    "launched_timeout": (["backend", "handle"], set()),
    "write_task_log": (["backend", "handle", "lines"], set()),
    "fail_input_verification": (["backend", "handle"], set()),
    "launched_task": (["backend", "handle"], set()),
    "reopen": (["backend"], set()),
    "oom_kill_task": (["backend", "handle"], set()),
    "unsupported_specs": (["spec"], set()),
    "make_provider_unreachable": (["backend"], set()),
    "provider_task": (["backend", "handle"], set()),
    "leave_task_created": (["backend", "spec", "key"], set()),
    "end_by_provider": (["backend", "handle"], set()),
}


def test_every_030_test_name_is_kept() -> None:
    names = {name for name in dir(ExecutionBackendContract) if name.startswith("test_")}
    assert names >= V030_TESTS, sorted(V030_TESTS - names)


@pytest.mark.parametrize("hook", sorted(HOOKS))
def test_hook_signatures(hook: str) -> None:
    expected, keyword_only = HOOKS[hook]
    parameters = list(
        inspect.signature(getattr(ExecutionBackendContract, hook)).parameters.values()
    )
    assert [p.name for p in parameters[1:]] == expected
    assert {p.name for p in parameters if p.kind is p.KEYWORD_ONLY} == keyword_only


def test_class_attributes_and_defaults() -> None:
    assert ExecutionBackendContract.unlimited_timeout_s is None
    assert ExecutionBackendContract.max_timeout_s is None
    assert ExecutionBackendContract.__test__ is False

    class TestSubclass(ExecutionBackendContract):
        pass

    class Intermediate(ExecutionBackendContract):
        __test__ = False

    assert TestSubclass.__test__ is True
    assert Intermediate.__test__ is False


def test_launched_task_fields() -> None:
    launched = LaunchedTask("img", ["a"])
    assert (launched.env, launched.labels, launched.cpu, launched.memory_bytes) == (
        {},
        {},
        None,
        None,
    )
    assert launched.gpu_count == 0


def test_provider_task_fields_default_to_unreported() -> None:
    assert (ProviderTask().image, ProviderTask().cpu, ProviderTask().memory_bytes) == (None,) * 3


def test_launched_task_of_a_spec_is_what_a_faithful_provider_records() -> None:
    spec = ContainerTaskSpec(
        kind="k",
        image="busybox:1.36",
        command=["sh", "-c", "a b"],
        env={"E": " v "},
        labels={"l": "1"},
        resources=ResourceRequest(cpu=1.5, memory_gb=1.5, gpu="gpu", count=2),
    )
    assert LaunchedTask.of(spec) == LaunchedTask(
        "busybox:1.36", ["sh", "-c", "a b"], {"E": " v "}, {"l": "1"}, 1.5, 1610612736, 2
    )
    assert LaunchedTask.of(ContainerTaskSpec(kind="k", image="i", command=[])).gpu_count == 0


def _modules_that_assert() -> set[str]:
    package = Path(altar.conformance.__file__).parent
    return {
        f"altar.conformance.{path.stem}"
        for path in package.glob("*.py")
        if any(isinstance(node, ast.Assert) for node in ast.walk(ast.parse(path.read_text())))
    }


def test_every_module_that_asserts_is_registered_for_assertion_rewriting() -> None:
    # pytest rewrites plain asserts only in modules registered before their import; a wheel
    # install of a plugin is not rewritten otherwise, and a failure would show no values.
    registered = set(altar.conformance._SUITE_MODULES)
    assert _modules_that_assert() <= registered, sorted(_modules_that_assert() - registered)
