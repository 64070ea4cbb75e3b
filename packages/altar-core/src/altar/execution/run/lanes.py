"""Lanes: each backend of a routed run schedules, holds back and falls back on its own.

A run on one backend has one lane. A run of a plan with ``[backends.NAME]`` has one lane per
backend, and each lane has

- its own ``max_parallel`` (its ``[backends.NAME]`` table's), within the run's ``max_parallel``;
- its own capacity report (asked of that backend only, so a free slot on one backend never
  lets a task of another through);
- its own :class:`~altar.execution.run.holding.Hold`: a limit refusal or a pile-up of provider
  endings on one backend holds back only the tasks going there; the others keep submitting.

Each attempt goes to a lane: the first to the task's route, and after an attempt the provider
ended (``TaskFailure.provider_ending``) the next goes to the task's fallback (see
:func:`~altar.execution.plans.routing.next_route`); a failure of the task itself keeps it where
it is. The route is a pure function of the journal's attempts (each handle carries
``altar.route``), so a resumed run sends every attempt where the first process would have.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence

from altar.execution.backend import ExecutionBackend
from altar.execution.errors import BackendUnavailableError, ProviderLimitError
from altar.execution.plans.placeholders import expand_spec
from altar.execution.run import scheduling
from altar.execution.run.holding import Hold
from altar.execution.run.observing import call_error
from altar.execution.run.results import one_line
from altar.execution.run.routed import LABEL_ROUTE, RoutedBackend
from altar.execution.state.records import PENDING, RUNNING, SUBMITTING, Attempt, TaskRecord
from altar.execution.types import ContainerTaskSpec, TaskFailure

__all__ = ["ONE", "Lanes", "attempt_routes"]

#: The lane of a run on one backend.
ONE = ""

Emit = Callable[[str, str], None]


def attempt_routes(
    attempts: Sequence[Attempt],
    first: str,
    next_route: Callable[[str], str],
    known: Collection[str],
) -> tuple[list[str], str]:
    """The route of each attempt, and where the next attempt goes (pure).

    An attempt with a handle went where its ``altar.route`` label says; one without (in doubt,
    or refused) to where the one before it sent it. After a provider ending the next attempt
    goes to ``next_route(route)``; after any other end it stays.
    """
    route = first
    routes: list[str] = []
    for attempt in attempts:
        label = attempt.handle.labels.get(LABEL_ROUTE) if attempt.handle is not None else None
        here = label if label is not None and label in known else route
        routes.append(here)
        failure = attempt.failure
        route = next_route(here) if failure is not None and failure.provider_ending else here
    return routes, route


class Lanes:
    """The lanes of one run: where each task's attempt goes, and which may be submitted now."""

    def __init__(
        self,
        backend: ExecutionBackend,
        specs: Mapping[str, ContainerTaskSpec],
        *,
        max_parallel: int | None,
        pool: Callable[[TaskRecord], str],
        emit: Emit,
    ) -> None:
        self.backend = backend
        self.routed = backend if isinstance(backend, RoutedBackend) else None
        self.specs = specs  # the plan's specs, placeholders not yet expanded
        self.max_parallel = max_parallel
        self.pool = pool
        self._emit = emit
        names = list(self.routed.lanes) if self.routed is not None else [ONE]
        # without fallbacks every attempt of a task goes to its route: a lookup, per tick
        self._fixed = self.routed is not None and not (
            self.routed.fallbacks or self.routed.backend_fallbacks
        )
        self.holds = {name: Hold(self._emitter(name)) for name in names}
        self._expanded: dict[tuple[str, str], ContainerTaskSpec] = {}

    def _emitter(self, name: str) -> Emit:
        if name == ONE:
            return self._emit
        return lambda kind, message: self._emit(kind, f"backend {name}: {message}")

    # -- where attempts go ----------------------------------------------------------------

    def routes(self, record: TaskRecord) -> tuple[list[str], str]:
        """Each attempt's lane and the next attempt's (one lane: all :data:`ONE`)."""
        routed = self.routed
        if routed is None:
            return [ONE] * len(record.attempts), ONE
        return attempt_routes(
            record.attempts,
            routed.route_of(record.id),
            lambda route: routed.next_route(record.id, route),
            routed.lanes,
        )

    def lane(self, record: TaskRecord) -> str:
        """The lane ``record`` counts against: its open attempt's, else its next attempt's."""
        if self.routed is None:
            return ONE
        if self._fixed or not record.attempts:
            last = record.last
            label = last.handle.labels.get(LABEL_ROUTE) if last and last.handle else None
            return label if label in self.routed.lanes else self.routed.route_of(record.id)
        routes, following = self.routes(record)
        if record.state in (SUBMITTING, PENDING, RUNNING) and routes:
            return routes[-1]
        last = record.last
        if last is not None and last.handle is None and last.failure is None:
            return routes[-1]  # in doubt: submitted again as the same attempt
        return following

    def spec_for(
        self, record: TaskRecord, attempt: Attempt, spec: ContainerTaskSpec
    ) -> ContainerTaskSpec:
        """``spec`` (expanded for the task's route) for ``attempt``'s lane, naming that lane."""
        routed = self.routed
        if routed is None:
            return spec
        routes, _ = self.routes(record)
        index = next(i for i, a in enumerate(record.attempts) if a is attempt)
        route = routes[index]
        if route != routed.route_of(record.id):  # a fallback: its own paths
            key = (record.id, route)
            if key not in self._expanded:
                resolver = routed.lanes[route].path_resolver()
                self._expanded[key] = expand_spec(self.specs[record.id], resolver)
            spec = self._expanded[key]
        return dataclasses.replace(spec, labels={**spec.labels, LABEL_ROUTE: route})

    # -- holds ----------------------------------------------------------------------------

    def feed(
        self,
        limits: Iterable[tuple[str, ProviderLimitError]],
        endings: Iterable[tuple[str, TaskFailure]],
        records: Mapping[str, TaskRecord],
        now: float,
    ) -> None:
        """Tell each lane's hold what its provider refused and ended since the last tick."""
        for task_id, error in limits:  # withdrawn: its lane is where it goes next
            self.holds[self.lane(records[task_id])].limited(error, now)
        for task_id, failure in endings:  # the lane of the attempt the provider ended
            routes, _ = self.routes(records[task_id])
            self.holds[routes[-1] if routes else ONE].ended(task_id, failure, now)
        for hold in self.holds.values():
            hold.observe(records)

    def closed(self, now: float) -> bool:
        """True while no lane may submit at all."""
        return all(hold.closed(now) for hold in self.holds.values())

    # -- choosing -------------------------------------------------------------------------

    async def choose(
        self,
        ready: list[TaskRecord],
        in_flight: Iterable[TaskRecord],
        waiting: Collection[TaskRecord],
        now: float,
        *,
        submitted: bool = False,
    ) -> list[TaskRecord]:
        """The ready tasks to submit now: within the run's and each lane's ``max_parallel``,
        each lane's capacity, and each lane's hold. A lane's capacity is asked only if one of
        its tasks may go.

        ``in_flight``: a routed run's tasks submitting, pending or running; one backend's
        submitting only (the runner applied the run's ``max_parallel`` to ``ready`` already,
        and a tick must not walk every running task). ``submitted``: some task of the run is
        in flight (a failed capacity call then says to resume).
        """
        if not ready or self.closed(now):
            return []
        if self.routed is None:
            return await self._choose_lane(
                ONE, self.backend, ready, in_flight, waiting, now, submitted
            )
        flying: dict[str, list[TaskRecord]] = {}
        for record in in_flight:
            flying.setdefault(self.lane(record), []).append(record)
        queued: dict[str, list[TaskRecord]] = {}
        for record in waiting:
            queued.setdefault(self.lane(record), []).append(record)
        room = None
        if self.max_parallel is not None:
            taken = sum(len(group) for group in flying.values()) + len(waiting)
            room = max(0, self.max_parallel - taken)
        # each lane's room (None: unbounded): none while held, else its max_parallel's and
        # the run's
        caps: dict[str, int | None] = {}
        for name, hold in self.holds.items():
            cap = room
            limit = self.routed.limits.get(name)
            if limit is not None:
                free = limit - len(flying.get(name, ())) - len(queued.get(name, ()))
                cap = free if cap is None else min(cap, free)
            caps[name] = 0 if hold.closed(now) or (cap is not None and cap <= 0) else cap
        full = {name for name, cap in caps.items() if cap == 0}
        if len(full) == len(caps):
            return []
        groups: dict[str, list[TaskRecord]] = {}
        position: dict[str, int] = {}  # of the tasks taken, for the ready order
        for index, record in enumerate(ready):  # until every lane has all it may take
            name = self.lane(record)
            if name in full:
                continue
            group = groups.setdefault(name, [])
            group.append(record)
            position[record.id] = index
            cap = caps[name]
            if cap is not None and len(group) >= cap:
                full.add(name)
                if len(full) == len(caps):
                    break
        chosen: list[TaskRecord] = []
        for name, group in groups.items():
            if room is not None:
                group = group[:room]
            if not group:
                continue
            lane = self.routed.lanes[name]
            admitted = await self._choose_lane(
                name, lane, group, flying.get(name, ()), queued.get(name, ()), now, submitted
            )
            chosen += admitted
            if room is not None:
                room -= len(admitted)
        return sorted(chosen, key=lambda record: position[record.id])

    async def _choose_lane(
        self,
        name: str,
        backend: ExecutionBackend,
        ready: list[TaskRecord],
        records: Iterable[TaskRecord],
        waiting: Collection[TaskRecord],
        now: float,
        submitted: bool,
    ) -> list[TaskRecord]:
        hold = self.holds[name]
        if hold.closed(now):
            return []
        routed = self.routed
        if routed is not None and routed.resting(name):
            return []  # found unreachable lately: not asked again until its rest is over
        records = list(records)
        where = f"{name}: capacity" if name != ONE else "capacity"
        try:
            capacity = await backend.capacity()
        except BackendUnavailableError as error:
            self._emit("backend_unavailable", f"{where}: {one_line(error)}")
            if routed is not None:
                routed.found_down(name, error)
            return []
        except Exception as error:
            submitted = submitted or bool(records)
            raise call_error(backend, where, error, submitted=submitted) from error
        if routed is not None:
            routed.found_up(name)
        chosen = scheduling.choose(
            ready,
            records=records,
            max_parallel=None,
            free=capacity.pools,
            pool=self.pool,
            waiting=waiting,
        )
        return hold.admit(chosen, now)
