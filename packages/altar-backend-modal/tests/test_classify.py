"""The pure classifier: a sandbox's result → TaskStatus."""

from __future__ import annotations

import pytest
from altar.backends.modal.classify import status_from_result
from altar.backends.modal.runtime import ResultStatus, SandboxResult
from altar.execution import TaskHandle, TaskState

HANDLE = TaskHandle("modal", "sb-" + "A" * 22, {"job_id": "J"})


def _status(status: ResultStatus, code: int | None = None, message: str = ""):
    return status_from_result(HANDLE, SandboxResult(status, code, message))


def test_live_states() -> None:
    assert _status(ResultStatus.RUNNING).state is TaskState.RUNNING
    assert _status(ResultStatus.PENDING).state is TaskState.PENDING
    assert _status(ResultStatus.RUNNING).failure is None


def test_success() -> None:
    status = _status(ResultStatus.SUCCESS, 0)
    assert (status.state, status.failure) == (TaskState.SUCCEEDED, None)


@pytest.mark.parametrize("code", [1, 3, 124, 137, 255])
def test_exit_codes_are_deterministic_exit_reasons_even_124_and_137(code: int) -> None:
    status = _status(ResultStatus.FAILURE, code)
    assert status.state is TaskState.FAILED
    assert status.failure is not None
    assert (status.failure.reason, status.failure.exit_code) == (f"exit_{code}", code)
    assert status.failure.deterministic
    assert HANDLE.external_id in (status.failure.detail or "")


def test_timeout_comes_from_the_status_not_the_return_code() -> None:
    status = _status(ResultStatus.TIMEOUT, 0)
    assert status.failure is not None
    assert (status.failure.reason, status.failure.deterministic) == ("timeout", False)


@pytest.mark.parametrize(
    ("result_status", "detail"),
    [
        (ResultStatus.KERNEL_OOM_KILL, "kernel"),
        (ResultStatus.MEMORY_MANAGER_EVICTION, "memory manager"),
        (ResultStatus.MEMORY_THRASHING_EVICTION, "thrashing"),
    ],
)
def test_oom_kills_and_memory_evictions_are_oom_killed(
    result_status: ResultStatus, detail: str
) -> None:
    status = _status(result_status, 137, "Out of memory")
    assert status.failure is not None
    assert status.failure.reason == "oom_killed"
    assert not status.failure.deterministic
    assert status.failure.exit_code == 137
    assert detail in (status.failure.detail or "")
    assert "Out of memory" in (status.failure.detail or "")


def test_termination_is_cancelled() -> None:
    status = _status(ResultStatus.TERMINATED, 0)
    assert status.failure is not None
    assert status.failure.reason == "cancelled"
    assert "terminated" in (status.failure.detail or "")


@pytest.mark.parametrize(
    "result_status",
    [
        ResultStatus.INIT_FAILURE,
        ResultStatus.INTERNAL_FAILURE,
        ResultStatus.IDLE_TIMEOUT,
        ResultStatus.UNKNOWN,
    ],
)
def test_platform_failures_are_job_failed_with_modals_message(result_status: ResultStatus) -> None:
    status = _status(result_status, 0, "image pull failed: manifest unknown")
    assert status.failure is not None
    assert (status.failure.reason, status.failure.deterministic) == ("job_failed", False)
    assert "manifest unknown" in (status.failure.detail or "")


def test_failure_status_with_exit_zero_is_not_a_success() -> None:
    status = _status(ResultStatus.FAILURE, 0)
    assert status.state is TaskState.FAILED
    assert status.failure is not None
    assert status.failure.reason == "job_failed"
