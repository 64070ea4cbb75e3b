"""The fake Slurm's jobs and what ``squeue`` and ``sacct`` print about them (Slurm 22.05).

An array element is a job of its own (``FakeJob`` with ``array_id`` and ``index``), shown as
``ARRAYID_INDEX`` as Slurm shows it (its raw id, which Slurm gives an element only when it
starts, is never printed here). As on the real controller (checked on the test cluster):

- ``squeue --array`` prints one row per element; without ``--array`` the pending elements
  of an array share one row, ``ID_[1,3%2]``; ``--jobs=ID`` names every element of array
  ``ID``, ``--jobs=ID_I`` one; an index the array does not have prints nothing (exit 0);
- ``sacct`` prints each started element with its steps (``ID_I``, ``ID_I.batch``, ...), and
  the elements that never started in one row per state, ``ID_[0-1,3]`` (PENDING, or
  ``CANCELLED by 0`` once ``scancel ID`` cancelled them);
- ``scancel ID_I`` of a pending element removes it from squeue and sacct at once (no row);
  ``scancel ID`` leaves its pending elements in squeue as CANCELLED;
- a job's working directory is the array's (its ``--chdir``); the task's own directory,
  where its script writes records and logs, is ``record_dir``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

__all__ = ["ACTIVE", "ArraySpec", "FakeJob", "named", "parse_array", "sacct_lines", "squeue_lines"]

ACTIVE = ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING")
_ARRAY = re.compile(r"(\d+)-(\d+)(?:%(\d+))?|(\d+)")


@dataclass
class FakeJob:
    job_id: int
    name: str
    comment: str
    work_dir: str
    script: str
    directives: dict[str, str | None]
    time_limit_s: int | None
    state: str = "RUNNING"
    exit_code: str = "0:0"
    raw_status: int = 0
    steps: list[tuple[str, str, str, str]] = field(default_factory=list)  # id, name, state, exit
    ended_at: float | None = None
    in_queue: bool = True
    #: An array element: the array's job id and this element's index.
    array_id: int | None = None
    index: int | None = None
    #: Where the job's script writes its records and logs (an element: its task's directory).
    record_dir: str = ""
    #: Never in accounting (an array element cancelled while it was pending).
    unaccounted: bool = False
    #: Submitted with ``--hold``: pending until released (the fake never releases it).
    held: bool = False
    #: Whether it ever started (an element that never did stays in its array's own record).
    started: bool = False

    def __post_init__(self) -> None:
        self.record_dir = self.record_dir or self.work_dir

    @property
    def shown(self) -> str:
        """The id squeue, sacct and scancel use: ``12``, or ``12_3`` for an element."""
        return str(self.job_id) if self.array_id is None else f"{self.array_id}_{self.index}"


@dataclass(frozen=True)
class ArraySpec:
    """``--array=0-N[%M]``: the indices, and at most ``limit`` elements running at once."""

    indices: tuple[int, ...]
    limit: int | None


def parse_array(text: str) -> ArraySpec | None:
    """``0-9%2``, ``0-9`` or ``4`` (the forms the backend and its tests write); None else."""
    match = _ARRAY.fullmatch(text.strip())
    if match is None:
        return None
    if match.group(4) is not None:
        return ArraySpec((int(match.group(4)),), None)
    first, last = int(match.group(1)), int(match.group(2))
    if last < first:
        return None
    limit = int(match.group(3)) if match.group(3) else None
    return ArraySpec(tuple(range(first, last + 1)), limit)


def named(job: FakeJob, wanted: Iterable[str]) -> bool:
    """Whether ``--jobs=...`` names ``job``: its own id, or its array's id."""
    ids = set(wanted)
    return job.shown in ids or (job.array_id is not None and str(job.array_id) in ids)


def _collapsed(array_id: int, indices: Sequence[int], limit: int | None) -> str:
    """``12_[0-3,7%2]``: runs of indices as ranges, as Slurm prints an array's pending part."""
    runs: list[list[int]] = []
    for index in sorted(indices):
        if runs and index == runs[-1][-1] + 1:
            runs[-1].append(index)
        else:
            runs.append([index])
    text = ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)
    throttle = f"%{limit}" if limit is not None else ""
    return f"{array_id}_[{text}{throttle}]"


def squeue_lines(
    jobs: Sequence[FakeJob],
    fields: Sequence[str],
    *,
    per_element: bool,
    node_name: str,
    limits: dict[int, int | None],
) -> list[str]:
    """squeue's rows (``--Format`` fields, each ``|``-ended) for ``jobs``."""
    rows: list[tuple[FakeJob, str]] = []
    pending: dict[int, list[FakeJob]] = {}
    for job in jobs:
        if not per_element and job.array_id is not None and job.state == "PENDING":
            if job.array_id not in pending:
                rows.append((job, ""))  # the array's one pending row, in this place
            pending.setdefault(job.array_id, []).append(job)
            continue
        rows.append((job, job.shown))
    lines = []
    for job, shown in rows:
        if not shown:
            members = pending[job.array_id or 0]
            limit = limits.get(job.array_id or 0)
            shown = _collapsed(job.array_id or 0, [m.index or 0 for m in members], limit)
        running = sum(1 for j in jobs if j.array_id == job.array_id and j.state in ACTIVE[1:])
        throttled = (
            job.state == "PENDING"
            and job.array_id is not None
            and limits.get(job.array_id) is not None
            and running >= (limits.get(job.array_id) or 0)
        )
        values = {
            "JobID": str(job.job_id),
            "JobArrayID": shown,
            "State": job.state.split(" ", 1)[0],
            "Reason": "JobArrayTaskLimit" if throttled else "None",
            "exit_code": str(job.raw_status),
            "Name": job.name,
            "Comment": job.comment or "(null)",
            "NodeList": "" if job.state == "PENDING" else node_name,
            "WorkDir": job.work_dir,
        }
        lines.append("".join(f"{values[f]}|" for f in fields))
    return lines


def sacct_lines(
    jobs: Sequence[FakeJob],
    fields: Sequence[str],
    *,
    allocations: bool,
    node_name: str,
    limits: dict[int, int | None],
) -> list[str]:
    """sacct's ``--parsable2`` rows for ``jobs`` (with their steps unless ``allocations``)."""
    lines = []
    # elements that never started stay in their array's own record: one row per state
    unstarted: dict[tuple[int, str], list[FakeJob]] = {}
    for job in jobs:
        if job.unaccounted:
            continue
        if job.array_id is not None and not job.started:
            unstarted.setdefault((job.array_id, job.state), []).append(job)
            continue
        rows = [(job.shown, job.name, job.state, job.exit_code)]
        if not allocations:
            rows += job.steps
        for step_id, name, state, exit_code in rows:
            lines.append(_sacct_line(job, fields, step_id, name, state, exit_code, node_name))
    for (array_id, state), members in unstarted.items():
        shown = _collapsed(array_id, [m.index or 0 for m in members], limits.get(array_id))
        first = members[0]
        lines.append(_sacct_line(first, fields, shown, first.name, state, "0:0", node_name, True))
    return lines


def _sacct_line(
    job: FakeJob,
    fields: Sequence[str],
    step_id: str,
    name: str,
    state: str,
    exit_code: str,
    node_name: str,
    whole: bool = False,
) -> str:
    values = {
        "JobID": step_id,
        "State": state,
        "ExitCode": exit_code,
        "JobName": name,
        "NodeList": "None assigned" if job.state == "PENDING" else node_name,
        "WorkDir": job.work_dir if whole or step_id == job.shown else "",
    }
    return "|".join(values[f] for f in fields)
