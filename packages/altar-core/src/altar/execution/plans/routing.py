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
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from altar.execution.errors import PlanError

__all__ = [
    "BackendDecl",
    "CrossTransfer",
    "Routing",
    "cross_transfers",
    "parse_routing",
    "route_tasks",
]

_DECL_KEYS = ("default", "for_gpu", "options", "type")

Fail = Callable[[str, str], PlanError]


@dataclass(frozen=True)
class BackendDecl:
    """One ``[backends.NAME]`` table."""

    name: str
    type: str
    options: dict[str, Any] = field(default_factory=dict)
    for_gpu: bool = False


@dataclass(frozen=True)
class Routing:
    """The plan's named backends, its default, and each task's chosen backend name."""

    backends: dict[str, BackendDecl]
    default: str
    routes: dict[str, str]
    """task id -> backend name, after the rule."""

    def gpu_backend(self) -> str | None:
        return next((d.name for d in self.backends.values() if d.for_gpu), None)


@dataclass(frozen=True)
class CrossTransfer:
    """One output that moves from its producer's backend to a reader on another backend."""

    uri: str
    logical_path: str
    producer: str
    source: str
    reader: str
    target: str


def _decl(name: str, raw: Any, fail: Fail) -> tuple[BackendDecl, bool]:
    where = f"backends.{name}"
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
    return BackendDecl(name, kind, dict(options), flags["for_gpu"]), flags["default"]


def parse_routing(data: Mapping[str, Any], tasks: Sequence[Any], fail: Fail) -> Routing | None:
    """The plan's routing, or None for a plan without ``[backends]`` (one ``[backend]``)."""
    raw = data.get("backends")
    if raw is None:
        for item in data.get("tasks") or ():
            if isinstance(item, Mapping) and "backend" in item:
                raise fail(f"tasks.{item.get('id')}.backend", "the plan declares no [backends]")
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
    default = defaults[0] if defaults else next(iter(decls))
    chosen: dict[str, str] = {}
    for index, item in enumerate(data.get("tasks") or ()):
        if isinstance(item, Mapping) and "backend" in item:
            name = item["backend"]
            if not isinstance(name, str) or name not in decls:
                known = ", ".join(decls)
                raise fail(f"tasks[{index}].backend", f"no backend {name!r} (declared: {known})")
            chosen[str(item.get("id"))] = name
    routing = Routing(decls, default, {})
    return Routing(decls, default, route_tasks(routing, tasks, chosen))


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
    its inputs, as for any dependency). Empty when every reader shares its producer's."""
    producers: dict[str, tuple[str, str, str]] = {}  # logical path -> (uri, task, route)
    for task in tasks:
        for out in task.spec.outputs:
            producers[out.logical_path] = (out.uri, task.id, routing.routes[task.id])
    moves: list[CrossTransfer] = []
    for task in tasks:
        target = routing.routes[task.id]
        for transfer in task.spec.inputs:
            made = producers.get(transfer.logical_path)
            if made is not None and made[1] != task.id and made[2] != target:
                uri, producer, source = made
                moves.append(
                    CrossTransfer(uri, transfer.logical_path, producer, source, task.id, target)
                )
    return moves
