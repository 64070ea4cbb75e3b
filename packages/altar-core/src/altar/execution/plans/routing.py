"""Plans with several named backends: the ``[backends.NAME]`` tables and the routing rule.

A plan may declare backends by name instead of one ``[backend]``::

    [backends.cpu]
    type = "local"
    default = true

    [backends.gpu]
    type = "slurm"
    for_gpu = true
    options = { partition = "gpu" }

Each task goes to one of them by this rule, first match wins:

1. the task's own ``backend = "NAME"``;
2. a task requesting a GPU (``resources.gpu``) goes to the first backend declared
   ``for_gpu = true``, if any;
3. the backend declared ``default = true``, else the first one declared.

The rule is pure (:func:`route_tasks`), so ``altar check``, ``--dry-run`` and the run agree.

A backend table may also set ``max_parallel`` (its own lane's bound, beside the run's) and
``fallback = "OTHER"``; a task may set ``fallback`` too (it wins over its backend's). After an
attempt the provider ended (preempted, evicted, ...) the task's next attempt goes to the
fallback (:func:`next_route`); a failure of the task itself never moves it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from altar.execution.errors import PlanError
from altar.execution.plans.fields import _TASK_ID

__all__ = [
    "BackendDecl",
    "CrossTransfer",
    "Routing",
    "cross_transfers",
    "next_route",
    "parse_routing",
    "reachable",
    "route_tasks",
    "routing_dict",
    "routing_lines",
]

_DECL_KEYS = ("default", "fallback", "for_gpu", "max_parallel", "options", "type")

Fail = Callable[[str, str], PlanError]


@dataclass(frozen=True)
class BackendDecl:
    """One ``[backends.NAME]`` table."""

    name: str
    type: str
    options: dict[str, Any] = field(default_factory=dict)
    for_gpu: bool = False
    max_parallel: int | None = None
    fallback: str | None = None


@dataclass(frozen=True)
class Routing:
    """The plan's named backends, its default, and each task's chosen backend name."""

    backends: dict[str, BackendDecl]
    default: str
    routes: dict[str, str]
    """task id -> backend name, after the rule."""
    fallbacks: dict[str, str] = field(default_factory=dict)
    """task id -> the task's own ``fallback`` (a backend's own is in its declaration)."""

    def gpu_backend(self) -> str | None:
        return next((d.name for d in self.backends.values() if d.for_gpu), None)


def next_route(
    task_id: str,
    route: str,
    *,
    routes: Mapping[str, str],
    fallbacks: Mapping[str, str],
    backend_fallbacks: Mapping[str, str | None],
) -> str:
    """Where a task's next attempt goes after the provider ended one on ``route``: the task's
    own fallback when it ended on the task's route, else ``route``'s fallback, else ``route``."""
    if route == routes.get(task_id) and task_id in fallbacks:
        return fallbacks[task_id]
    return backend_fallbacks.get(route) or route


def reachable(routing: Routing, task_id: str) -> list[str]:
    """Every backend a task's attempts may go to: its route, then its fallbacks in turn."""
    found = [routing.routes[task_id]]
    while (route := _next(routing, task_id, found[-1])) not in found:
        found.append(route)
    return found


@dataclass(frozen=True)
class CrossTransfer:
    """One output that moves from its producer's backend to a reader on another backend."""

    uri: str
    logical_path: str
    producer: str
    source: str
    reader: str
    target: str
    fallback: bool = False
    """Only when the producer or the reader runs on a fallback backend."""


def _decl(name: str, raw: Any, fail: Fail) -> tuple[BackendDecl, bool]:
    where = f"backends.{name}"
    if not _TASK_ID.fullmatch(name):  # the rule of task ids: it is a label and a CLI word
        raise fail(
            where,
            "a backend's name must start with a letter or digit and use only letters, "
            f"digits, '.', '_' and '-'; got {name!r}",
        )
    if not isinstance(raw, Mapping):
        raise fail(where, "must be a table")
    unknown = sorted(set(raw) - set(_DECL_KEYS))
    if unknown:
        raise fail(f"{where}.{unknown[0]}", f"unknown key (allowed: {', '.join(_DECL_KEYS)})")
    kind = raw.get("type")
    if not isinstance(kind, str) or not kind:
        raise fail(f"{where}.type", f"must be a backend type, got {kind!r}")
    options = raw.get("options", {})
    if not isinstance(options, Mapping):
        raise fail(f"{where}.options", "must be a table")
    flags = {key: raw.get(key, False) for key in ("default", "for_gpu")}
    for key, value in flags.items():
        if not isinstance(value, bool):
            raise fail(f"{where}.{key}", f"must be true or false, got {value!r}")
    limit = raw.get("max_parallel")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise fail(f"{where}.max_parallel", f"must be a whole number of at least 1, got {limit!r}")
    fallback = raw.get("fallback")
    if fallback is not None and (not isinstance(fallback, str) or fallback == name):
        raise fail(f"{where}.fallback", f"must name another backend, got {fallback!r}")
    decl = BackendDecl(name, kind, dict(options), flags["for_gpu"], limit, fallback)
    return decl, flags["default"]


def parse_routing(data: Mapping[str, Any], tasks: Sequence[Any], fail: Fail) -> Routing | None:
    """The plan's routing, or None for a plan without ``[backends]`` (one ``[backend]``)."""
    raw = data.get("backends")
    where = {task.id: task.origin or f"tasks[{i}]" for i, task in enumerate(tasks)}
    if raw is None:
        for task in tasks:
            if task.backend is not None or task.fallback is not None:
                key = "backend" if task.backend is not None else "fallback"
                raise fail(f"{where[task.id]}.{key}", "the plan declares no [backends]")
        return None
    if "backend" in data:
        raise fail("backends", "a plan has either one [backend] or named [backends.NAME]")
    if not isinstance(raw, Mapping) or not raw:
        raise fail("backends", "must be a table of at least one [backends.NAME]")
    decls: dict[str, BackendDecl] = {}
    defaults: list[str] = []
    for name, table in raw.items():
        decl, is_default = _decl(str(name), table, fail)
        decls[decl.name] = decl
        if is_default:
            defaults.append(decl.name)
    if len(defaults) > 1:
        raise fail(f"backends.{defaults[1]}.default", f"{defaults[0]!r} is the default already")
    known = ", ".join(decls)
    for decl in decls.values():
        if decl.fallback is not None and decl.fallback not in decls:
            raise fail(f"backends.{decl.name}.fallback", f"no backend {decl.fallback!r} ({known})")
    for decl in decls.values():
        chain = [decl.name]
        while (following := decls[chain[-1]].fallback) is not None:
            if following in chain:
                raise fail(f"backends.{decl.name}.fallback", _cycle([*chain, following]))
            chain.append(following)
    default = defaults[0] if defaults else next(iter(decls))
    chosen: dict[str, str] = {}
    fallbacks: dict[str, str] = {}
    for task in tasks:
        for key, into in (("backend", chosen), ("fallback", fallbacks)):
            name = getattr(task, key)
            if name is None:
                continue
            if name not in decls:
                raise fail(f"{where[task.id]}.{key}", f"no backend {name!r} (declared: {known})")
            into[task.id] = name
    routing = Routing(decls, default, {})
    routes = route_tasks(routing, tasks, chosen)
    for task_id, name in fallbacks.items():
        if name == routes[task_id]:
            raise fail(f"{where[task_id]}.fallback", f"{name!r} is the task's own backend")
    routing = Routing(decls, default, routes, fallbacks)
    for task_id in fallbacks:
        chain = reachable(routing, task_id)
        if _next(routing, task_id, chain[-1]) != chain[-1]:  # back to where it was: a cycle
            raise fail(
                f"{where[task_id]}.fallback",
                _cycle([*chain, _next(routing, task_id, chain[-1])]),
            )
    return routing


def _cycle(chain: Sequence[str]) -> str:
    return (
        f"fallbacks go round in a cycle ({' -> '.join(chain)}): a fallback chain must end "
        "on a backend without one"
    )


def _next(routing: Routing, task_id: str, route: str) -> str:
    fallbacks = {d.name: d.fallback for d in routing.backends.values()}
    return next_route(
        task_id,
        route,
        routes=routing.routes,
        fallbacks=routing.fallbacks,
        backend_fallbacks=fallbacks,
    )


def route_tasks(
    routing: Routing, tasks: Sequence[Any], chosen: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Each task's backend name by the module's rule (``chosen``: the tasks' own choices)."""
    chosen = chosen or routing.routes
    gpu = routing.gpu_backend()
    routes: dict[str, str] = {}
    for task in tasks:
        if task.id in chosen:
            routes[task.id] = chosen[task.id]
        elif task.spec.resources.gpu and gpu is not None:
            routes[task.id] = gpu
        else:
            routes[task.id] = routing.default
    return routes


def cross_transfers(routing: Routing, tasks: Sequence[Any]) -> list[CrossTransfer]:
    """The outputs a routing moves between backends: one per (output, reading task) pair
    whose producer runs on another backend (a reader names the output's logical path among
    its inputs, as for any dependency). Empty when every reader shares its producer's.
    With fallbacks, one more for each other pair of backends the two may run on."""
    producers: dict[str, tuple[str, str, list[str]]] = {}  # logical path -> (uri, task, routes)
    for task in tasks:
        for out in task.spec.outputs:
            producers[out.logical_path] = (out.uri, task.id, reachable(routing, task.id))
    moves: list[CrossTransfer] = []
    for task in tasks:
        targets = reachable(routing, task.id)
        for transfer in task.spec.inputs:
            made = producers.get(transfer.logical_path)
            if made is None or made[1] == task.id:
                continue
            uri, producer, sources = made
            for source in sources:
                for target in targets:
                    if source != target:
                        fallback = source != sources[0] or target != targets[0]
                        moves.append(
                            CrossTransfer(
                                uri,
                                transfer.logical_path,
                                producer,
                                source,
                                task.id,
                                target,
                                fallback,
                            )
                        )
    return moves


# -- what --dry-run shows (pure) ------------------------------------------------------


def _known_size(uri: str) -> int | None:
    from altar.execution.uris import local_path_or_none

    path = local_path_or_none(uri)
    try:
        return os.stat(path).st_size if path is not None else None
    except OSError:
        return None  # not produced yet: the size is known only after the run


def routing_dict(plan: Any) -> dict[str, Any]:
    """Each task's backend and the transfers the routing implies (``--dry-run --json``)."""
    return {
        "routes": dict(plan.routing.routes),
        "transfers": [
            {
                "uri": m.uri,
                "logical_path": m.logical_path,
                "from": f"{m.producer}@{m.source}",
                "to": f"{m.reader}@{m.target}",
                "bytes": _known_size(m.uri),
                "fallback": m.fallback,
            }
            for m in cross_transfers(plan.routing, plan.tasks)
        ],
    }


def routing_lines(plan: Any) -> list[str]:
    """``--dry-run``'s lines: each backend's tasks, then each transfer between backends."""
    data = routing_dict(plan)
    lines = []
    for route in plan.routing.backends:
        tasks = [t for t, r in data["routes"].items() if r == route]
        kind = plan.routing.backends[route].type
        lines.append(f"backend {route} ({kind}): {len(tasks)} task(s)")
    for move in data["transfers"]:
        size = "size known after the run" if move["bytes"] is None else f"{move['bytes']} bytes"
        when = ", only on a fallback" if move["fallback"] else ""
        lines.append(
            f"transfer {move['logical_path']}: {move['from']} -> {move['to']} ({size}{when})"
        )
    if not data["transfers"]:
        lines.append("transfers: none (every reader runs on its producer's backend)")
    return lines
