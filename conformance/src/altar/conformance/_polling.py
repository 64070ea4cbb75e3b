"""Polling with the suite's checks: one well-formed status per handle, within a bound."""

from __future__ import annotations

import asyncio
import time

import pytest
from altar.execution import ExecutionBackend, TaskHandle, TaskState, TaskStatus

__all__ = [
    "ACTIVE",
    "MISSING_TASK_ID",
    "POLL_BOUND_S",
    "expect_failure",
    "expect_state",
    "expect_states",
    "missing_handle",
    "poll",
    "poll_one",
]

POLL_BOUND_S = 5.0
"""How long one ``poll`` may take before the suite says it waited for a task."""

MISSING_TASK_ID = "altar-conformance-missing"
"""The ``external_id`` of a task no provider has ever seen."""

ACTIVE = (TaskState.PENDING, TaskState.RUNNING)


def missing_handle(backend: ExecutionBackend) -> TaskHandle:
    return TaskHandle(backend.name, MISSING_TASK_ID, {"job_id": "J"})


def _check_status(status: object, handle: TaskHandle) -> TaskStatus:
    assert isinstance(status, TaskStatus), f"poll must return TaskStatus objects, got {status!r}"
    assert isinstance(status.state, TaskState), f"state must be a TaskState, got {status.state!r}"
    assert status.handle.external_id == handle.external_id, (
        f"poll returned the status of {status.handle.external_id!r}, expected that of "
        f"{handle.external_id!r} (statuses in the order of the handles)"
    )
    if status.state is TaskState.FAILED:
        assert status.failure is not None, (
            f"{handle.external_id!r} is FAILED with failure None, expected a TaskFailure"
        )
    else:
        assert status.failure is None, (
            f"only a FAILED status carries a failure; {status.state.name} carries "
            f"{status.failure!r}, expected None"
        )
    return status


async def poll(backend: ExecutionBackend, handles: list[TaskHandle]) -> list[TaskStatus]:
    """Poll with a bound: poll reports the current state and never waits for a task."""
    started = time.monotonic()
    try:
        statuses = await asyncio.wait_for(backend.poll(list(handles)), POLL_BOUND_S)
    except TimeoutError:
        pytest.fail(
            f"poll was still waiting after {POLL_BOUND_S} s, expected it to report the current "
            "state of each task without waiting for any of them to finish"
        )
    elapsed = time.monotonic() - started
    assert elapsed < POLL_BOUND_S, (
        f"poll blocked the event loop for {elapsed:.1f} s, expected under {POLL_BOUND_S} s; "
        "run blocking provider calls in a thread and never wait for a task inside poll"
    )
    assert isinstance(statuses, list), f"poll returned a {type(statuses).__name__}, expected a list"
    assert len(statuses) == len(handles), (
        f"poll returned {len(statuses)} statuses for {len(handles)} handles, expected exactly "
        "one status per handle"
    )
    return [_check_status(s, h) for s, h in zip(statuses, handles, strict=True)]


async def poll_one(backend: ExecutionBackend, handle: TaskHandle) -> TaskStatus:
    (status,) = await poll(backend, [handle])
    return status


def _states(expected: TaskState | tuple[TaskState, ...]) -> tuple[TaskState, ...]:
    return expected if isinstance(expected, tuple) else (expected,)


def expect_state(
    status: TaskStatus, expected: TaskState | tuple[TaskState, ...], rule: str
) -> TaskStatus:
    """Fail, naming ``rule``, what was seen and what was wanted, unless ``status`` is expected."""
    wanted = _states(expected)
    failure = status.failure
    said = "" if failure is None else f" ({failure.reason}: {failure.detail})"
    assert status.state in wanted, (
        f"{rule}: task {status.handle.external_id!r} reads as {status.state.name}{said}, "
        f"expected {' or '.join(s.name for s in wanted)}"
    )
    return status


def expect_states(
    statuses: list[TaskStatus], expected: list[TaskState], rule: str
) -> list[TaskStatus]:
    """Every status in its expected state, in order (one message names them all)."""
    seen = [s.state.name for s in statuses]
    assert seen == [s.name for s in expected], (
        f"{rule}: the tasks read as {seen}, expected {[s.name for s in expected]}"
    )
    return statuses


def expect_failure(
    status: TaskStatus, reason: str, *, deterministic: bool | None, rule: str
) -> TaskStatus:
    """A FAILED status with ``reason`` (and ``deterministic``, unless None)."""
    expect_state(status, TaskState.FAILED, rule)
    failure = status.failure
    assert failure is not None, f"{rule}: a FAILED status must carry a TaskFailure"
    assert failure.reason == reason, (
        f"{rule}: the failure reason is {failure.reason!r} ({failure.detail}), expected {reason!r}"
    )
    if deterministic is not None:
        assert failure.deterministic is deterministic, (
            f"{rule}: {reason} is marked deterministic={failure.deterministic}, expected "
            f"deterministic={deterministic}"
        )
    return status
