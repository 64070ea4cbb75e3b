"""A plan's task graph: unique ids, and each task's dependencies (``after`` and data)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from altar.execution.errors import PlanError
from altar.execution.plans.tasks import PlanTask
from altar.execution.types import Transfer


def _field(task: PlanTask, index: int) -> str:
    """The plan field ``task`` came from: ``tasks[3]``, or a sweep's ``tasks[0][fold=1]``."""
    return task.origin or f"tasks[{index}]"


def _check_unique(tasks: Sequence[PlanTask], source: str) -> None:
    first: dict[str, int] = {}
    for index, task in enumerate(tasks):
        if task.id in first:
            raise PlanError(
                f"{source}: {_field(task, index)}.id: {task.id!r} is already the id of "
                f"{_field(tasks[first[task.id]], first[task.id])}; task ids must be unique"
            )
        first[task.id] = index
    writers: dict[str, tuple[int, str]] = {}
    for index, task in enumerate(tasks):
        for i, transfer in enumerate(task.spec.outputs):
            other = writers.get(transfer.logical_path)
            if other is not None and other[0] != index:
                raise PlanError(
                    f"{source}: {_field(task, index)}.outputs[{i}].logical_path: "
                    f"{transfer.logical_path!r} is also written by {other[1]!r}; "
                    "two tasks cannot write one path"
                )
            writers[transfer.logical_path] = (index, task.id)
    sources: dict[str, Transfer] = {}
    for index, task in enumerate(tasks):
        for i, transfer in enumerate(task.spec.inputs):
            if writers.get(transfer.logical_path, (index, ""))[0] != index:
                continue  # another task produces it
            known = sources.setdefault(transfer.logical_path, transfer)
            if (known.uri, known.digest) != (transfer.uri, transfer.digest):
                raise PlanError(
                    f"{source}: {_field(task, index)}.inputs[{i}]: logical path "
                    f"{transfer.logical_path!r} is staged from two sources "
                    f"({known.uri!r}, {transfer.uri!r}) or with two digests"
                )


def _dependencies(tasks: Sequence[PlanTask], source: str) -> dict[str, tuple[str, ...]]:
    """Task id -> ids it must run after: its ``after`` list plus producers of its inputs."""
    ids = {task.id: index for index, task in enumerate(tasks)}
    writer = {t.logical_path: task.id for task in tasks for t in task.spec.outputs}
    deps: dict[str, tuple[str, ...]] = {}
    for index, task in enumerate(tasks):
        needed: list[str] = []
        for j, name in enumerate(task.after):
            if "*" in name:  # a pattern: every other task it matches
                pattern = re.compile(".*".join(map(re.escape, name.split("*"))))
                matched = [t for t in ids if t != task.id and pattern.fullmatch(t)]
                if not matched:
                    raise PlanError(
                        f"{source}: {_field(task, index)}.after[{j}]: {name!r} matches no "
                        "other task's id"
                    )
                needed += matched
                continue
            if name not in ids:
                raise PlanError(
                    f"{source}: {_field(task, index)}.after[{j}]: no task has id {name!r}"
                )
            needed.append(name)
        for transfer in task.spec.inputs:
            producer = writer.get(transfer.logical_path)
            if producer is not None and producer != task.id:
                needed.append(producer)
        if task.id in needed:
            raise PlanError(
                f"{source}: {_field(task, index)}.after: a task cannot run after itself"
            )
        deps[task.id] = tuple(dict.fromkeys(needed))
    # reject cycles: repeatedly peel tasks whose dependencies are all peeled
    done: set[str] = set()
    remaining = dict(deps)
    while remaining:
        ready = [tid for tid, needs in remaining.items() if set(needs) <= done]
        if not ready:
            cycle = ", ".join(sorted(remaining))
            raise PlanError(f"{source}: tasks: dependency cycle among {cycle}")
        for tid in ready:
            done.add(tid)
            del remaining[tid]
    return deps
