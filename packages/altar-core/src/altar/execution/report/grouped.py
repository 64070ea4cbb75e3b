"""The report of a large run: groups with counts and drill-down instead of a row per task.

Above the report's threshold (:data:`REPORT_GROUP_THRESHOLD`, or ``ALTAR_GROUP_THRESHOLD``) a
row per task would make a page of 70 MB at 100,000 tasks, which a browser takes a minute to
open. The page then shows, per group of :mod:`altar.execution.state.views` (kind and labels, the
groups with failures first), its counts and a ``<details>`` element with its first
:data:`ROWS_PER_GROUP` rows (failed ones first) and the rest counted; every failed task is
listed, the first :data:`FAILURES_WITH_TAIL` with their log tails; the timeline draws the
failed tasks and the first rows of each group. Pure functions from the model to HTML text.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

from altar.execution.report.model import Report, TaskRow
from altar.execution.run.progress import format_counts
from altar.execution.state.views import NO_VALUE, Group, group_tasks, grouping_labels, rank

__all__ = [
    "FAILURES_LISTED",
    "FAILURES_WITH_TAIL",
    "REPORT_GROUP_THRESHOLD",
    "ROWS_PER_GROUP",
    "TaskGroup",
    "failures_section",
    "groups_section",
    "report_groups",
    "timeline_sample",
]

#: Above this many tasks the report is grouped (2,000 rows make a page of about 1.5 MB).
REPORT_GROUP_THRESHOLD = 2000
#: Rows shown in each group's drill-down; failed tasks listed with their tail, and at all.
ROWS_PER_GROUP = 20
FAILURES_WITH_TAIL = 200
FAILURES_LISTED = 5000
#: Rows per group the timeline draws, besides the failed tasks (at most TIMELINE_FAILED).
TIMELINE_PER_GROUP = 3
TIMELINE_FAILED = 100


@dataclass(frozen=True)
class TaskGroup:
    """A group of the report: its counts and its rows, failed first."""

    group: Group
    rows: tuple[TaskRow, ...]


def report_groups(tasks: Sequence[TaskRow]) -> list[TaskGroup]:
    """``tasks`` in groups by kind and the labels that split them, the groups failed first."""
    keys = grouping_labels([task.labels for task in tasks])
    groups = group_tasks(((t.kind, t.labels, t.status) for t in tasks), keys)
    members: dict[tuple[str, tuple[str, ...]], list[TaskRow]] = {}
    for task in tasks:
        key = (task.kind, tuple(task.labels.get(k, NO_VALUE) for k in keys))
        members.setdefault(key, []).append(task)
    found = []
    for group in groups:
        rows = members[(group.kind, tuple(value for _, value in group.labels))]
        found.append(TaskGroup(group, tuple(sorted(rows, key=lambda t: rank(t.status)))))
    return found


def timeline_sample(groups: Sequence[TaskGroup], tasks: Sequence[TaskRow]) -> tuple[TaskRow, ...]:
    """The rows the timeline of a grouped report draws, in plan order."""
    failed = [t.id for t in tasks if t.status == "failed"][:TIMELINE_FAILED]
    wanted = set(failed)
    for group in groups:
        wanted.update(t.id for t in group.rows[:TIMELINE_PER_GROUP])
    return tuple(t for t in tasks if t.id in wanted)


def _counts(group: Group) -> str:
    return "".join(
        f'<span class="st st-{escape(state)}">{n} {escape(state)}</span> '
        for state, n in group.counts.items()
    )


def groups_section(
    report: Report, groups: Sequence[TaskGroup], row: Callable[[TaskRow], str]
) -> str:
    """One ``<details>`` per group: its counts, its first rows, the rest counted."""
    head = (
        '<div class="wide"><table class="tasks"><thead><tr><th>task</th><th>kind</th>'
        "<th>status</th><th>attempts</th><th>time</th><th>reason and log tail</th></tr>"
        "</thead><tbody>"
    )
    blocks = []
    for number, task_group in enumerate(groups):
        group, rows = task_group.group, task_group.rows
        shown = rows[:ROWS_PER_GROUP]
        rest = rows[ROWS_PER_GROUP:]
        more = ""
        if rest:
            left: dict[str, int] = {}
            for task in rest:
                left[task.status] = left.get(task.status, 0) + 1
            command = (
                f"altar status {shlex.quote(report.run_dir)} --group {shlex.quote(group.name)}"
            )
            more = (
                f'<p class="muted">and {len(rest)} more: {escape(format_counts(left))}; '
                f"every row: <code>{escape(command)}</code></p>"
            )
        opened = " open" if group.worst == "failed" and number < 5 else ""
        blocks.append(
            f'<details class="group" id="group-{number}"{opened}><summary><b>'
            f"{escape(group.name)}</b> · {group.total} tasks: {_counts(group)}</summary>"
            f"{head}{''.join(row(task) for task in shown)}</tbody></table></div>{more}"
            "</details>"
        )
    return "".join(blocks)


def failures_section(tasks: Sequence[TaskRow], row: Callable[[TaskRow], str]) -> str:
    """Every failed task: the first with their log tails, then one line each, then a count."""
    failed = [task for task in tasks if task.status == "failed"]
    if not failed:
        return '<p class="muted">No task failed.</p>'
    tailed = failed[:FAILURES_WITH_TAIL]
    listed = failed[FAILURES_WITH_TAIL:FAILURES_LISTED]
    parts = [
        f"<p>{len(failed)} failed task(s)"
        + (f"; the first {len(tailed)} with their log tails" if listed else "")
        + ".</p>",
        '<div class="wide"><table class="tasks"><thead><tr><th>task</th><th>kind</th>'
        "<th>status</th><th>attempts</th><th>time</th><th>reason and log tail</th></tr>"
        f"</thead><tbody>{''.join(row(task) for task in tailed)}</tbody></table></div>",
    ]
    if listed:
        items = "".join(
            f"<li><code>{escape(t.id)}</code> {escape(t.kind)}: {escape(t.reason or 'failed')}"
            + (f" — {escape(t.detail)}" if t.detail else "")
            + "</li>"
            for t in listed
        )
        parts.append(f'<ul id="more-failures">{items}</ul>')
    if len(failed) > FAILURES_LISTED:
        parts.append(
            f'<p class="muted">and {len(failed) - FAILURES_LISTED} more failed tasks: '
            "<code>altar status RUN_DIR --state failed</code> lists them all.</p>"
        )
    return "".join(parts)
