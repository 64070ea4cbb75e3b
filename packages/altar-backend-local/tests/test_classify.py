from __future__ import annotations

import pytest
from altar.backends.local.classify import Outcome, deadline, live_state, terminal_failure
from altar.backends.local.runtime import ContainerSummary
from altar.execution import TaskState

CID = "c" * 64


def summary(state: str, *, timeout: int | None = None, created: int = 1000) -> ContainerSummary:
    labels = {"altar.timeout_s": str(timeout)} if timeout else {}
    return ContainerSummary(CID, state, created, labels)


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ("created", TaskState.PENDING),
        ("running", TaskState.RUNNING),
        ("paused", TaskState.RUNNING),
        ("restarting", TaskState.RUNNING),
        ("removing", TaskState.RUNNING),
        ("something-new", TaskState.RUNNING),
        ("exited", None),
        ("dead", None),
    ],
)
def test_weakness_4_live_states_never_guess_a_failure(
    state: str, expected: TaskState | None
) -> None:
    assert live_state(summary(state)) is expected


def test_deadline_counts_from_the_second_after_creation() -> None:
    assert deadline(summary("running", timeout=60)) == 1061
    assert deadline(summary("running")) is None


def test_exit_zero_succeeds() -> None:
    assert terminal_failure(summary("exited"), Outcome(0, False, 1005)) is None


def test_exit_code_is_a_deterministic_exit_reason() -> None:
    failure = terminal_failure(summary("exited"), Outcome(3, False, 1005))
    assert failure is not None
    assert (failure.reason, failure.exit_code, failure.deterministic) == ("exit_3", 3, True)


def test_sigkill_from_outside_is_not_deterministic_and_not_oom() -> None:
    failure = terminal_failure(summary("exited"), Outcome(137, False, 1005))
    assert failure is not None
    assert failure.reason == "exit_137"
    assert not failure.deterministic


def test_oom_flag_wins_even_when_the_main_process_exited_zero() -> None:
    failure = terminal_failure(summary("exited"), Outcome(0, True, 1005))
    assert failure is not None
    assert (failure.reason, failure.exit_code, failure.deterministic) == ("oom_killed", 0, False)


def test_finishing_after_the_deadline_is_a_timeout_even_with_exit_zero() -> None:
    failure = terminal_failure(summary("exited", timeout=10), Outcome(0, False, 1011.5))
    assert failure is not None
    assert failure.reason == "timeout"
    assert terminal_failure(summary("exited", timeout=10), Outcome(0, False, 1010.9)) is None


def test_a_killed_overrun_stays_a_timeout_not_exit_137() -> None:
    failure = terminal_failure(summary("exited", timeout=10), Outcome(137, False, 1020))
    assert failure is not None
    assert failure.reason == "timeout"


@pytest.mark.parametrize("code", [0, 1])
def test_weakness_4_dead_is_never_a_success_nor_deterministic(code: int) -> None:
    failure = terminal_failure(summary("dead"), Outcome(code, False, None))
    assert failure is not None
    assert failure.reason == "job_failed"
    assert not failure.deterministic
