"""``altar status RUN_DIR [--watch[=S]] [--interval S] [--quiet] [--json]``: a run's tasks.

One poll of the open tasks (the backend is built again from the options the run recorded);
the rows say what a resume will do (see :mod:`altar.execution.state.runs`). Above
:data:`~altar.execution.state.views.GROUP_THRESHOLD` tasks it prints groups (kind and labels) with
counts and the failed tasks, building rows only for what it prints (issue 24). Exit status
1 when a task failed or was cancelled, as for ``altar run``. ``--watch`` redraws until every
task settled; while an ``altar run`` process drives the run it reads only the journal that
process keeps.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from altar.execution.backend import ExecutionBackend
from altar.execution.cli.resume import journal_resume_command
from altar.execution.errors import AltarError, BackendUnavailableError
from altar.execution.registry import create_backend
from altar.execution.run.budget import RetryBudget
from altar.execution.run.progress import format_counts, format_table, terminal_safe, use_colour
from altar.execution.run.results import CACHED, RunResult, TaskResult
from altar.execution.state.journal import CANCELLED, FAILED, Journal, TaskRecord, lock_is_held
from altar.execution.state.runs import (
    counts,
    needs_plan,
    open_handles,
    ordered_counts,
    plan_facts,
    row_state,
    task_row,
    task_row_dict,
)
from altar.execution.state.views import (
    FAILED_SHOWN,
    format_failed,
    format_groups,
    group_tasks,
    group_threshold,
    grouping_labels,
    matches,
    user_labels,
)
from altar.execution.types import TaskStatus

__all__ = ["add_arguments", "cmd_status", "format_status_summary", "status_exit"]

EXIT_OK, EXIT_FAILED = 0, 1
#: Where ``--watch`` without a number redraws, seconds.
WATCH_INTERVAL_S = 2.0
#: The final states: a run whose tasks are all in one waits for nothing.
#: Task rows ``--json`` encodes at a time (a line each): one call per row costs a second at 100k.
_JSON_BATCH = 500
SETTLED = frozenset({"succeeded", CACHED, FAILED, "skipped", CANCELLED})


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="RUN_DIR", nargs="?")
    p.add_argument("--json", action="store_true", help="print JSON")
    # `--watch RUN_DIR` must not take the run directory for the interval: the value is an
    # interval only if it is a number (`--watch 5`, `--watch=5`), else the run directory
    p.add_argument(
        "--watch",
        metavar="SECONDS",
        nargs="?",
        const="",
        help=f"redraw every SECONDS (default {WATCH_INTERVAL_S:g}) until every task settled",
    )
    p.add_argument(
        "--interval", metavar="SECONDS", type=float, help="with --watch: seconds between redraws"
    )
    p.add_argument("--quiet", action="store_true", help="print the summary line only")
    p.add_argument(
        "--all", action="store_true", help="one row per task, however large the run (no groups)"
    )
    p.add_argument(
        "--group",
        metavar="SELECTOR",
        help="list the tasks of one group: words, each a kind or a label as KEY=VALUE",
    )
    p.add_argument(
        "--state", metavar="STATES", help="list the tasks in these states (comma-separated)"
    )


def _line(error: BaseException) -> str:
    return terminal_safe(" ".join(str(error).split()))


def _journal_backend(run_dir: Path, journal: Journal) -> ExecutionBackend:
    return create_backend(
        journal.backend_type, journal.backend_options, source=f"{run_dir}: backend.options"
    )


async def _poll(
    backend: ExecutionBackend, journal: Journal, err: TextIO, *, warn: bool
) -> dict[str, TaskStatus]:
    records = open_handles(journal)
    if not records:
        return {}
    handles = [record.attempts[-1].handle for record in records]
    try:
        statuses = await backend.poll([h for h in handles if h is not None])
    except BackendUnavailableError as error:
        if warn:
            err.write(
                f"altar: the backend did not answer, showing the journal only: {_line(error)}\n"
            )
        return {}
    except Exception as error:  # a refused credential, a broken backend: still show the journal
        if warn:
            reason = f"{type(error).__name__}: {_line(error)}"
            err.write(f"altar: the backend's poll failed, showing the journal only: {reason}\n")
        return {}
    if len(statuses) != len(records):
        err.write("altar: the backend's poll answered for other tasks, showing the journal only\n")
        return {}
    from altar.execution.run.routed import unanswered

    found = {
        record.id: status
        for record, status in zip(records, statuses, strict=True)
        if not unanswered(backend, status.handle)
    }
    if warn and len(found) < len(records):
        err.write(
            f"altar: {len(records) - len(found)} task(s) are on a backend that did not answer: "
            "showing the journal for them\n"
        )
    return found


def _summary_line(
    total: int,
    state_counts: Mapping[str, int],
    run_dir: Path,
    *,
    driven: bool,
    waiting: bool,
    resume: str | Callable[[], str],
) -> str:
    line = (
        f"{total} task{'s' if total != 1 else ''}: {format_counts(state_counts)}; "
        f"run directory {run_dir}"
    )
    if driven:
        return line + " (an altar process is driving it)"
    if waiting:
        line += f"\nresume it with: {resume if isinstance(resume, str) else resume()}"
    return line


def format_status_summary(
    result: RunResult, *, driven: bool, resume: str | Callable[[], str]
) -> str:
    """``4 tasks: 1 running, 3 succeeded; run directory DIR`` and, if it waits, how to resume.

    ``resume`` may be a function: it reads the plan, so it is called only when the line is shown.
    """
    return _summary_line(
        len(result.tasks),
        counts(result.tasks),
        result.run_dir,
        driven=driven,
        waiting=not all(t.status in SETTLED for t in result.tasks),
        resume=resume,
    )


def status_exit(result: RunResult) -> int:
    return EXIT_FAILED if any(t.status in (FAILED, CANCELLED) for t in result.tasks) else EXIT_OK


@dataclass
class _Snapshot:
    """The run as one ``altar status`` sees it; rows are built only for what is printed."""

    journal: Journal
    polled: Mapping[str, TaskStatus]
    budget: RetryBudget
    with_outputs: frozenset[str] | None
    driven: bool
    states: list[str] = field(default_factory=list)  # each task's STATUS, in journal order

    def __post_init__(self) -> None:
        polled, budget, outputs = self.polled, self.budget, self.with_outputs
        self.states = [
            row_state(r, polled.get(r.id), budget, outputs) for r in self.journal.tasks.values()
        ]

    def row(self, record: TaskRecord) -> TaskResult:
        return task_row(record, self.polled.get(record.id), self.budget, self.with_outputs)

    @property
    def facts(self) -> tuple[RetryBudget, frozenset[str] | None]:
        return self.budget, self.with_outputs

    def counts(self) -> dict[str, int]:
        return ordered_counts(self.states)

    def exit_code(self) -> int:
        return EXIT_FAILED if FAILED in self.states or CANCELLED in self.states else EXIT_OK

    def settled(self) -> bool:
        """Every task final (a ``collecting`` success is not: its outputs are still to come)."""
        return all(state in SETTLED for state in self.states)

    def summary(self) -> str:
        journal = self.journal
        line = _summary_line(
            len(self.states),
            self.counts(),
            journal.run_dir,
            driven=self.driven,
            waiting=not self.settled(),
            resume=lambda: terminal_safe(journal_resume_command(journal)),
        )
        if journal.staging_error:  # the tasks wait for inputs that could not be staged: say why
            line = f"staging failed: {terminal_safe(journal.staging_error)}\n{line}"
        return line


async def _snapshot(
    run_dir: Path, err: TextIO, *, poll: bool, warn: bool, journal: Journal | None = None
) -> _Snapshot:
    """The run's states; ``journal``: one just loaded (at 100,000 tasks a load costs a second)."""
    journal = journal if journal is not None else Journal.load(run_dir)
    driven = lock_is_held(run_dir)
    polled: dict[str, TaskStatus] = {}
    if poll and not (driven and not warn):
        try:
            backend = _journal_backend(run_dir, journal)
        except (AltarError, BackendUnavailableError) as error:
            if warn:
                err.write(
                    f"altar: cannot build the backend, showing the journal only: {_line(error)}\n"
                )
        else:
            polled = await _poll(backend, journal, err, warn=warn)
    budget, with_outputs = (
        plan_facts(journal) if needs_plan(journal, polled) else (RetryBudget(), None)
    )
    return _Snapshot(journal, polled, budget, with_outputs, driven)


def _render(snap: _Snapshot, args: argparse.Namespace, colour: bool, out: TextIO) -> None:
    if args.json:
        write_json(snap, out, selector=args.group, states=_states(args.state))
        return
    summary = snap.summary()
    if args.quiet:
        out.write(summary + "\n")
        return
    records = snap.journal.tasks.values()
    if args.group is not None or args.state is not None:
        wanted = _states(args.state)
        picked = [
            snap.row(r)
            for r, state in zip(records, snap.states, strict=True)
            if (wanted is None or state in wanted)
            and (args.group is None or matches(args.group, r.kind, user_labels(r)))
        ]
        found = f"{len(picked)} of {len(snap.states)} tasks match"
        table = format_table(picked, colour=colour) if picked else "no task matches"
        out.write(f"{table}\n\n{found}\n{summary}\n")
        return
    if args.all or len(snap.states) <= group_threshold():
        table = format_table([snap.row(r) for r in records], colour=colour)
        out.write(table + "\n\n" + summary + "\n")
        return
    out.write(_grouped(snap, colour) + "\n\n" + summary + "\n")


def _states(text: str | None) -> frozenset[str] | None:
    return frozenset(text.replace(",", " ").split()) if text is not None else None


def _grouped(snap: _Snapshot, colour: bool) -> str:
    """The groups table, the first failed tasks with their tails, and how to drill down."""
    records = list(snap.journal.tasks.values())
    labels = [user_labels(r) for r in records]
    keys = grouping_labels(labels)
    groups = group_tasks(zip((r.kind for r in records), labels, snap.states, strict=True), keys)
    by = "kind" + (f" and {', '.join(keys)}" if keys else "")
    parts = [f"{len(snap.states)} tasks in {len(groups)} groups by {by}", format_groups(groups)]
    failed = [i for i, state in enumerate(snap.states) if state == FAILED]
    if failed:
        rows = [snap.row(records[i]) for i in failed[:FAILED_SHOWN]]
        parts.append(format_failed(rows, len(failed)))
    run = shlex.quote(str(snap.journal.run_dir))
    example = shlex.quote(groups[0].name) if groups else "KIND"
    parts.append(
        f"every task: altar status {run} --all; one group: --group {example}; "
        "one state: --state failed"
    )
    return "\n\n".join(parts)


def write_json(
    snap: _Snapshot,
    out: TextIO,
    *,
    selector: str | None = None,
    states: frozenset[str] | None = None,
) -> None:
    """The status as one JSON object, its ``tasks`` written a row at a time."""
    journal = snap.journal
    records = list(journal.tasks.values())
    labels = [user_labels(r) for r in records]
    groups = group_tasks(
        zip((r.kind for r in records), labels, snap.states, strict=True), grouping_labels(labels)
    )
    head = {
        "run_dir": str(journal.run_dir),
        "backend": journal.backend_type,
        "run_id": journal.run_id,
        "ok": all(state in ("succeeded", CACHED) for state in snap.states),
        "elapsed_s": 0.0,
        "counts": snap.counts(),
        "driven": snap.driven,
        "staging_error": journal.staging_error,
        "groups": [group.to_dict() for group in groups],
    }
    out.write(json.dumps(head, indent=2)[:-2] + ',\n  "tasks": [')
    batch: list[dict[str, Any]] = []
    written = False
    for record, state, mapping in zip(records, snap.states, labels, strict=True):
        if states is not None and state not in states:
            continue
        if selector is not None and not matches(selector, record.kind, mapping):
            continue
        batch.append(task_row_dict(record, snap.polled.get(record.id), *snap.facts))
        if len(batch) == _JSON_BATCH:
            out.write((",\n    " if written else "\n    ") + json.dumps(batch)[1:-1])
            written, batch = True, []
    if batch:
        out.write((",\n    " if written else "\n    ") + json.dumps(batch)[1:-1])
        written = True
    out.write("\n  ]\n}\n" if written else "]\n}\n")


def watch_arguments(
    run_dir: str | None, watch: str | None, interval: float | None
) -> tuple[str, float | None]:
    """(RUN_DIR, seconds between redraws or None without --watch) from the parsed arguments."""
    seconds: float | None = None
    if watch is not None:
        try:
            seconds = float(watch) if watch else None
        except ValueError:
            if run_dir is not None:
                raise AltarError(
                    f"--watch takes a number of seconds, got {watch!r}; "
                    "write --watch=SECONDS or --interval SECONDS"
                ) from None
            run_dir = watch
        if seconds is None:
            seconds = WATCH_INTERVAL_S if interval is None else interval
    elif interval is not None:
        raise AltarError("--interval needs --watch")
    if run_dir is None:
        raise AltarError("the following arguments are required: RUN_DIR")
    return run_dir, seconds


async def cmd_status(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    run_dir_text, args.watch = watch_arguments(args.run_dir, args.watch, args.interval)
    run_dir = Path(run_dir_text)
    loaded = Journal.load(run_dir)  # also a clear error for a directory that is not a run
    colour = use_colour(out)
    if args.watch is None:
        snap = await _snapshot(run_dir, err, poll=True, warn=True, journal=loaded)
        _render(snap, args, colour, out)
        if not args.json and not args.quiet:
            run_id = snap.journal.run_id
            err.write(
                f"altar: run {run_id} on {snap.journal.backend_type}; its provider objects carry "
                f"the labels altar.run={run_id}, altar.task, altar.attempt and "
                "altar.submission\n"
            )
        return snap.exit_code()
    interval = max(0.1, args.watch)
    live = out.isatty() and not args.json
    shown = ""
    while True:
        # while a process drives the run, its journal is current: the backend is not asked
        snap = await _snapshot(run_dir, err, poll=True, warn=False)
        buffer = io.StringIO()
        _render(snap, args, colour, buffer)
        text = buffer.getvalue()
        if text != shown:
            out.write(("\x1b[H\x1b[2J" if live else "") + text)
            out.flush()
            shown = text
        if snap.settled():
            return snap.exit_code()
        await asyncio.sleep(interval)
