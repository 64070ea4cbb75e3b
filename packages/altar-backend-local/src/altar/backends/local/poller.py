"""Observing many containers with few engine requests (blocking; run in a thread).

One poll costs one list request for every handle whose outcome is not known yet. Containers
that just ended need their outcome (exit code, OOM kill, start and finish times). In order:

1. the :class:`~altar.backends.local.events.EventFollower`, which recorded ``start``, ``die``
   and ``oom`` of every container created while its stream was open: no request;
2. one bounded events request over the engine's window, for containers the follower did not
   cover (created before it, by another process, or while its stream was broken);
3. an inspect, for a container whose own ``die`` event is in neither.

Absence of an ``oom`` event is trusted only next to a ``die`` event. Outcomes are cached: a
container is looked at in detail once in its life.

Outside the common anatomy because observing many containers cheaply (events, window, inspect)
is more than :mod:`.classify`'s pure mapping; it uses that mapping and is the backend's ``poll``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from altar.backends.local.classify import (
    Outcome,
    deadline,
    deadline_from_start,
    ended_by_engine_restart,
    engine_lost_failure,
    gone_after_engine_restart,
    live_state,
    lost_start_failure,
    terminal_failure,
    timeout_failure,
)
from altar.backends.local.events import EventFollower
from altar.backends.local.restarts import process_runs
from altar.backends.local.runtime import (
    ContainerDetail,
    ContainerEvent,
    ContainerNotFoundError,
    ContainerSummary,
    DockerRuntime,
    timeout_from_labels,
)
from altar.execution import TaskFailure, TaskState

__all__ = ["Observation", "Poller"]

# Engine and host clocks are compared only near a deadline: a deadline this far ahead by our own
# clock cannot have passed on any sanely synchronised engine, so no clock read is spent on it.
_CLOCK_MARGIN_S = 300.0
# The backend starts each container right after creating it; one still "created" this long after
# will never start (its submitter stopped in between), so it is a failure, not a pending task.
_START_GRACE_S = 120.0
_INSPECT_WORKERS = 8
# A SIGKILLed container's "oom" event can reach the engine just after its "die"; an unflagged
# 137 is therefore classified only once it is this old (engine seconds).
_OOM_SETTLE_S = 1.0
# How long a poll waits for the die event of a container the list already reports exited.
_DIE_IN_FLIGHT_S = 0.5


@dataclass(frozen=True)
class Observation:
    state: TaskState
    failure: TaskFailure | None = None
    # The engine's own start and finish times (epoch seconds), where known without a request.
    started_at: float | None = None
    finished_at: float | None = None


def missing(container_id: str, why: str) -> Observation:
    return Observation(
        TaskState.FAILED,
        TaskFailure(
            "container_missing",
            f"container {container_id} not found: {why}",
            deterministic=False,
        ),
    )


class Poller:
    """Turns container ids into observations; remembers terminal ones."""

    def __init__(
        self,
        runtime: DockerRuntime,
        *,
        use_events: bool = True,
        follower: EventFollower | None = None,
    ) -> None:
        self.runtime = runtime
        self.use_events = use_events
        self.follower = follower
        self._terminal: dict[str, Observation] = {}
        self._started: dict[str, float] = {}  # engine start times (StartedAt), once known
        self._offset: float | None = None  # engine clock minus ours
        # The earliest time each container is known to have existed (its creation, or the
        # answer to its create): a container gone since an engine restart after it was lost
        # with the engine.
        self._existed: dict[str, float] = {}
        self._lock = threading.Lock()

    def cached(self, container_id: str) -> Observation | None:
        with self._lock:
            return self._terminal.get(container_id)

    def remember(self, container_id: str, observation: Observation) -> None:
        with self._lock:
            self._terminal[container_id] = observation

    def note_exists(self, container_id: str, at: float) -> None:
        """``container_id`` existed at ``at`` (epoch seconds)."""
        with self._lock:
            self._existed[container_id] = min(at, self._existed.get(container_id, at))

    def _engine_restart(self) -> float | None:
        """When the engine last started, if that ended its running containers (one look per
        poll that needs it; a runtime without the method never tells)."""
        read = getattr(self.runtime, "engine_restarted_at", None)
        if read is None:
            return None
        answer = read()
        return float(answer) if answer is not None else None

    def engine_now(self) -> float:
        if self._offset is None:
            self._offset = self.runtime.engine_time() - time.time()
        return time.time() + self._offset

    def observe(self, ids: Sequence[str]) -> dict[str, Observation]:
        """Current observations for full or prefix container ids (one list request)."""
        unique = dict.fromkeys(ids)
        with self._lock:  # one look-up per id, under one acquisition
            result = {i: obs for i in unique if (obs := self._terminal.get(i)) is not None}
        wanted = [i for i in unique if i not in result]
        if not wanted:
            return result
        summaries = self.runtime.list_containers(wanted)
        full = {s.id: s for s in summaries}
        by_id: dict[str, ContainerSummary] = {}
        restart = _Once(self._engine_restart)
        for wanted_id in wanted:
            exact = full.get(wanted_id)
            matches = [exact] if exact else [s for s in summaries if s.id.startswith(wanted_id)]
            if len(matches) == 1:
                by_id[wanted_id] = matches[0]
                self.note_exists(matches[0].id, float(matches[0].created))
            elif not matches:
                result[wanted_id] = self._gone(wanted_id, restart)
            else:
                result[wanted_id] = missing(wanted_id, "the id prefix is ambiguous")
        if self.follower is not None:
            # The engine publishes ``die`` a moment before its list shows the container exited:
            # a followed die event is the process's end, whatever the list still says.
            follower = self.follower
            by_id = {
                key: replace(s, state="exited")
                if live_state(s) is not None and follower.exit(s.id) is not None
                else s
                for key, s in by_id.items()
            }
        ended = [s for s in by_id.values() if live_state(s) is None]
        outcomes = self._outcomes(ended) if ended else {}
        for wanted_id, summary in by_id.items():
            result[wanted_id] = self._classify(wanted_id, summary, outcomes, restart)
        return result

    def _gone(self, container_id: str, restart: _Once) -> Observation:
        """A container the engine does not have: lost with the engine if it existed before
        the engine's last start, else missing as before."""
        with self._lock:
            existed = next(
                (at for cid, at in self._existed.items() if cid.startswith(container_id)), None
            )
        restarted = restart() if existed is not None else None
        if existed is not None and restarted is not None and existed < restarted:
            observation = Observation(
                TaskState.FAILED, gone_after_engine_restart(container_id, existed, restarted)
            )
            self.remember(container_id, observation)
            return observation
        return missing(
            container_id, "the Docker engine has no such container (removed, or never created here)"
        )

    def _classify(
        self,
        key: str,
        summary: ContainerSummary,
        outcomes: dict[str, Outcome | None],
        restart: _Once,
    ) -> Observation:
        state = live_state(summary)
        if state is not None:
            if self._overrun(summary):
                self.runtime.kill(summary.id)
                timeout_s = timeout_from_labels(summary.labels) or 0
                observation = Observation(TaskState.FAILED, timeout_failure(summary.id, timeout_s))
                self._remember_as(key, summary.id, observation)
                return observation
            if (
                summary.state == "created"
                and time.time() - summary.created > _START_GRACE_S
                and self.engine_now() - summary.created > _START_GRACE_S
            ):
                observation = Observation(
                    TaskState.FAILED,
                    TaskFailure(
                        "job_failed",
                        f"container {summary.id} was created but never started (the process "
                        "that submitted it stopped before starting it)",
                        deterministic=False,
                    ),
                )
                self._remember_as(key, summary.id, observation)
                return observation
            restarted = self._lost_while_starting(summary, restart)
            if restarted is not None:
                observation = Observation(
                    TaskState.FAILED, lost_start_failure(summary.id, restarted)
                )
                self._remember_as(key, summary.id, observation)
                return observation
            return Observation(state, started_at=self._known_start(summary.id))
        outcome = outcomes.get(summary.id)
        if outcome is None:
            # Removed between the list and the inspect.
            return missing(summary.id, "it was removed while it was being inspected")
        failure = terminal_failure(summary, outcome)
        if failure is not None and failure.reason.startswith("exit_"):
            failure = self._engine_ending(summary.id, outcome, restart) or failure
        if (
            failure is not None
            and failure.reason == "exit_137"
            and outcome.finished_at is not None
            and self.engine_now() - outcome.finished_at < _OOM_SETTLE_S
        ):
            return Observation(TaskState.RUNNING)  # let a late "oom" event arrive first
        started = outcome.started_at
        if started is None:
            started = self._known_start(summary.id)
        observation = Observation(
            TaskState.SUCCEEDED if failure is None else TaskState.FAILED,
            failure,
            started_at=started,
            finished_at=outcome.finished_at,
        )
        self._remember_as(key, summary.id, observation)
        return observation

    def _lost_while_starting(self, summary: ContainerSummary, restart: _Once) -> float | None:
        """The engine's start, if it left ``summary`` running without ever starting it.

        Only a running container whose start nobody saw (no event, no earlier inspect),
        created before the engine's last start, costs an inspect, once: one that started
        is remembered so.
        """
        if summary.state != "running" or self._known_start(summary.id) is not None:
            return None
        restarted = restart()
        if restarted is None or summary.created > restarted:
            return None
        detail = self._inspect_noting_start(summary.id)
        if detail is None or detail.state != "running" or detail.started_at is not None:
            return None
        if detail.pid is not None and process_runs(detail.pid):
            return None  # its process runs after all: the engine will see it end
        return restarted

    def _engine_ending(
        self, container_id: str, outcome: Outcome, restart: _Once
    ) -> TaskFailure | None:
        """The engine_lost failure of a container its engine's restart stopped, else None.

        Asked only of a container that exited non-zero: the engine's start time costs a
        socket connect and, once per engine process, an info request; the container's own
        start costs an inspect when no event told it.
        """
        restarted = restart()
        if restarted is None or outcome.finished_at is None or outcome.finished_at < restarted:
            return None
        if outcome.started_at is None:
            outcome = replace(outcome, started_at=self.started_at(container_id))
        if not ended_by_engine_restart(outcome, restarted):
            return None
        return engine_lost_failure(container_id, outcome, restarted)

    def _overrun(self, summary: ContainerSummary) -> bool:
        """A live container has run past its limit, counted from its start (issue 15).

        Its creation bounds the deadline from below, so the start time costs a request (once
        per container) only for a container that may have overrun by that bound.
        """
        earliest = deadline(summary)
        if (
            earliest is None
            or time.time() + _CLOCK_MARGIN_S < earliest
            or self.engine_now() < earliest
        ):
            return False
        started = self.started_at(summary.id)
        limit = deadline_from_start(summary, started) if started is not None else None
        return limit is not None and self.engine_now() >= limit

    def note_start(self, container_id: str, started_at: float) -> None:
        """Record a container's engine start time (from an event, or an inspect)."""
        with self._lock:
            self._started[container_id] = started_at

    def _known_start(self, container_id: str) -> float | None:
        """The start time the follower or an earlier answer gave, with no request."""
        followed = self.follower.started(container_id) if self.follower is not None else None
        if followed is not None:
            return followed
        with self._lock:
            return self._started.get(container_id)

    def started_at(self, container_id: str) -> float | None:
        """The container's start time: followed or remembered, else one inspect; None if it
        never started."""
        followed = self.follower.started(container_id) if self.follower is not None else None
        if followed is not None:
            return followed
        with self._lock:
            known = self._started.get(container_id)
        if known is not None:
            return known
        detail = self._inspect_noting_start(container_id)
        return None if detail is None else detail.started_at

    def _remember_as(self, key: str, container_id: str, observation: Observation) -> None:
        self.remember(container_id, observation)
        if key != container_id:
            self.remember(key, observation)

    def _outcomes(self, ended: list[ContainerSummary]) -> dict[str, Outcome | None]:
        outcomes: dict[str, Outcome | None] = {}
        if self.follower is not None:
            outcomes.update(self._followed(ended, self.follower))
        unknown = [s for s in ended if s.id not in outcomes]
        if self.use_events and unknown:
            since = min(s.created for s in unknown) - 1
            events = self.runtime.exit_events([s.id for s in unknown], since, self.engine_now())
            for event in events:
                if event.action == "start":
                    self.note_start(event.container_id, event.time)
            outcomes.update(_from_events(unknown, events))
        rest = [s.id for s in ended if s.id not in outcomes]
        if len(rest) > 1:
            # Many at once only for a fresh process meeting a finished run: a few at a time.
            with ThreadPoolExecutor(_INSPECT_WORKERS) as pool:
                outcomes.update(zip(rest, pool.map(self._inspect, rest), strict=True))
        else:
            outcomes.update((cid, self._inspect(cid)) for cid in rest)
        for summary in ended:
            outcome = outcomes.get(summary.id)
            earliest = deadline(summary)
            if (
                outcome is not None
                and outcome.started_at is None
                and earliest is not None
                and outcome.finished_at is not None
                and outcome.finished_at >= earliest
            ):
                # Near its limit: whether it overran depends on when it started.
                started = self.started_at(summary.id)
                outcomes[summary.id] = replace(outcome, started_at=started)
        return outcomes

    def _followed(
        self, ended: list[ContainerSummary], follower: EventFollower
    ) -> dict[str, Outcome | None]:
        """Outcomes the event stream recorded: no request at all.

        The list and the event stream are not ordered against each other, so a covered
        container listed as exited without a record yet is waited for, briefly.
        """
        in_flight = [
            s.id for s in ended if follower.exit(s.id) is None and follower.covers(s.created)
        ]
        if in_flight:
            follower.wait_for_exits(in_flight, _DIE_IN_FLIGHT_S)
        outcomes: dict[str, Outcome | None] = {}
        for summary in ended:
            record = follower.exit(summary.id)
            if record is not None:
                outcomes[summary.id] = Outcome(
                    record.exit_code,
                    follower.oom(summary.id),
                    record.time,
                    follower.started(summary.id),
                )
        return outcomes

    def _inspect(self, container_id: str) -> Outcome | None:
        detail = self._inspect_noting_start(container_id)
        if detail is None:
            return None
        return Outcome(detail.exit_code, detail.oom_killed, detail.finished_at, detail.started_at)

    def _inspect_noting_start(self, container_id: str) -> ContainerDetail | None:
        """One inspect (None if the container is gone), remembering its start time if any."""
        try:
            detail = self.runtime.inspect(container_id)
        except ContainerNotFoundError:
            return None
        if detail.started_at is not None:
            self.note_start(detail.id, detail.started_at)
        return detail


class _Once:
    """A value read at most once, on first use (the engine's start, for one poll)."""

    def __init__(self, read: Callable[[], float | None]) -> None:
        self._read = read
        self._value: float | None = None
        self._done = False

    def __call__(self) -> float | None:
        if not self._done:
            self._value = self._read()
            self._done = True
        return self._value


def _from_events(
    ended: list[ContainerSummary], events: list[ContainerEvent]
) -> dict[str, Outcome | None]:
    """Outcomes the event window vouches for: containers whose ``die`` event it holds."""
    die: dict[str, ContainerEvent] = {}
    oom: set[str] = set()
    start: dict[str, float] = {}
    for event in events:
        if event.action == "start":
            start[event.container_id] = max(event.time, start.get(event.container_id, 0.0))
        elif event.action == "die":
            if event.container_id not in die or event.time >= die[event.container_id].time:
                die[event.container_id] = event
        elif event.action == "oom":
            oom.add(event.container_id)
    outcomes: dict[str, Outcome | None] = {}
    for summary in ended:
        found = die.get(summary.id)
        if found is None or found.exit_code is None:
            continue
        outcomes[summary.id] = Outcome(
            found.exit_code, summary.id in oom, found.time, start.get(summary.id)
        )
    return outcomes
