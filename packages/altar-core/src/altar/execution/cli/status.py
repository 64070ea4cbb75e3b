"""``altar status RUN_DIR [--watch[=S]] [--interval S] [--quiet] [--json]``: a run's tasks.

One poll of the open tasks (the backend is built again from the options the run recorded);
the rows say what a resume will do (see :mod:`~altar.execution.state.runs`).
Exit status 1 when a task
failed or was cancelled, as for ``altar run``. ``--watch`` redraws until every task settled;
while an ``altar run`` process drives the run it reads only the journal that process keeps.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from altar.execution.backend import ExecutionBackend
from altar.execution.cli.resume import journal_resume_command
from altar.execution.errors import AltarError, BackendUnavailableError
from altar.execution.registry import create_backend
from altar.execution.run.budget import RetryBudget
from altar.execution.run.progress import format_counts, format_table, terminal_safe, use_colour
from altar.execution.run.runner import RunResult
from altar.execution.state.journal import CANCELLED, FAILED, Journal, lock_is_held
from altar.execution.state.runs import (
    counts,
    needs_plan,
    open_handles,
    plan_facts,
    status_result,
)
from altar.execution.types import TaskStatus

__all__ = ["add_arguments", "cmd_status", "format_status_summary", "status_exit"]

EXIT_OK, EXIT_FAILED = 0, 1
#: Where ``--watch`` without a number redraws, seconds.
WATCH_INTERVAL_S = 2.0


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
    return {record.id: status for record, status in zip(records, statuses, strict=True)}


def format_status_summary(
    result: RunResult, *, driven: bool, resume: str | Callable[[], str]
) -> str:
    """``4 tasks: 1 running, 3 succeeded; run directory DIR`` and, if it waits, how to resume.

    ``resume`` may be a function: it reads the plan, so it is called only when the line is shown.
    """
    total = len(result.tasks)
    line = (
        f"{total} task{'s' if total != 1 else ''}: {format_counts(counts(result.tasks))}; "
        f"run directory {result.run_dir}"
    )
    if driven:
        return line + " (an altar process is driving it)"
    waiting = [
        t
        for t in result.tasks
        if t.status not in ("succeeded", "cached", FAILED, "skipped", CANCELLED)
    ]
    if waiting:
        line += f"\nresume it with: {resume if isinstance(resume, str) else resume()}"
    return line


def status_exit(result: RunResult) -> int:
    return EXIT_FAILED if any(t.status in (FAILED, CANCELLED) for t in result.tasks) else EXIT_OK


def _settled(result: RunResult) -> bool:
    """Every task final (a ``collecting`` success is not: its outputs are still to come)."""
    return all(
        t.status in ("succeeded", "cached", FAILED, "skipped", CANCELLED) for t in result.tasks
    )


async def _snapshot(
    run_dir: Path, err: TextIO, *, poll: bool, warn: bool, journal: Journal | None = None
) -> tuple[RunResult, Journal, bool]:
    """The run's rows; ``journal``: one just loaded (at 100,000 tasks a load costs seconds)."""
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
    result = status_result(journal, polled, budget=budget, with_outputs=with_outputs)
    return result, journal, driven


def _render(
    result: RunResult, journal: Journal, driven: bool, args: argparse.Namespace, colour: bool
) -> str:
    if args.json:
        data = result.to_dict()
        data["counts"] = counts(result.tasks)
        data["driven"] = driven
        data["staging_error"] = journal.staging_error
        return json.dumps(data, indent=2) + "\n"
    summary = format_status_summary(
        result, driven=driven, resume=lambda: terminal_safe(journal_resume_command(journal))
    )
    if journal.staging_error:  # the tasks wait for inputs that could not be staged: say why
        summary = f"staging failed: {terminal_safe(journal.staging_error)}\n{summary}"
    if args.quiet:
        return summary + "\n"
    return format_table(result.tasks, colour=colour) + "\n\n" + summary + "\n"


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
        result, journal, driven = await _snapshot(
            run_dir, err, poll=True, warn=True, journal=loaded
        )
        out.write(_render(result, journal, driven, args, colour))
        if not args.json and not args.quiet:
            err.write(
                f"altar: run {result.run_id} on {result.backend}; its provider objects carry the "
                f"labels altar.run={result.run_id}, altar.task, altar.attempt and "
                "altar.submission\n"
            )
        return status_exit(result)
    interval = max(0.1, args.watch)
    live = out.isatty() and not args.json
    shown = ""
    while True:
        # while a process drives the run, its journal is current: the backend is not asked
        result, journal, driven = await _snapshot(run_dir, err, poll=True, warn=False)
        text = _render(result, journal, driven, args, colour)
        if text != shown:
            out.write(("\x1b[H\x1b[2J" if live else "") + text)
            out.flush()
            shown = text
        if _settled(result):
            return status_exit(result)
        await asyncio.sleep(interval)
