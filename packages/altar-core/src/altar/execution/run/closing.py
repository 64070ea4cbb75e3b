"""What ``altar run`` prints when it ends: a row per task, or groups once a plan is large.

Up to :func:`~altar.execution.state.views.group_threshold` tasks (200) it is the table of
every task and the failures' details, as before. Above, like ``altar status``: the groups by
kind and label with their counts, the first failed tasks with the tail of each failure, and
how to drill down (issue 24: the table of a 100,000-task run was 4 MB of stdout and its rows
set the run's peak memory). ``--json`` writes every task, a batch at a time
(:func:`write_result_json`).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator, Mapping
from typing import Any, TextIO

from altar.execution.run.progress import REEXECUTED_NOTE, format_failures, format_table
from altar.execution.run.results import RunResult
from altar.execution.state.views import (
    FAILED_SHOWN,
    format_failed,
    format_groups,
    group_tasks,
    group_threshold,
    grouping_labels,
)

__all__ = ["format_outcome", "write_result_json"]

#: Tasks encoded at a time by :func:`write_result_json`.
JSON_BATCH = 2000


def format_outcome(
    result: RunResult, labels: Mapping[str, Mapping[str, str]], *, colour: bool = False
) -> str:
    """The run's tasks: a table of each up to the threshold, else groups and failures.

    ``labels``: each task's plan labels, by id (what the groups split by).
    """
    tasks = result.tasks
    if len(tasks) <= group_threshold():
        text = format_table(tasks, colour=colour)
        failures = format_failures(tasks)
        return text + ("\n\n" + failures if failures else "")
    empty: Mapping[str, str] = {}
    mappings = [labels.get(task.id, empty) for task in tasks]
    keys = grouping_labels(mappings)
    groups = group_tasks(
        zip((t.kind for t in tasks), mappings, (t.status for t in tasks), strict=True), keys
    )
    by = "kind" + (f" and {', '.join(keys)}" if keys else "")
    parts = [f"{len(tasks)} tasks in {len(groups)} groups by {by}", format_groups(groups)]
    failed = [task for task in tasks if task.status == "failed"]
    if failed:
        parts.append(format_failed(failed[:FAILED_SHOWN], len(failed)))
    reexecuted = sum(1 for task in tasks if task.reexecuted)
    if reexecuted:
        parts.append(f"{reexecuted} task(s) {REEXECUTED_NOTE.removeprefix('* ')}")
    run = shlex.quote(str(result.run_dir))
    example = shlex.quote(groups[0].name) if groups else "KIND"
    parts.append(
        f"every task: altar status {run} --all; one group: --group {example}; "
        "one state: --state failed"
    )
    return "\n\n".join(parts)


def write_result_json(result: RunResult, out: TextIO, extra: Mapping[str, Any]) -> None:
    """``result.to_dict()`` and ``extra`` as indented JSON, the tasks a batch at a time.

    The same document as ``json.dumps({**result.to_dict(), **extra}, indent=2)``, never whole
    in memory.
    """
    out.write(json.dumps(result.head_dict(), indent=2)[:-2] + ',\n  "tasks": [')
    comma = ""
    for chunk in _task_chunks(result):
        out.write(comma + chunk)
        comma = ","
    out.write("\n  ]" if result.tasks else "]")
    for key, value in extra.items():  # after the tasks, as in the whole document
        out.write(f",\n  {json.dumps(key)}: " + json.dumps(value, indent=2).replace("\n", "\n  "))
    out.write("\n}\n")


def _task_chunks(result: RunResult) -> Iterator[str]:
    tasks = result.tasks
    for start in range(0, len(tasks), JSON_BATCH):
        rows = [task.to_dict() for task in tasks[start : start + JSON_BATCH]]
        # each row as json.dumps(..., indent=2) puts it inside the document's "tasks" list
        text = json.dumps(rows, indent=2)[1:-2]  # without "[" and "\n]"
        yield text.replace("\n", "\n  ")
