"""The ``routed`` backend: one run driving several named backends, dispatching by task.

A run of a plan with ``[backends.NAME]`` tables drives one :class:`RoutedBackend`. Its options
(recorded in the journal like any backend's, so status, logs, cancel and resume rebuild it)
name each backend and route each task id to one. Submits, polls, cancels, cleanups and logs
go to the backend of the handle's ``altar.task`` label; listing asks every backend.

Data between fabrics: when a producer's outputs are collected to their plan-local uris,
those that a task on another backend reads are hashed once (the digest lands in a
verification record beside the file) and staged on the reader's backend with that digest,
which the reader's stager checks again. :attr:`RoutedBackend.moved_bytes` counts them.

One backend's outage: a poll of its handles that raises ``BackendUnavailableError`` reports
their last status seen (nothing new), so the other backends' tasks go on; a capacity report
leaves it out. That backend then rests (:data:`DOWN_BACKOFF_S`): neither polled nor asked for
capacity until the rest is over, so a backend that takes long to say it is down does not slow
every poll of the run.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, ClassVar

from altar.execution.backend import ExecutionBackend
from altar.execution.errors import BackendUnavailableError
from altar.execution.labels import LABEL_TASK
from altar.execution.types import (
    Capacity,
    ContainerTaskSpec,
    PathResolver,
    TaskHandle,
    TaskLogs,
    TaskState,
    TaskStatus,
    Transfer,
)

__all__ = [
    "LABEL_ROUTE",
    "RoutedBackend",
    "named_max_parallel",
    "resolver_for",
    "routed_options",
]

#: The named backend an attempt went to, added to the handles the routed backend returns.
LABEL_ROUTE = "altar.route"

#: After a poll finds one backend unreachable, its handles are not asked again for this long,
#: doubling on each further failure up to the second value (seconds): an unreachable
#: slurmctld takes squeue about 18 s to report, and every poll of the run would wait for it.
DOWN_BACKOFF_S = (1.0, 30.0)


def routed_options(plan: Any) -> dict[str, Any]:
    """The ``routed`` backend's options for a plan with a routing (pure)."""
    from altar.execution.plans.routing import cross_transfers, reachable

    routing = plan.routing
    readers: dict[str, set[str]] = {}  # logical path -> every backend a reader may run on
    for task in plan.tasks:
        for transfer in task.spec.inputs:
            readers.setdefault(transfer.logical_path, set()).update(reachable(routing, task.id))
    moves = [
        {"uri": m.uri, "logical_path": m.logical_path, "source": m.source, "target": m.target}
        for m in cross_transfers(routing, plan.tasks)
    ]
    backends: dict[str, dict[str, Any]] = {}
    for d in routing.backends.values():
        backends[d.name] = {"type": d.type, "options": dict(d.options)}
        if d.max_parallel is not None:
            backends[d.name]["max_parallel"] = d.max_parallel
        if d.fallback is not None:
            backends[d.name]["fallback"] = d.fallback
    options: dict[str, Any] = {
        "backends": backends,
        "routes": dict(routing.routes),
        "default": routing.default,
        "moves": moves,
        "producers": {
            out.uri: routing.routes[task.id] for task in plan.tasks for out in task.spec.outputs
        },
        "readers": {path: sorted(routes) for path, routes in readers.items()},
    }
    if any(d.fallback for d in routing.backends.values()) or routing.fallbacks:
        options["fallbacks"] = dict(routing.fallbacks)
        options["owners"] = {out.uri: task.id for task in plan.tasks for out in task.spec.outputs}
    return options


def lane_for(backend: ExecutionBackend, task_id: str) -> ExecutionBackend:
    """The backend ``task_id`` runs on: a routed backend's lane, else ``backend`` itself."""
    return backend.lane(task_id) if isinstance(backend, RoutedBackend) else backend


def resolver_for(backend: ExecutionBackend, task_id: str) -> PathResolver:
    """How ``task_id``'s paths appear on the backend it runs on."""
    return lane_for(backend, task_id).path_resolver()


def lanes_of(backend: ExecutionBackend, task_id: str) -> list[tuple[str | None, ExecutionBackend]]:
    """Each (route, backend) ``task_id`` may run on: its route, then its fallbacks (one
    backend: ``(None, backend)``)."""
    if not isinstance(backend, RoutedBackend):
        return [(None, backend)]
    return [(route, backend.lanes[route]) for route in backend.reachable(task_id)]


def unanswered(backend: ExecutionBackend, handle: TaskHandle) -> bool:
    """True when the last poll of a routed backend could not reach ``handle``'s backend and
    had no status of it to repeat: its status says nothing (keep the journal's state)."""
    return (
        isinstance(backend, RoutedBackend)
        and (handle.backend, handle.external_id) in backend.unanswered
    )


def note_attempt(backend: ExecutionBackend, handle: TaskHandle | None) -> None:
    """Tell a routed backend where an attempt ran (before its outputs are collected)."""
    if handle is not None and isinstance(backend, RoutedBackend):
        backend.note(handle)


class RoutedBackend(ExecutionBackend):
    """Several backends behind one, each task on the one its route names."""

    name: ClassVar[str] = "routed"
    input_digest_verification = "staging"

    def __init__(
        self,
        *,
        backends: Mapping[str, Mapping[str, Any]],
        routes: Mapping[str, str],
        default: str,
        moves: list[Mapping[str, str]] | None = None,
        producers: Mapping[str, str] | None = None,
        fallbacks: Mapping[str, str] | None = None,
        owners: Mapping[str, str] | None = None,
        readers: Mapping[str, list[str]] | None = None,
        built: Mapping[str, ExecutionBackend] | None = None,
    ) -> None:
        from altar.execution.registry import create_backend

        if default not in backends:
            raise ValueError(f"default backend {default!r} is not declared")
        self.lanes: dict[str, ExecutionBackend] = dict(built or {})
        for route, decl in backends.items():
            if route not in self.lanes:
                self.lanes[route] = create_backend(
                    str(decl["type"]),
                    dict(decl.get("options") or {}),
                    source=f"backends.{route}.options",
                )
        # a keyed resubmit is answered with the first submit's task only if every lane does so
        adopts = all(lane.adopts_submissions for lane in self.lanes.values())
        setattr(self, "adopts_submissions", adopts)  # noqa: B010 (a ClassVar of the contract)
        # one window for every lane's submits: the narrowest any lane allows
        own = [lane.submit_window for lane in self.lanes.values()]
        window = None if not adopts or None in own else min(w for w in own if w is not None)
        setattr(self, "submit_window", window)  # noqa: B010 (a ClassVar of the contract)
        self.routes = dict(routes)
        self.default = default
        self.moves = [dict(m) for m in moves or ()]
        self.producers = dict(producers or {})
        #: each lane's own ``max_parallel`` and ``fallback`` (from its ``[backends.NAME]``)
        self.limits = {
            r: int(d["max_parallel"]) for r, d in backends.items() if d.get("max_parallel")
        }
        self.backend_fallbacks = {
            r: str(d["fallback"]) for r, d in backends.items() if d.get("fallback")
        }
        self.fallbacks = dict(fallbacks or {})  # task id -> its own fallback
        self.owners = dict(owners or {})  # output uri -> the task producing it (with fallbacks)
        #: logical path -> the backends its readers may run on (None: every backend, as
        #: for a journal written before the routed backend knew them)
        self.readers = {p: set(r) for p, r in readers.items()} if readers is not None else None
        self.ran: dict[str, str] = {}  # task id -> the route its latest attempt went to
        self.moved_bytes = 0
        self.moved_files = 0
        self._last: dict[tuple[str, str], TaskStatus] = {}
        self.clock: Callable[[], float] = time.monotonic
        #: route -> (when it may be asked again, the backoff, the error it gave)
        self._down: dict[str, tuple[float, float, BackendUnavailableError]] = {}
        #: the handles the last poll could not ask and had seen no status of (a resumed run,
        #: ``altar status``): their statuses are placeholders, see :func:`unanswered`
        self.unanswered: set[tuple[str, str]] = set()

    # -- dispatch -----------------------------------------------------------------------

    def route_of(self, task_id: str | None) -> str:
        return self.routes.get(task_id or "", self.default)

    def lane(self, task_id: str | None) -> ExecutionBackend:
        return self.lanes[self.route_of(task_id)]

    def _route_of_handle(self, handle: TaskHandle) -> str:
        route = handle.labels.get(LABEL_ROUTE)
        if route in self.lanes:
            return str(route)
        return self.route_of(handle.labels.get(LABEL_TASK))

    def next_route(self, task_id: str, route: str) -> str:
        """Where ``task_id`` goes after the provider ended its attempt on ``route``."""
        from altar.execution.plans.routing import next_route

        return next_route(
            task_id,
            route,
            routes=self.routes,
            fallbacks=self.fallbacks,
            backend_fallbacks=self.backend_fallbacks,
        )

    def reachable(self, task_id: str) -> list[str]:
        """Every route a task's attempts may go to: its own, then its fallbacks in turn."""
        found = [self.route_of(task_id)]
        while (route := self.next_route(task_id, found[-1])) not in found:
            found.append(route)
        return found

    def note(self, handle: TaskHandle) -> None:
        """Remember where a task's attempt ran (its outputs are collected from there)."""
        task = handle.labels.get(LABEL_TASK)
        if task is not None:
            self.ran[task] = self._route_of_handle(handle)

    def resting(self, route: str, now: float | None = None) -> bool:
        """True while ``route`` was found unreachable lately and is not to be asked again."""
        entry = self._down.get(route)
        return entry is not None and (self.clock() if now is None else now) < entry[0]

    def found_down(self, route: str, error: BackendUnavailableError) -> None:
        """``route`` could not be reached: rest it, twice as long as the last time."""
        if self.resting(route):
            return
        wait = DOWN_BACKOFF_S[0]
        if route in self._down:
            wait = min(self._down[route][1] * 2, DOWN_BACKOFF_S[1])
        self._down[route] = (self.clock() + wait, wait, error)

    def found_up(self, route: str) -> None:
        self._down.pop(route, None)

    def _group(self, handles: list[TaskHandle]) -> dict[str, list[int]]:
        groups: dict[str, list[int]] = {}
        for index, handle in enumerate(handles):
            groups.setdefault(self._route_of_handle(handle), []).append(index)
        return groups

    async def submit(self, spec: ContainerTaskSpec) -> TaskHandle:
        # the runner names the attempt's route (a fallback after a provider ending)
        route = spec.labels.get(LABEL_ROUTE) or ""
        if route not in self.lanes:
            route = self.route_of(spec.labels.get(LABEL_TASK))
        handle = await self.lanes[route].submit(spec)
        handle = replace(handle, labels={**handle.labels, LABEL_ROUTE: route})
        self.note(handle)
        return handle

    async def poll(self, handles: list[TaskHandle]) -> list[TaskStatus]:
        self.unanswered = set()
        out: list[TaskStatus | None] = [None] * len(handles)
        down: BackendUnavailableError | None = None
        groups = self._group(handles)
        now = self.clock()
        for route, indexes in groups.items():
            try:
                if len(groups) > 1 and self.resting(route, now):
                    raise self._down[route][2]  # found down lately: not asked again yet
                statuses = await self.lanes[route].poll([handles[i] for i in indexes])
            except BackendUnavailableError as error:
                if len(groups) == 1:
                    raise
                self.found_down(route, error)
                down = error
                for i in indexes:  # nothing new from a backend that cannot be reached
                    key = (handles[i].backend, handles[i].external_id)
                    if key not in self._last:  # never seen by this process: no news at all
                        self.unanswered.add(key)
                    out[i] = self._last.get(key, TaskStatus(handles[i], TaskState.PENDING))
                continue
            self.found_up(route)
            for i, status in zip(indexes, statuses, strict=True):
                self.note(handles[i])
                self._last[(handles[i].backend, handles[i].external_id)] = status
                out[i] = replace(status, handle=handles[i])
        if down is not None and all((h.backend, h.external_id) not in self._last for h in handles):
            raise down
        return [status for status in out if status is not None]

    async def list_submissions(self, run: str) -> list[TaskHandle] | None:
        found: list[TaskHandle] = []
        for route, backend in self.lanes.items():
            listed = await backend.list_submissions(run)
            if listed is None:
                return None  # one backend cannot list: nobody may sweep on a partial list
            found += [replace(h, labels={**h.labels, LABEL_ROUTE: route}) for h in listed]
        return found

    async def capacity(self) -> Capacity:
        pools: dict[str, int] = {}
        for backend in self.lanes.values():
            try:
                report = await backend.capacity()
            except BackendUnavailableError:
                continue
            if not report.pools:
                return Capacity()  # one autoscaling or unknown lane: the total is unknown
            for pool, free in report.pools.items():
                pools[pool] = pools.get(pool, 0) + free
        return Capacity(pools)

    async def cancel(self, handle: TaskHandle) -> None:
        await self.lanes[self._route_of_handle(handle)].cancel(handle)

    async def cleanup(self, handles: list[TaskHandle]) -> None:
        for route, indexes in self._group(handles).items():
            await self.lanes[route].cleanup([handles[i] for i in indexes])
            for i in indexes:  # a cleaned task is not polled again: forget its last status
                self._last.pop((handles[i].backend, handles[i].external_id), None)

    async def failure_detail(self, handle: TaskHandle) -> str | None:
        return await self.lanes[self._route_of_handle(handle)].failure_detail(handle)

    async def task_logs(self, handle: TaskHandle) -> TaskLogs | None:
        return await self.lanes[self._route_of_handle(handle)].task_logs(handle)

    async def check_spec(self, spec: ContainerTaskSpec) -> None:
        await self.lane(spec.labels.get(LABEL_TASK)).check_spec(spec)

    async def check_backend(self) -> list[tuple[str, str]]:
        problems: list[tuple[str, str]] = []
        for route, backend in self.lanes.items():
            problems += [
                (f"backends.{route}.{option}" if option else f"backends.{route}", text)
                for option, text in await backend.check_backend()
            ]
        return problems

    async def image_present(self, image: str) -> bool | None:
        answers = [await backend.image_present(image) for backend in self.lanes.values()]
        if False in answers:
            return False
        return True if answers and all(answers) else None

    # -- data ---------------------------------------------------------------------------

    def _readers(self, logical_path: str) -> list[str]:
        """The routes whose tasks read ``logical_path`` from outside their own backend."""
        return sorted({m["target"] for m in self.moves if m["logical_path"] == logical_path})

    async def stage_inputs(self, transfers: list[Transfer]) -> None:
        # an input goes only to the backends its readers may run on (their routes and
        # fallbacks): a reference read on the workstation is never copied to a GPU cloud;
        # one no task is known to read goes everywhere (a copy too many, never a wrong result)
        for route, backend in self.lanes.items():
            wanted = [t for t in transfers if route in self._read_on(t.logical_path)]
            if wanted:
                await backend.stage_inputs(wanted)

    def _read_on(self, logical_path: str) -> set[str] | dict[str, ExecutionBackend]:
        if self.readers is None or logical_path not in self.readers:
            return self.lanes
        return self.readers[logical_path]

    async def collect_outputs(self, transfers: list[Transfer]) -> None:
        """Collect from the producing backend, then stage what other backends read."""
        from altar.execution.digests.digest import sha256_file, write_verification_record
        from altar.execution.uris import local_path_or_none

        groups: dict[str, list[Transfer]] = {}
        made: dict[str, str] = {}  # uri -> the route that produced it
        for transfer in transfers:
            route = self.producers.get(transfer.uri, self.default)
            owner = self.owners.get(transfer.uri)
            route = self.ran.get(owner, route) if owner is not None else route
            made[transfer.uri] = route
            groups.setdefault(route, []).append(transfer)
        for route, group in groups.items():
            await self.lanes[route].collect_outputs(group)
        for transfer in transfers:
            source = made[transfer.uri]
            targets = sorted(
                {
                    m["target"]
                    for m in self.moves
                    if m["uri"] == transfer.uri and m.get("source", source) == source
                }
            )
            path = local_path_or_none(transfer.uri)
            if not targets or path is None:
                continue
            before = os.stat(path)
            digest = transfer.digest or sha256_file(path)
            write_verification_record(path, digest, before)  # hashed once, for both hops
            for target in targets:
                paths = {
                    m["logical_path"]
                    for m in self.moves
                    if m["uri"] == transfer.uri
                    and m["target"] == target
                    and m.get("source", source) == source
                }
                staged = [Transfer(transfer.uri, p, digest=digest) for p in sorted(paths)]
                await self.lanes[target].stage_inputs(staged)
                self.moved_bytes += before.st_size * len(staged)
                self.moved_files += len(staged)


def routed_backend(
    plan: Any,
    backend_type: str | None,
    overrides: Any,
    single: Any,
) -> tuple[ExecutionBackend, dict[str, Any]]:
    """The backend for a plan with named backends (``single`` builds a one-backend run).

    ``--backend NAME`` naming a declared backend runs every task there, with its options;
    any other ``--backend TYPE`` runs every task on that type, as for a ``[backend]`` plan
    (a name wins over a type of the same spelling). Without ``--backend`` the run is routed.
    """
    from altar.execution.errors import PlanError
    from altar.execution.plans.plan import resolve_path_options
    from altar.execution.registry import default_registry

    routing = plan.routing
    if backend_type in routing.backends:
        decl = routing.backends[backend_type]
        one = replace(plan, backend_type=decl.type, backend_options=decl.options, routing=None)
        result: tuple[ExecutionBackend, dict[str, Any]] = single(one, None, overrides)
        return result
    if backend_type:
        result = single(replace(plan, routing=None), backend_type, overrides)
        return result
    if overrides:
        raise PlanError(
            f"{plan.source}: --option applies to one backend; with [backends.NAME] pass "
            "--backend NAME too, or set the option in the plan"
        )
    options = routed_options(plan)
    for route, decl in options["backends"].items():
        if decl["options"]:
            cls = default_registry.get(decl["type"])
            decl["options"] = resolve_path_options(decl["options"], cls, plan.base_dir)
        del route
    return RoutedBackend(**options), options


def named_max_parallel(plan: Any, backend_type: str | None, given: int | None) -> int | None:
    """The run's ``max_parallel`` when ``--backend NAME`` runs every task on one declared
    backend: ``given`` (``--max-parallel``) if set, else the tighter of the plan's and that
    backend's own (None: the plan's, as for any run)."""
    routing = plan.routing
    if given is not None or routing is None or backend_type not in routing.backends:
        return given
    own: int | None = routing.backends[backend_type].max_parallel
    whole: int | None = plan.max_parallel
    if own is None:
        return None
    return own if whole is None else min(own, whole)


def transfer_summary(backend: ExecutionBackend) -> dict[str, Any] | None:
    """What a routed run moved between backends (``--json``'s ``transfers``), else None."""
    if not isinstance(backend, RoutedBackend):
        return None
    return {"files": backend.moved_files, "bytes": backend.moved_bytes, "planned": backend.moves}


def moved_line(moved: Mapping[str, Any]) -> str:
    return f"moved {moved['bytes']} byte(s) in {moved['files']} file(s) between backends"
