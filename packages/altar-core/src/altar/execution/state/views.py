"""Grouped views of a large run: counts per kind and label group, the failed ones first.

``altar status`` and ``altar report`` list every task while a run has at most
:data:`GROUP_THRESHOLD` tasks (``ALTAR_GROUP_THRESHOLD`` changes it); above, they show one line
per group instead. A group is the tasks of one kind sharing the values of the grouping labels:
the plan labels that split the run into a few parts (at most :data:`MAX_LABEL_VALUES` values,
at least two). A task's labels are those its last submitted attempt carried (the journal keeps
them with the handle); a task never submitted has none and shows ``-`` for each.

Everything here is a pure function of (task id, kind, labels, status) tuples.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from altar.execution.labels import RESERVED_LABEL_PREFIX
from altar.execution.run.progress import format_counts, terminal_safe
from altar.execution.run.results import TaskResult
from altar.execution.state.journal import TaskRecord

__all__ = [
    "ATTENTION_ORDER",
    "GROUP_THRESHOLD",
    "MAX_LABEL_VALUES",
    "NO_VALUE",
    "THRESHOLD_ENV",
    "Group",
    "format_failed",
    "format_groups",
    "group_tasks",
    "group_threshold",
    "grouping_labels",
    "matches",
    "rank",
    "user_labels",
]

#: Above this many tasks, views are grouped (the progress display's threshold too).
GROUP_THRESHOLD = 200
THRESHOLD_ENV = "ALTAR_GROUP_THRESHOLD"
#: A label with more values than this (a variant id, a seed) would make a group per task.
MAX_LABEL_VALUES = 12
#: What needs a look first: groups, and the counts in each, are shown in this order.
ATTENTION_ORDER = (
    "failed",
    "cancelled",
    "skipped",
    "running",
    "pending",
    "submitting",
    "queued",
    "collecting",
    "succeeded",
    "cached",
)
_RANK = {state: rank for rank, state in enumerate(ATTENTION_ORDER)}
NO_VALUE = "-"


def group_threshold(default: int = GROUP_THRESHOLD, environ: Mapping[str, str] = os.environ) -> int:
    """The task count above which a view is grouped: ``ALTAR_GROUP_THRESHOLD``, else
    ``default`` (200 for ``altar status``, 2,000 for the report)."""
    try:
        return max(0, int(environ.get(THRESHOLD_ENV, default)))
    except ValueError:
        return default


def user_labels(record: TaskRecord) -> Mapping[str, str]:
    """The labels ``record``'s last submitted attempt carried (the plan's, and altar's own
    ``altar.*``, which grouping leaves out), else none. Not a copy: do not change it."""
    for attempt in reversed(record.attempts):  # the last, most often
        handle = attempt.handle  # (built from the journal's compact form: once)
        if handle is not None:
            return handle.labels
    return {}


def grouping_labels(
    labels: Sequence[Mapping[str, str]], most: int = MAX_LABEL_VALUES
) -> tuple[str, ...]:
    """The plan's label keys that split the tasks into 2 to ``most`` parts, sorted."""
    keys = {key for names in {tuple(mapping) for mapping in labels} for key in names}
    found = []
    for key in sorted(keys):
        if key.startswith(RESERVED_LABEL_PREFIX):
            continue
        values = {mapping.get(key, NO_VALUE) for mapping in labels}
        if 2 <= len(values) <= most:
            found.append(key)
    return tuple(found)


def rank(state: str) -> int:
    """Where ``state`` comes in :data:`ATTENTION_ORDER` (an unknown state after them all)."""
    return _RANK.get(state, len(ATTENTION_ORDER))


@dataclass(frozen=True)
class Group:
    """The tasks of one kind with the same values of the grouping labels."""

    kind: str
    labels: tuple[tuple[str, str], ...]
    counts: Mapping[str, int]  # in ATTENTION_ORDER

    @property
    def name(self) -> str:
        """``kind0 fold=3``: what ``altar status --group`` takes back."""
        return " ".join([self.kind, *(f"{key}={value}" for key, value in self.labels)])

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def worst(self) -> str:
        return next(iter(self.counts), "")

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "kind": self.kind,
            "labels": dict(self.labels),
            "total": self.total,
            "counts": dict(self.counts),
        }


def _ordered(counts: Mapping[str, int]) -> dict[str, int]:
    return {state: counts[state] for state in sorted(counts, key=lambda s: (rank(s), s))}


def group_tasks(
    tasks: Iterable[tuple[str, Mapping[str, str], str]], keys: Sequence[str]
) -> list[Group]:
    """Groups of ``(kind, labels, status)`` by kind and the ``keys`` labels, failed first.

    Groups are ordered by the first state of :data:`ATTENTION_ORDER` they hold, then by name.
    """
    tally: Counter[tuple[str, tuple[str, ...], str]]
    if len(keys) == 1:  # the common case, a tuple per task without a generator
        (only,) = keys
        tally = Counter((kind, (labels.get(only, NO_VALUE),), s) for kind, labels, s in tasks)
    else:
        tally = Counter(
            (kind, tuple(labels.get(k, NO_VALUE) for k in keys), s) for kind, labels, s in tasks
        )
    found: dict[tuple[str, tuple[tuple[str, str], ...]], dict[str, int]] = {}
    for (kind, values, status), n in tally.items():
        found.setdefault((kind, tuple(zip(keys, values, strict=True))), {})[status] = n
    groups = [Group(kind, labels, _ordered(counts)) for (kind, labels), counts in found.items()]
    return sorted(groups, key=lambda g: (rank(g.worst), g.name))


def matches(selector: str, kind: str, labels: Mapping[str, str]) -> bool:
    """Whether a task is in ``selector``: each word is its kind or one of its ``key=value``."""
    for word in selector.split():
        if "=" in word:
            key, _, value = word.partition("=")
            if labels.get(key, NO_VALUE) != value:
                return False
        elif word != kind:
            return False
    return True


# -- text, for `altar status` ----------------------------------------------------------------

#: Group lines ``altar status`` prints; failed tasks it lists, and lines of each one's log tail.
GROUPS_SHOWN = 40
FAILED_SHOWN = 20
TAIL_SHOWN = 5


def format_groups(groups: Sequence[Group], *, shown: int = GROUPS_SHOWN) -> str:
    """A table of ``groups``: name, tasks, then a column per state present (failed first)."""
    states = sorted({s for g in groups for s in g.counts}, key=lambda s: (rank(s), s))
    header = ["GROUP", "TASKS", *(state.upper() for state in states)]
    rows = [
        [terminal_safe(g.name), str(g.total), *(str(g.counts.get(s, "")) for s in states)]
        for g in groups[:shown]
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
    if len(groups) > shown:
        rest = groups[shown:]
        lines.append(
            f"... {len(rest)} more groups ({sum(g.total for g in rest)} tasks, "
            f"{format_counts(_ordered(_sum(rest)))})"
        )
    return "\n".join(lines)


def _sum(groups: Sequence[Group]) -> dict[str, int]:
    total: dict[str, int] = {}
    for group in groups:
        for state, n in group.counts.items():
            total[state] = total.get(state, 0) + n
    return total


def format_failed(tasks: Sequence[TaskResult], total: int, *, tail: int = TAIL_SHOWN) -> str:
    """The failed ``tasks`` (the first of ``total``), each with the tail of its failure."""
    head = (
        f"failed: {total}" if len(tasks) == total else f"failed: the first {len(tasks)} of {total}"
    )
    blocks = [head + (f" (the last {tail} lines of each failure)" if tail else "")]
    for task in tasks:
        why = task.reason or "failed"
        code = f", exit code {task.exit_code}" if task.exit_code is not None else ""
        blocks.append(
            f"{terminal_safe(task.id)}  {terminal_safe(task.kind)}  {terminal_safe(why)}{code}"
            f"  (attempts: {task.attempts_text})"
        )
        lines = [line for line in (task.detail or "").rstrip().splitlines() if line.strip()]
        blocks += [f"    {terminal_safe(line)}" for line in lines[-tail:]] if tail else []
    return "\n".join(blocks)
