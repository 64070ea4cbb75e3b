"""Plan files: a list of container tasks and the backend to run them on.

A plan is TOML (``.toml``) or JSON (any other suffix)::

    max_parallel = 2          # optional: at most this many tasks in flight
    max_retries = 2           # optional: attempts after a non-deterministic failure
    max_provider_retries = 10 # optional: attempts after the provider ended one (preempted, ...)

    [backend]
    type = "local"
    options = { slots = 2 }

    [[tasks]]
    id = "fold-0"             # optional; default "<kind>-<index>"
    kind = "fold"
    image = "busybox:latest"
    command = ["sh", "-c", "echo 0 > /mnt/volume/jobs/demo/fold-0.txt"]
    outputs = [{ uri = "out/fold-0.txt", logical_path = "jobs/demo/fold-0.txt" }]

Tasks use the :func:`~altar.execution.spec_to_dict` form plus ``id`` and ``after`` (ids of
tasks that must succeed first). A task that reads a logical path another task writes runs
after that task too, and such inputs are not staged: the producer puts them on the volume.
Relative ``uri`` paths resolve against the plan file's directory (relative output uris against
the plan's ``outputs_dir`` if it has one: ``"results/{altar:run}"`` keeps each run's outputs
apart, see :func:`outputs_for_run`). A task with a ``matrix`` is a sweep, expanded in place
(:mod:`~altar.execution.plans.sweeps`); ``after`` entries may be patterns with ``*``.
Every problem is
one :class:`~altar.execution.PlanError` line naming the file and the field.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from altar.execution.cache.settings import CacheSettings
from altar.execution.errors import PlanError
from altar.execution.labels import RESERVED_LABEL_PREFIX, reserved_labels
from altar.execution.plans.fields import (
    _CONTROL,
    RUN_PLACEHOLDER,
    Fail,
    _check_keys,
    _kind,
    _resolve_uri,
)
from altar.execution.plans.graph import _check_unique, _dependencies
from altar.execution.plans.placeholders import PLACEHOLDER
from altar.execution.plans.routing import Routing, parse_routing
from altar.execution.plans.sweeps import MAX_TASKS, Sweep, is_sweep
from altar.execution.plans.tasks import (
    PlanTask,
    Shared,
    _parse_sweep,
    _parse_task,
    default_task_id,
)
from altar.execution.state.bulk import collector_paused
from altar.execution.types import ContainerTaskSpec, Transfer

__all__ = [
    "Plan",
    "PlanTask",
    "default_task_id",
    "load_plan",
    "outputs_for_run",
    "parse_plan",
    "plan_from_specs",
    "with_outputs_under",
]

_TOP_KEYS = (
    "backend",
    "backends",
    "cache",
    "description",
    "max_parallel",
    "max_provider_retries",
    "max_retries",
    "outputs_dir",
    "tasks",
)
_BACKEND_KEYS = ("max_parallel", "max_provider_retries", "max_retries", "options", "type")


@dataclass(frozen=True)
class Plan:
    """What to run and where. ``backend_type`` may be None when the caller supplies one."""

    backend_type: str | None
    backend_options: dict[str, Any]
    tasks: list[PlanTask]
    max_parallel: int | None = None
    max_retries: int | None = None
    source: str = "plan"
    description: str | None = None
    dependencies: dict[str, tuple[str, ...]] = field(default_factory=dict)
    base_dir: Path | None = None
    """The plan file's folder: relative uris and path options resolve against it."""
    sweeps: tuple[Sweep, ...] = ()
    """The ``[[tasks]]`` entries with a matrix, each expanded in place into :attr:`tasks`."""
    outputs_dir: str | None = None
    """The plan's ``outputs_dir`` as written (relative output uris were resolved below it)."""
    max_provider_retries: int | None = None
    """Attempts allowed after the provider ended one (see :mod:`altar.execution.run.budget`)."""
    cache: CacheSettings | None = None
    """The plan's ``[cache]`` table: the run looks tasks up and stores them (None: no cache)."""
    routing: Routing | None = None
    """The plan's ``[backends.NAME]`` tables and each task's backend (see :mod:`.routing`)."""

    def __post_init__(self) -> None:
        _check_unique(self.tasks, self.source)
        checked: set[int] = set()  # a parsed plan's tasks share a few label tables: once each
        for task in self.tasks:
            labels = task.spec.labels
            if id(labels) not in checked:
                _check_reserved_labels(labels, f"{self.source}: task {task.id!r}: labels")
                checked.add(id(labels))  # alive while the loop runs: its id is its own
        if not self.dependencies:
            object.__setattr__(self, "dependencies", _dependencies(self.tasks, self.source))

    def task(self, task_id: str) -> PlanTask:
        for task in self.tasks:
            if task.id == task_id:
                return task
        raise KeyError(task_id)

    def input_fields(self, text: str) -> list[str]:
        """The plan fields of the inputs ``text`` (an error message) names by uri or logical path.

        ``tasks[21].inputs[1] (task fold-21)``, in plan order, so a staging error can point at
        the line to fix.
        """
        found = []
        for index, task in enumerate(self.tasks):
            for number, transfer in enumerate(task.spec.inputs):
                if repr(transfer.uri) in text or repr(transfer.logical_path) in text:
                    where = task.origin or f"tasks[{index}]"
                    found.append(f"{where}.inputs[{number}] (task {task.id})")
        return found

    def staged_inputs(self) -> list[Transfer]:
        """Inputs to stage once, de-duplicated, without those another task produces.

        An input its own task writes back (updated in place) is staged: nothing else puts it
        on the volume.
        """
        writer = {t.logical_path: task.id for task in self.tasks for t in task.spec.outputs}
        seen: dict[str, Transfer] = {}
        for task in self.tasks:
            for transfer in task.spec.inputs:
                if writer.get(transfer.logical_path, task.id) == task.id:
                    seen.setdefault(transfer.logical_path, transfer)
        return list(seen.values())


def _check_reserved_labels(labels: Mapping[str, str], where: str) -> None:
    """Refuse ``altar.`` labels: the runner sets those on every spec it submits."""
    reserved = reserved_labels(labels)
    if reserved:
        raise PlanError(
            f"{where}: {', '.join(map(repr, reserved))}: labels starting with "
            f"{RESERVED_LABEL_PREFIX!r} are reserved for the runner (run, task, attempt and "
            "submission key); rename them"
        )


def plan_from_specs(
    specs: Sequence[ContainerTaskSpec],
    *,
    backend_type: str | None = None,
    backend_options: Mapping[str, Any] | None = None,
    max_parallel: int | None = None,
    max_retries: int | None = None,
) -> Plan:
    """A plan over ready-made specs, ids derived as ``<kind>-<index>``."""
    tasks = [PlanTask(default_task_id(spec.kind, i), spec) for i, spec in enumerate(specs)]
    return Plan(backend_type, dict(backend_options or {}), tasks, max_parallel, max_retries, "plan")


def load_plan(path: str | os.PathLike[str]) -> Plan:
    """Read and validate a plan file (TOML for ``.toml``, JSON otherwise)."""
    with collector_paused():
        return _load_plan(Path(path))


def _load_plan(path: Path) -> Plan:
    name = str(path)
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise PlanError(f"{name}: cannot read the plan: {error.strerror or error}") from error
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise PlanError(f"{name}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    del raw  # a large plan's bytes, its text and its tables are not held all at once
    shared = Shared()
    try:
        if path.suffix.lower() == ".toml":
            data: Any = tomllib.loads(text)
        else:
            data = json.loads(text, object_hook=shared.hook)
    except tomllib.TOMLDecodeError as error:
        raise PlanError(f"{name}: invalid TOML: {error}") from None
    except json.JSONDecodeError as error:
        raise PlanError(
            f"{name}: invalid JSON: {error.msg} (line {error.lineno}, column {error.colno})"
        ) from None
    except RecursionError:
        raise PlanError(f"{name}: nested too deeply to be a plan") from None
    del text
    base_dir = path.resolve().parent
    return parse_plan(data, source=name, base_dir=base_dir, consume=True, shared=shared)


def parse_plan(
    data: Any,
    *,
    source: str = "plan",
    base_dir: Path | None = None,
    consume: bool = False,
    shared: Shared | None = None,
) -> Plan:
    """Validate plan data already parsed from TOML or JSON.

    ``consume``: the caller gives ``data`` up, and each task's table is dropped from its
    ``tasks`` list once parsed (a 100,000-task plan is then never held twice at once).
    ``shared``: the :class:`~.tasks.Shared` values the data was read with (default: new).
    """

    def fail(where: str, message: str) -> PlanError:
        return PlanError(f"{source}: {where}: {message}" if where else f"{source}: {message}")

    if not isinstance(data, Mapping):
        raise fail("", f"a plan must be a table/object, got {_kind(data)}")
    # every problem is reported at once: the header's first, then each task's first
    problems: list[str] = []
    header: tuple[Any, Mapping[str, Any], dict[str, int | None], Any] = (None, {}, {}, None)
    try:
        header = _parse_header(data, fail)
    except PlanError as error:
        problems.append(str(error))
    cache = None
    try:
        cache = _parse_cache(data.get("cache"), base_dir, fail)
    except PlanError as error:
        problems.append(str(error))
    raw_tasks = data.get("tasks")
    if not isinstance(raw_tasks, list) or not raw_tasks:
        problems.append(str(fail("tasks", "a plan needs at least one [[tasks]] entry")))
        raw_tasks = []
    outputs_dir: str | None = None
    outputs_base: str | Path | None = base_dir
    try:
        outputs_dir, outputs_base = _parse_outputs_dir(data.get("outputs_dir"), base_dir, fail)
    except PlanError as error:
        problems.append(str(error))
    tasks: list[PlanTask] = []
    sweeps: list[Sweep] = []
    shared = shared or Shared()
    for index, item in enumerate(raw_tasks):
        try:
            if is_sweep(item):
                sweep = _parse_sweep(item, index, base_dir, fail, tasks, outputs_base, shared)
                sweeps.append(sweep)
            else:
                task = _parse_task(
                    item, index, base_dir, fail, outputs_base=outputs_base, shared=shared
                )
                tasks.append(task)
        except PlanError as error:
            problems.append(str(error))
        if consume:
            raw_tasks[index] = None
    if len(tasks) > MAX_TASKS:
        problems.append(
            str(
                fail("tasks", f"{len(tasks)} tasks after expanding the sweeps; at most {MAX_TASKS}")
            )
        )
    if problems:
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise PlanError(problems[0] + more, problems)
    backend_type, options, limits, description = header
    routing = parse_routing(data, tasks, fail)
    return Plan(
        backend_type,
        dict(options),
        tasks,
        limits["max_parallel"],
        limits["max_retries"],
        source,
        description,
        base_dir=base_dir,
        sweeps=tuple(sweeps),
        outputs_dir=outputs_dir,
        max_provider_retries=limits["max_provider_retries"],
        cache=cache,
        routing=routing,
    )


def _parse_cache(raw: Any, base_dir: Path | None, fail: Fail) -> CacheSettings | None:
    """``[cache]``: ``dir`` (relative to the plan), ``version`` and ``trust_tags``."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise fail("cache", f"must be a table, got {_kind(raw)}")
    _check_keys(raw, ("dir", "trust_tags", "version"), "cache", fail)
    store = raw.get("dir")
    if store is not None and (not isinstance(store, str) or not store):
        raise fail("cache.dir", f"must be a directory path, got {store!r}")
    version = raw.get("version", "")
    if not isinstance(version, str):
        raise fail("cache.version", f"must be a string, got {version!r}")
    trust = raw.get("trust_tags", False)
    if not isinstance(trust, bool):
        raise fail("cache.trust_tags", f"must be true or false, got {trust!r}")
    where = None
    if store is not None:
        where = Path(os.path.expanduser(store))
        if base_dir is not None and not where.is_absolute():
            where = base_dir / where
    return CacheSettings(where, version, trust)


def _parse_header(
    data: Mapping[str, Any], fail: Fail
) -> tuple[Any, Mapping[str, Any], dict[str, int | None], Any]:
    """The plan's fields other than its tasks: (backend type, options, limits, description)."""
    _check_keys(data, _TOP_KEYS, "", fail)
    backend = data.get("backend", {})
    if not isinstance(backend, Mapping):
        raise fail("backend", f"must be a table, got {_kind(backend)}")
    _check_keys(backend, _BACKEND_KEYS, "backend", fail)
    backend_type = backend.get("type")
    if backend_type is not None and (not isinstance(backend_type, str) or not backend_type):
        raise fail("backend.type", f"must be a backend name, got {backend_type!r}")
    options = backend.get("options", {})
    if not isinstance(options, Mapping):
        raise fail("backend.options", f"must be a table, got {_kind(options)}")
    limits: dict[str, int | None] = {}
    for key, minimum in (("max_parallel", 1), ("max_retries", 0), ("max_provider_retries", 0)):
        if key in data and key in backend:
            raise fail(f"backend.{key}", f"also set at the top level; set {key} once")
        where, value = (key, data[key]) if key in data else (f"backend.{key}", backend.get(key))
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < minimum
        ):
            raise fail(where, f"must be an integer of at least {minimum}, got {value!r}")
        limits[key] = value
    description = data.get("description")
    if description is not None and not isinstance(description, str):
        raise fail("description", f"must be a string, got {_kind(description)}")
    return backend_type, options, limits, description


def resolve_path_options(
    options: Mapping[str, Any], backend_class: Callable[..., Any], base_dir: Path | None
) -> dict[str, Any]:
    """``options`` with each relative path made absolute against ``base_dir`` (the plan's folder).

    A path option is one whose constructor parameter is annotated with ``os.PathLike`` or
    ``Path`` (such as ``data_root``): a plan names it relative to itself, wherever ``altar``
    runs from. Absolute paths, uris and other options are kept as they are.
    """
    resolved = dict(options)
    if base_dir is None:
        return resolved
    try:
        parameters = inspect.signature(backend_class).parameters
    except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
        return resolved
    for name, value in options.items():
        parameter = parameters.get(name)
        if parameter is None or not isinstance(value, str) or not value:
            continue
        annotation = parameter.annotation
        text = annotation if isinstance(annotation, str) else repr(annotation)
        if re.search(r"\bPath\b|PathLike", text):
            resolved[name] = _resolve_uri(value, base_dir)
    return resolved


def _parse_outputs_dir(
    value: Any, base_dir: Path | None, fail: Fail
) -> tuple[str | None, str | Path | None]:
    """``outputs_dir`` as written, and the folder relative output uris resolve against.

    Without it they resolve against the plan's folder, as they always did (every run of the
    plan writes there); ``{altar:run}`` in it is the run directory's name, filled in by
    :func:`outputs_for_run`, so each run writes its own.
    """
    if value is None:
        return None, base_dir
    if not isinstance(value, str) or not value.strip():
        raise fail("outputs_dir", f"must be a folder or uri, got {value!r}")
    for match in PLACEHOLDER.finditer(value):
        if match.group() != RUN_PLACEHOLDER:
            raise fail(
                "outputs_dir",
                f"{match.group()}: the only placeholder here is {RUN_PLACEHOLDER} (the run's name)",
            )
    if _CONTROL.search(value) or "{altar:" in PLACEHOLDER.sub("", value):
        raise fail("outputs_dir", f"must be a folder or uri, got {value!r}")
    return value, _resolve_uri(value, base_dir)


def outputs_for_run(plan: Plan, run_dir: str | os.PathLike[str]) -> Plan:
    """``plan`` with :data:`RUN_PLACEHOLDER` in its output uris made ``run_dir``'s name.

    A plan has it through ``outputs_dir`` or in an output's own ``uri``; any other plan is
    returned as it is. The journal keeps the plan's own text (its spec digests are the same for
    every run of the plan).
    """
    if not any(RUN_PLACEHOLDER in t.uri for task in plan.tasks for t in task.spec.outputs):
        return plan
    name = Path(run_dir).resolve().name
    tasks = []
    for task in plan.tasks:
        outputs = [replace(t, uri=t.uri.replace(RUN_PLACEHOLDER, name)) for t in task.spec.outputs]
        tasks.append(replace(task, spec=replace(task.spec, outputs=outputs)))
    return replace(plan, tasks=tasks, dependencies=dict(plan.dependencies))


def with_outputs_under(plan: Plan, root: Path) -> Plan:
    """A copy of ``plan`` whose output uris point below ``root/<task id>/<logical path>``."""
    tasks = []
    for task in plan.tasks:
        outputs = [
            replace(t, uri=str(root / task.id / t.logical_path.lstrip("/")))
            for t in task.spec.outputs
        ]
        tasks.append(replace(task, spec=replace(task.spec, outputs=outputs)))
    return replace(plan, tasks=tasks, dependencies=dict(plan.dependencies))
