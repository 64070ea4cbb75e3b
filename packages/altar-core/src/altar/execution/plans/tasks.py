"""One ``[[tasks]]`` entry of a plan: its fields checked and built into a :class:`PlanTask`."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from altar.execution.labels import RESERVED_LABEL_PREFIX, reserved_labels
from altar.execution.plans.fields import (
    _CONTROL,
    _TASK_ID,
    RUN_PLACEHOLDER,
    Fail,
    _check_keys,
    _construct,
    _kind,
    _message,
    _resolve_uri,
)
from altar.execution.plans.placeholders import PLACEHOLDER, placeholder_error
from altar.execution.plans.sweeps import Sweep, expand_sweep
from altar.execution.types import ContainerTaskSpec, ResourceRequest, Transfer

_TASK_KEYS = (
    "after",
    "backend",
    "avoid_hosts",
    "cache",
    "command",
    "env",
    "fallback",
    "id",
    "image",
    "inputs",
    "kind",
    "labels",
    "matrix",
    "outputs",
    "plugin_identity",
    "resources",
    "timeout_s",
)
_TRANSFER_KEYS = ("digest", "locality_key", "logical_path", "uri")
_RESOURCE_KEYS = ("count", "cpu", "gpu", "memory_gb")


def default_task_id(kind: str, index: int) -> str:
    """``<kind>-<index>`` with the kind reduced to letters, digits, ``.``, ``_`` and ``-``."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", kind).strip("-._") or "task"
    return f"{slug}-{index}"


@dataclass(frozen=True, slots=True)
class PlanTask:
    """One task of a plan: a unique ``id``, its spec, and ids it must run after.

    ``after`` entries may hold ``*`` (any run of characters): ``score-*`` is every task whose
    id starts with ``score-``. ``origin`` is the plan field it came from when that is not
    ``tasks[<its index>]`` (a sweep's task: ``tasks[0][fold=2, batch=7]``).
    """

    id: str
    spec: ContainerTaskSpec
    after: tuple[str, ...] = ()
    origin: str | None = field(default=None, compare=False, repr=False)
    cache: bool = True  # ``cache = false``: never looked up or stored
    backend: str | None = None  # ``backend = "NAME"``: one of the plan's [backends.NAME]
    fallback: str | None = None  # ``fallback = "NAME"``: where it goes after provider endings


#: The spec's resources when a task names none: one frozen object for every such task.
NO_RESOURCES = ResourceRequest()


class Shared:
    """Equal values of one plan's tasks, held once (issue 24: a 100,000-task plan of a few
    images, kinds and label sets held each of them 100,000 times).

    Texts are interned, label and env tables with equal items are one dict, and tasks without
    inputs, outputs or env share one empty list or dict (nothing changes a plan's spec in
    place: a submit gets a copy with the run's labels, a new output uri a new list). A value
    of the wrong type is returned as it is, for the spec's checks to refuse with their message.
    """

    def __init__(self) -> None:
        self._texts: dict[str, str] = {}
        self._tables: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
        self._held: set[int] = set()  # ids of the tables above (alive while this is)
        self.no_transfers: list[Transfer] = []
        self.no_env: dict[str, str] = {}

    def text(self, value: Any) -> Any:
        return self._texts.setdefault(value, value) if isinstance(value, str) else value

    def texts(self, value: Any) -> Any:
        if not isinstance(value, list):
            return value
        held = self._texts.setdefault
        return [held(item, item) if type(item) is str else self.text(item) for item in value]

    def hook(self, table: dict[str, Any]) -> dict[str, Any]:
        """A JSON decoder's ``object_hook``: each table's texts held once as it is read, so the
        plan's duplicates are dropped before the next task is read."""
        held = self._texts.setdefault  # called 10 times a task: no method call per text
        for key, value in table.items():
            kind = type(value)  # a JSON decoder makes exactly str, list and dict
            if kind is str:
                table[key] = held(value, value)
            elif kind is list:
                for i, item in enumerate(value):
                    if type(item) is str:
                        value[i] = held(item, item)
            elif key in ("labels", "env"):
                table[key] = self.table(value)
        return table

    def table(self, value: Any) -> Any:
        if id(value) in self._held:
            return value  # already the plan's one table with these items (the JSON hook's)
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            return value
        items = tuple(value.items())
        found = self._tables.get(items)
        if found is None:
            text = self.text
            found = self._tables[items] = {text(k): text(v) for k, v in items}
            self._held.add(id(found))
        return found


def _parse_transfer(raw: Any, where: str, base_dir: str | Path | None, fail: Fail) -> Transfer:
    if not isinstance(raw, Mapping):
        raise fail(where, f"must be a table with uri and logical_path, got {_kind(raw)}")
    _check_keys(raw, _TRANSFER_KEYS, where, fail)
    for key in ("uri", "logical_path"):
        if key not in raw:
            raise fail(f"{where}.{key}", "required")
    uri, logical = raw["uri"], raw["logical_path"]
    locality_key, digest = raw.get("locality_key"), raw.get("digest")
    # resolved first: a non-empty text resolves to one, so the checks judge the plan's uri
    resolved = _resolve_uri(uri, base_dir) if isinstance(uri, str) and uri else uri
    try:
        transfer = Transfer(resolved, logical, locality_key, digest)
    except (TypeError, ValueError):
        # each field's check is independent: probe them one by one (only now) to name it
        for key in _TRANSFER_KEYS:
            if key in raw:
                probe: dict[str, Any] = {"uri": "u", "logical_path": "p", key: raw[key]}
                _construct(f"{where}.{key}", fail, Transfer, **probe)
        _construct(where, fail, Transfer, **{k: raw[k] for k in _TRANSFER_KEYS if k in raw})
        transfer = Transfer(resolved, logical, locality_key, digest)  # the checks' own order
    # PurePosixPath(logical).parts holds ".." exactly when a "/"-separated part is ".."
    if ".." in logical.split("/") or _CONTROL.search(logical):
        raise fail(f"{where}.logical_path", f"must stay below the mount root, got {logical!r}")
    return transfer


def _parse_resources(raw: Any, where: str, fail: Fail) -> ResourceRequest:
    if not isinstance(raw, Mapping):
        raise fail(where, f"must be a table, got {_kind(raw)}")
    _check_keys(raw, _RESOURCE_KEYS, where, fail)
    for key, value in raw.items():
        _construct(
            f"{where}.{key}", fail, lambda key=key, value=value: ResourceRequest(**{key: value})
        )
    return ResourceRequest(**raw)


def _parse_sweep(
    raw: Mapping[str, Any],
    index: int,
    base_dir: Path | None,
    fail: Fail,
    tasks: list[PlanTask],
    outputs_base: str | Path | None,
    shared: Shared | None = None,
) -> Sweep:
    """Append the tasks of the sweep ``raw`` (``tasks[index]``) to ``tasks``; return the sweep."""
    where = f"tasks[{index}]"
    _check_task_keys(raw, where, fail)  # once, naming the template's field
    sweep, expanded = expand_sweep(raw, where, fail)
    for label, item in expanded:
        tasks.append(
            _parse_task(
                item, index, base_dir, fail, where=label, outputs_base=outputs_base, shared=shared
            )
        )
    return sweep


def _check_task_keys(raw: Mapping[str, Any], where: str, fail: Fail) -> None:
    _check_keys(raw, _TASK_KEYS, where, fail)
    for key in ("kind", "image", "command"):
        if key not in raw:
            raise fail(f"{where}.{key}", "required")


def _parse_task(
    raw: Any,
    index: int,
    base_dir: Path | None,
    fail: Fail,
    *,
    where: str | None = None,
    outputs_base: str | Path | None = None,
    shared: Shared | None = None,
) -> PlanTask:
    origin = where
    where = where or f"tasks[{index}]"
    if not isinstance(raw, Mapping):
        raise fail(where, f"must be a table, got {_kind(raw)}")
    _check_task_keys(raw, where, fail)
    values = _checked_fields(raw, where, fail, shared)
    for key in ("inputs", "outputs"):
        items = raw.get(key, [])
        if not isinstance(items, list):
            raise fail(f"{where}.{key}", f"must be a list of tables, got {_kind(items)}")
        if not items and shared is not None:
            values[key] = shared.no_transfers  # most tasks of a large plan have none
            continue
        values[key] = [
            _parse_transfer(
                item,
                f"{where}.{key}[{i}]",
                outputs_base if key == "outputs" and outputs_base is not None else base_dir,
                fail,
            )
            for i, item in enumerate(items)
        ]
    for i, transfer in enumerate(values["outputs"]):
        for match in PLACEHOLDER.finditer(transfer.uri):
            if match.group() != RUN_PLACEHOLDER:
                raise fail(
                    f"{where}.outputs[{i}].uri",
                    f"{match.group()}: the only placeholder in an output uri is "
                    f"{RUN_PLACEHOLDER} (the run's name)",
                )
    if "resources" in raw:
        values["resources"] = _parse_resources(raw["resources"], f"{where}.resources", fail)
    elif shared is not None:
        values["resources"] = NO_RESOURCES
    if "plugin_identity" in raw:
        try:  # it is journaled and hashed as JSON; a TOML date, for one, is not JSON
            json.dumps(raw["plugin_identity"], allow_nan=False)
        except (TypeError, ValueError) as error:
            raise fail(
                f"{where}.plugin_identity",
                f"must be JSON data (tables, lists, strings, numbers, booleans): {_message(error)}",
            ) from None
        values["plugin_identity"] = raw["plugin_identity"]
    spec = _build_spec(values, where, fail)
    _check_placeholders(spec, where, fail)
    reserved = reserved_labels(spec.labels)
    if reserved:
        raise fail(
            f"{where}.labels",
            f"{', '.join(map(repr, reserved))}: labels starting with {RESERVED_LABEL_PREFIX!r} "
            "are reserved for the runner (run, task, attempt and submission key); rename them",
        )
    task_id = raw["id"] if "id" in raw else default_task_id(spec.kind, index)
    if not isinstance(task_id, str) or not _TASK_ID.fullmatch(task_id):
        raise fail(
            f"{where}.id",
            f"must start with a letter or digit and use only letters, digits, '.', '_' and '-'; "
            f"got {task_id!r}",
        )
    after = raw.get("after", [])
    if not isinstance(after, list) or not all(isinstance(a, str) for a in after):
        raise fail(f"{where}.after", f"must be a list of task ids, got {after!r}")
    cache = raw.get("cache", True)
    if not isinstance(cache, bool):
        raise fail(f"{where}.cache", f"must be true or false, got {cache!r}")
    names = {}
    for key in ("backend", "fallback"):
        name = raw.get(key)
        if name is not None and (not isinstance(name, str) or not name):
            raise fail(f"{where}.{key}", f"must be a backend name, got {name!r}")
        names[key] = name
    return PlanTask(task_id, spec, tuple(after), origin, cache, **names)


_SPEC_FIELDS = ("kind", "image", "command", "labels", "env", "timeout_s", "avoid_hosts")


def _checked_fields(
    raw: Mapping[str, Any], where: str, fail: Fail, shared: Shared | None = None
) -> dict[str, Any]:
    """The task's spec fields as given (``avoid_hosts`` as a tuple), not yet checked;
    with ``shared``, their texts and tables held once for the whole plan."""
    values: dict[str, Any] = {}
    for key in _SPEC_FIELDS:
        if key in raw:
            value = raw[key]
            listed = key == "avoid_hosts" and isinstance(value, list)
            values[key] = tuple(value) if listed else value
    if shared is not None:
        for key in ("kind", "image"):
            if key in values:
                values[key] = shared.text(values[key])
        if "command" in values:
            values["command"] = shared.texts(values["command"])
        for key in ("labels", "env"):
            if key in values:
                values[key] = shared.table(values[key])
        values.setdefault("env", shared.no_env)
    return values


def _build_spec(values: Mapping[str, Any], where: str, fail: Fail) -> ContainerTaskSpec:
    """The task's spec; when the spec refuses it, each field is probed alone to name the bad one.

    Each field's check is independent of the others, so a probe runs only after a refusal
    (issue 24: at 100,000 tasks a probe per field was most of a plan's parse).
    """
    try:
        return ContainerTaskSpec(**values)
    except (TypeError, ValueError):
        for key in _SPEC_FIELDS:
            if key in values:
                probe = {"kind": "k", "image": "i", "command": [], key: values[key]}
                _construct(f"{where}.{key}", fail, ContainerTaskSpec, **probe)
    spec: ContainerTaskSpec = _construct(where, fail, ContainerTaskSpec, **values)
    return spec


def _check_placeholders(spec: ContainerTaskSpec, where: str, fail: Fail) -> None:
    """Refuse a ``{altar:...}`` placeholder the runner could not expand (see placeholders)."""
    # only a text naming "{altar:" can hold one: the others cost a substring test
    for i, arg in enumerate(spec.command):
        if "{altar:" in arg and (problem := placeholder_error(arg)):
            raise fail(f"{where}.command[{i}]", problem)
    for key, value in spec.env.items():
        if "{altar:" in value and (problem := placeholder_error(value)):
            raise fail(f"{where}.env.{key}", problem)
