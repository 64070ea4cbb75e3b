"""Counting executions from the ledger the tasks themselves write on the data root.

Each execution appends ``start <task> <nonce> <pid> <marker>`` when it begins and
``end <task> <nonce>`` when its output is written (see :mod:`crashkit.plan`). The ledger is the
ground truth: it counts what ran, whatever the journal believes.

A *double execution* is an execution of a task beyond the first that no failed attempt
explains: ``max(0, starts - 1 - retried)`` per task, where ``retried`` is the number of the
task's attempts that the journal shows failed after starting (a legitimate re-run; none is
expected unless the provider itself killed a task). A *lost* task has no completed execution,
or did not succeed, or its collected output is missing or wrong.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Executions", "read_ledger"]


@dataclass
class Executions:
    """Per task: the nonces of executions that started, and of those that completed."""

    started: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    completed: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    malformed: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(len(nonces) for nonces in self.started.values())

    def doubles(self, retried: dict[str, int] | None = None) -> dict[str, int]:
        """Task -> executions beyond the first that ``retried`` (failed attempts) do not explain."""
        retried = retried or {}
        found = {}
        for task, nonces in self.started.items():
            extra = len(nonces) - 1 - retried.get(task, 0)
            if extra > 0:
                found[task] = extra
        return found

    def unfinished(self, tasks: list[str]) -> list[str]:
        """Tasks with no completed execution."""
        return [task for task in tasks if not self.completed.get(task)]


def read_ledger(path: Path | list[Path], marker: str) -> Executions:
    """Parse ``path`` (or each of several: one per backend of a routed plan); lines of
    another plan (another marker) are ignored."""
    executions = Executions()
    text = ""
    for one in [path] if isinstance(path, Path) else path:
        try:
            text += one.read_text(errors="replace") + "\n"
        except FileNotFoundError:
            continue
    starts: dict[str, str] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 5 and fields[0] == "start":
            if fields[4] != marker:
                continue
            _, task, nonce, _pid, _ = fields
            executions.started[task].append(nonce)
            starts[nonce] = task
        elif len(fields) == 3 and fields[0] == "end":
            _, task, nonce = fields
            if starts.get(nonce) == task:
                executions.completed[task].append(nonce)
        elif line.strip():
            executions.malformed.append(line)
    return executions
