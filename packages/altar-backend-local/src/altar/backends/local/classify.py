"""Pure classification of Docker container facts into Altar task states and reasons."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from altar.backends.local.runtime import ContainerSummary, timeout_from_labels
from altar.execution import TaskFailure, TaskState

__all__ = [
    "DEADLINE_SLACK_S",
    "LIVE_STATES",
    "TERMINAL_STATES",
    "Outcome",
    "deadline",
    "deadline_from_start",
    "ended_by_engine_restart",
    "engine_lost_failure",
    "gone_after_engine_restart",
    "live_state",
    "lost_start_failure",
    "start_unknown_failure",
    "terminal_failure",
    "timeout_failure",
]

#: A task may run ``timeout_s`` from its start (the engine's ``State.StartedAt``, issue 15), and
#: is killed at most this much later: the margin covers the engine's clock read through the
#: host's and the whole-second ``Created`` the earliest possible deadline is bounded by.
DEADLINE_SLACK_S = 1.0
LIVE_STATES = {
    "created": TaskState.PENDING,
    "running": TaskState.RUNNING,
    "paused": TaskState.RUNNING,
    "restarting": TaskState.RUNNING,
    # Being removed (by cancel or cleanup elsewhere): not an outcome; the next poll sees
    # either its exit or that it is gone.
    "removing": TaskState.RUNNING,
}
TERMINAL_STATES = frozenset({"exited", "dead"})
_SIGNAL_EXITS = {137: "SIGKILL", 143: "SIGTERM"}


@dataclass(frozen=True)
class Outcome:
    """How a container ended, from its ``die``/``oom`` events or from an inspect."""

    exit_code: int
    oom_killed: bool
    finished_at: float | None
    started_at: float | None = None  # engine seconds; None when not known


def deadline(summary: ContainerSummary) -> float | None:
    """The earliest engine time the container can overrun its ``altar.timeout_s`` label.

    A container starts after it is created, so its deadline (:func:`deadline_from_start`) is
    never before this; only past it is the start time worth asking for.
    """
    timeout_s = timeout_from_labels(summary.labels)
    if timeout_s is None:
        return None
    return summary.created + DEADLINE_SLACK_S + timeout_s


def deadline_from_start(summary: ContainerSummary, started_at: float) -> float | None:
    """Engine time after which a container started at ``started_at`` has overrun its limit."""
    timeout_s = timeout_from_labels(summary.labels)
    if timeout_s is None:
        return None
    return max(started_at, summary.created) + DEADLINE_SLACK_S + timeout_s


def live_state(summary: ContainerSummary) -> TaskState | None:
    """PENDING/RUNNING for a container that has not ended, None for a terminal one.

    A state Docker does not document is reported as RUNNING rather than guessed into a
    failure; it cannot last, since the engine moves every container to ``exited``.
    """
    if summary.state in TERMINAL_STATES:
        return None
    return LIVE_STATES.get(summary.state, TaskState.RUNNING)


def timeout_failure(container_id: str, timeout_s: int) -> TaskFailure:
    return TaskFailure(
        "timeout",
        f"container {container_id} ran longer than its {timeout_s} s timeout and was killed",
        deterministic=False,
    )


def terminal_failure(summary: ContainerSummary, outcome: Outcome) -> TaskFailure | None:
    """The failure of a finished container, or None if it succeeded.

    The deadline counts from ``outcome.started_at`` when known, else from creation (the earliest
    it can be; the poller fetches the start time before relying on that).
    Order matters: a container that finished past its deadline timed out (whoever killed it
    and whatever it exited with, so a success after the deadline is not a success); an
    ``OOMKilled`` container failed for memory even when its main process exited 0 because
    only a child was killed; ``dead`` means the engine lost track of it.
    """
    cid = summary.id
    limit = (
        deadline_from_start(summary, outcome.started_at)
        if outcome.started_at is not None
        else deadline(summary)
    )
    timeout_s = timeout_from_labels(summary.labels)
    if (
        limit is not None
        and timeout_s is not None
        and outcome.finished_at is not None
        and outcome.finished_at >= limit
    ):
        return timeout_failure(cid, timeout_s)
    if outcome.oom_killed:
        return TaskFailure(
            "oom_killed",
            f"container {cid} was killed for exceeding its memory limit "
            f"(exit code {outcome.exit_code})",
            deterministic=False,
            exit_code=outcome.exit_code,
        )
    if summary.state == "dead":
        return TaskFailure(
            "job_failed",
            f"the Docker engine reports container {cid} as dead (exit code "
            f"{outcome.exit_code}); it could not be stopped or removed cleanly",
            deterministic=False,
        )
    if outcome.exit_code == 0:
        return None
    code = outcome.exit_code
    signal = _SIGNAL_EXITS.get(code)
    if signal is not None:
        # Killed from outside (docker kill, the host's OOM killer on an engine that does not
        # flag it): running it again may well succeed.
        return TaskFailure(
            f"exit_{code}",
            f"container {cid} exited with code {code} ({signal}, sent from outside the task)",
            deterministic=False,
            exit_code=code,
        )
    return TaskFailure(
        f"exit_{code}",
        f"container {cid} exited with code {code}",
        deterministic=True,
        exit_code=code,
    )


def start_unknown_failure(container_id: str) -> TaskFailure:
    """A container the engine may have run and then forgot (see :mod:`.launch`)."""
    return TaskFailure(
        "job_failed",
        f"engine_lost: container {container_id} may have run: the Docker engine restarted "
        "while starting "
        "it and restored it as never started, so its outcome is lost; it is not started twice",
        deterministic=False,
        provider_ending="engine_lost",
    )


def ended_by_engine_restart(outcome: Outcome, restarted_at: float | None) -> bool:
    """Whether the engine's own start ended the container (see :mod:`.restarts`).

    It started before the running engine did and ended after: only the engine stops a
    container then. Exit code 0 stays the task's success (it finished its work, even if the
    engine's stop signal asked it to), and an OOM kill stays the task's.
    """
    return (
        restarted_at is not None
        and outcome.started_at is not None
        and outcome.finished_at is not None
        and outcome.started_at < restarted_at <= outcome.finished_at
        and outcome.exit_code != 0
        and not outcome.oom_killed
    )


def _clock(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%H:%M:%S.%f")[:-3] + " UTC"


def engine_lost_failure(container_id: str, outcome: Outcome, restarted_at: float) -> TaskFailure:
    """A container the engine stopped when it started again: the provider's ending.

    The reason is ``job_failed``, not ``exit_<n>``: the code is the engine's kill, not the
    task's answer; the engine's words (the code and when) are in the detail.
    """
    code = outcome.exit_code
    signal = _SIGNAL_EXITS.get(code)
    how = f"exit code {code}" + (f", {signal}" if signal else "")
    started = outcome.started_at if outcome.started_at is not None else restarted_at
    finished = outcome.finished_at if outcome.finished_at is not None else restarted_at
    return TaskFailure(
        "job_failed",
        f"engine_lost: the Docker engine restarted at {_clock(restarted_at)} under container "
        f"{container_id} (started {_clock(started)}) and stopped it at {_clock(finished)} "
        f"({how}); the task did not fail",
        deterministic=False,
        provider_ending="engine_lost",
    )


def gone_after_engine_restart(
    container_id: str, seen_at: float, restarted_at: float
) -> TaskFailure:
    """A container that existed before the engine's last start and is gone since."""
    return TaskFailure(
        "container_missing",
        f"engine_lost: container {container_id} existed at {_clock(seen_at)} and is gone after "
        f"the Docker engine restarted at {_clock(restarted_at)}",
        deterministic=False,
        provider_ending="engine_lost",
    )


def lost_start_failure(container_id: str, restarted_at: float) -> TaskFailure:
    """A container the engine reports running although it never started, with no process.

    Seen when ``dockerd`` was killed while starting a container: the restarted engine lists
    it ``running`` with no ``StartedAt`` and the pid of a process that ended long ago; it
    never reports its end. Whether the task ran, and how it ended, is lost with the engine.
    """
    return TaskFailure(
        "job_failed",
        f"engine_lost: the Docker engine restarted at {_clock(restarted_at)} while it started "
        f"container {container_id}; it reports the container running but never started, with "
        "no process left, and will never report its end: its outcome is lost",
        deterministic=False,
        provider_ending="engine_lost",
    )
