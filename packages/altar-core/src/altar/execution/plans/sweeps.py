"""Sweeps: one ``[[tasks]]`` entry with a ``matrix`` stands for one task per combination.

::

    [[tasks]]
    id = "score-f{fold}-b{batch:02d}"
    matrix = { fold = [0, 1, 2], batch = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] }
    after = ["prep-f{fold}"]

expands, in place and in the matrix's order (its first key varies slowest), to ``score-f0-b01``,
``score-f0-b02``, ... ``score-f2-b10``. In every string of the entry (id, command, env values,
inputs, outputs, labels, after, image...; not table keys) ``{NAME}`` becomes the value and
``{NAME:FORMAT}`` the value through a Python format spec (``{batch:02d}``: two digits, zero
padded). Other braces are left as they are, so shell and awk keep theirs: ``${HOME}``,
``{altar:mount_root}``, ``{print $1}``, ``{a,b}``. A ``{word}`` that names no matrix key is
refused (a typo must not reach the shell); ``{{word}}`` is a literal ``{word}``. A routed
plan's ``backend`` and ``fallback`` keys are strings like the others: ``backend = "{pool}"``
sends each task to the backend its combination names.

The id must name every key, so each task has its own. A matrix that is empty, has an empty or
repeated value list, or would expand beyond :data:`MAX_TASKS` is refused with one line naming
the field.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from altar.execution.errors import PlanError

__all__ = ["MAX_TASKS", "Sweep", "expand_sweep", "is_sweep"]

#: The most tasks a plan may expand to: more is a typo in a matrix (or a job for another tool).
#: Labs run plans of 100,000 tasks (issue 24); ten times that leaves them room.
MAX_TASKS = 1_000_000

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
# a doubled {{word}} (a literal), or {word} / {word:format} not preceded by "$" (shell's ${x})
_FIELD = re.compile(
    r"\{\{(" + _NAME + r"(?::[^{}]*)?)\}\}|(?<!\$)\{(" + _NAME + r")(?::([^{}]*))?\}"
)
_KEY = re.compile(_NAME)
#: Braces that are the runner's, never a matrix key's.
_RESERVED = "altar"

Fail = Callable[[str, str], PlanError]


@dataclass(frozen=True)
class Sweep:
    """One ``[[tasks]]`` entry with a matrix: where it is, its id template, what it expands to."""

    field: str
    id: str
    keys: tuple[tuple[str, int], ...]  # (matrix key, number of values), in order

    @property
    def count(self) -> int:
        return math.prod(n for _, n in self.keys)

    def describe(self) -> str:
        """``tasks[0] score-f{fold}-b{batch:02d}: 3 fold x 10 batch = 30 tasks``."""
        sizes = " x ".join(f"{n} {key}" for key, n in self.keys)
        return f"{self.field} {self.id}: {sizes} = {self.count} task(s)"

    def to_dict(self) -> dict[str, Any]:
        return {
            "field": self.field,
            "id": self.id,
            "matrix": dict(self.keys),
            "tasks": self.count,
        }


def is_sweep(raw: Any) -> bool:
    return isinstance(raw, Mapping) and "matrix" in raw


def _matrix(raw: Any, where: str, fail: Fail) -> dict[str, list[Any]]:
    where = f"{where}.matrix"
    if not isinstance(raw, Mapping):
        raise fail(where, "must be a table of value lists, e.g. { fold = [0, 1, 2] }")
    if not raw:
        raise fail(where, "is empty: it would expand to no task; give each key a list of values")
    matrix: dict[str, list[Any]] = {}
    for key, values in raw.items():
        field_name = f"{where}.{key}"
        if not isinstance(key, str) or not _KEY.fullmatch(key) or key == _RESERVED:
            raise fail(
                field_name,
                "a matrix key is a name of letters, digits and '_' (not 'altar'), "
                "starting with a letter or '_'",
            )
        if not isinstance(values, list) or not values:
            raise fail(field_name, f"must be a non-empty list of values, got {values!r}")
        seen: set[Any] = set()
        for value in values:
            if isinstance(value, bool) or not isinstance(value, str | int | float):
                raise fail(field_name, f"values are strings or numbers, got {value!r}")
            if (type(value), value) in seen:
                raise fail(field_name, f"{value!r} is listed twice")
            seen.add((type(value), value))
        matrix[key] = values
    count = math.prod(len(values) for values in matrix.values())
    if count > MAX_TASKS:
        sizes = " x ".join(f"{len(values)} {key}" for key, values in matrix.items())
        raise fail(
            where, f"expands to {count} tasks ({sizes}); a plan may have at most {MAX_TASKS}"
        )
    return matrix


def _fill_text(text: str, values: Mapping[str, Any], where: str, fail: Fail) -> str:
    def one(match: re.Match[str]) -> str:
        if match.group(1) is not None:  # {{word}}: a literal {word}
            return "{" + match.group(1) + "}"
        name, spec = match.group(2), match.group(3)
        if name == _RESERVED:
            return match.group(0)
        if name not in values:
            raise fail(
                where,
                f"unknown placeholder {match.group(0)}: the matrix has {', '.join(values)} "
                f"(write {{{match.group(0)}}} for literal braces)",
            )
        value = values[name]
        if spec is None:
            return str(value)
        try:
            return format(value, spec)
        except (ValueError, TypeError) as error:
            raise fail(where, f"{match.group(0)} cannot format {value!r}: {error}") from None

    return _FIELD.sub(one, text) if "{" in text else text


def _fill(value: Any, values: Mapping[str, Any], where: str, fail: Fail) -> Any:
    """``value`` with every string in it filled in (recursively; table keys are kept)."""
    if isinstance(value, str):
        return _fill_text(value, values, where, fail)
    if isinstance(value, list):
        return [_fill(item, values, f"{where}[{i}]", fail) for i, item in enumerate(value)]
    if isinstance(value, Mapping):
        return {key: _fill(item, values, f"{where}.{key}", fail) for key, item in value.items()}
    return value


def expand_sweep(
    raw: Mapping[str, Any], where: str, fail: Fail
) -> tuple[Sweep, list[tuple[str, dict[str, Any]]]]:
    """The sweep ``raw`` declares, and each of its tasks as (where, task table without matrix)."""
    matrix = _matrix(raw["matrix"], where, fail)
    template = raw.get("id")
    if not isinstance(template, str):
        raise fail(
            f"{where}.id",
            "a task with a matrix needs an id template naming each key, e.g. "
            f"{'-'.join(['task', *(f'{{{key}}}' for key in matrix)])!r}",
        )
    named = {m.group(2) for m in _FIELD.finditer(template) if m.group(2)}
    missing = [key for key in matrix if key not in named]
    if missing:
        raise fail(
            f"{where}.id",
            f"{template!r} does not name matrix key(s) {', '.join(missing)}: every task of a "
            "sweep needs its own id",
        )
    body = {key: value for key, value in raw.items() if key != "matrix"}
    expanded: list[tuple[str, dict[str, Any]]] = []
    first: dict[str, str] = {}
    for combination in itertools.product(*matrix.values()):
        values = dict(zip(matrix, combination, strict=True))
        label = f"{where}[{', '.join(f'{k}={v!r}' for k, v in values.items())}]"
        task = {key: _fill(value, values, f"{where}.{key}", fail) for key, value in body.items()}
        task_id = task["id"]
        if task_id in first:
            raise fail(
                f"{where}.id",
                f"{template!r} gives {task_id!r} for both {first[task_id]} and {label}; "
                "make the id tell every combination apart",
            )
        first[task_id] = label
        expanded.append((label, task))
    keys = tuple((key, len(values)) for key, values in matrix.items())
    return Sweep(where, template, keys), expanded
