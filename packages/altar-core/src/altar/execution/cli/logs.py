"""``altar logs RUN_DIR TASK [--attempt N] [--follow] [--json]``: what an attempt wrote.

The task's stdout goes to stdout and its stderr to stderr, so ``altar logs ... 2>/dev/null``
keeps only one of them. The logs come from the backend's ``task_logs`` hook; a backend without
it gives the log tail it keeps for failures (``failure_detail``), and a backend that cannot be
reached leaves the tail the journal recorded. ``--follow`` prints what a running attempt adds
until it ends (an attempt still queued is waited for until it writes or ends). On a
terminal, control characters are escaped; ``--json`` carries them as is.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from altar.execution.backend import ExecutionBackend
from altar.execution.errors import AltarError, BackendUnavailableError
from altar.execution.registry import create_backend
from altar.execution.run.progress import terminal_safe
from altar.execution.state.journal import Attempt, Journal, TaskRecord
from altar.execution.types import TaskHandle

__all__ = ["add_arguments", "cmd_logs"]

EXIT_OK, EXIT_FAILED = 0, 1
#: Pause between fetches while following a running attempt.
FOLLOW_INTERVAL_S = 1.0


class LogsError(AltarError):
    """The task or attempt asked for does not exist in the run (exit status 2)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("task", metavar="TASK", help="the task's id in the plan")
    p.add_argument("--attempt", metavar="N", type=int, help="attempt number (default: the last)")
    p.add_argument("--follow", "-f", action="store_true", help="print more as the attempt runs")
    p.add_argument(
        "--json", action="store_true", help="print {task, attempt, source, stdout, stderr}"
    )


@dataclass(frozen=True)
class Fetched:
    stdout: str
    stderr: str
    source: str  # task_logs, failure_detail, journal


def _pick(journal: Journal, task_id: str, number: int | None) -> tuple[TaskRecord, Attempt]:
    record = journal.tasks.get(task_id)
    if record is None:
        known = ", ".join(list(journal.tasks)[:10])
        more = ", ..." if len(journal.tasks) > 10 else ""
        raise LogsError(f"{journal.run_dir} has no task {task_id!r} (its tasks: {known}{more})")
    if not record.attempts:
        raise LogsError(
            f"task {task_id!r} of {journal.run_dir} was never submitted ({record.state})"
        )
    if number is None:
        return record, record.attempts[-1]
    for attempt in record.attempts:
        if attempt.number == number:
            return record, attempt
    raise LogsError(
        f"task {task_id!r} has no attempt {number} (its attempts: "
        f"{', '.join(str(a.number) for a in record.attempts)})"
    )


def _backend_named(journal: Journal, attempt: Attempt) -> str:
    """The backend ``attempt`` ran on, for messages: a routed run's by its name and type."""
    from altar.execution.run.routed import LABEL_ROUTE

    route = attempt.handle.labels.get(LABEL_ROUTE) if attempt.handle is not None else None
    lanes = journal.backend_options.get("backends") if journal.backend_type == "routed" else None
    if route is not None and isinstance(lanes, dict) and isinstance(lanes.get(route), dict):
        return f"{route!r} ({lanes[route].get('type')})"
    return repr(journal.backend_type)


def _journal_tail(record: TaskRecord, attempt: Attempt) -> Fetched:
    last = attempt is record.attempts[-1]
    text = (record.detail if last else None) or (attempt.failure.detail if attempt.failure else "")
    return Fetched("", text or "", "journal")


async def _fetch(backend: ExecutionBackend | None, record: TaskRecord, attempt: Attempt) -> Fetched:
    handle = attempt.handle
    if backend is None or handle is None:
        return _journal_tail(record, attempt)
    try:
        logs = await backend.task_logs(handle)
        if logs is not None:
            return Fetched(logs.stdout, logs.stderr, "task_logs")
        tail = await backend.failure_detail(handle)
    except BackendUnavailableError:
        return _journal_tail(record, attempt)
    if tail:
        return Fetched("", tail, "failure_detail")
    return _journal_tail(record, attempt)


def _write(stream: TextIO, text: str) -> None:
    if not text:
        return
    stream.write(terminal_safe(text) if stream.isatty() else text)
    stream.flush()


async def _finished(backend: ExecutionBackend, handle: TaskHandle) -> bool:
    try:
        (status,) = await backend.poll([handle])
    except BackendUnavailableError:
        return False
    return status.state.is_terminal


async def cmd_logs(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    run_dir = Path(args.run_dir)
    journal = Journal.load(run_dir)
    record, attempt = _pick(journal, args.task, args.attempt)
    backend: ExecutionBackend | None
    try:
        backend = create_backend(
            journal.backend_type, journal.backend_options, source=f"{run_dir}: backend.options"
        )
    except (AltarError, BackendUnavailableError) as error:
        err.write(f"altar: cannot build the backend, showing the journal's log tail: {error}\n")
        backend = None
    fetched = await _fetch(backend, record, attempt)
    if args.follow and not args.json and backend is not None and attempt.handle is not None:
        # A job still queued has written nothing yet: wait for its first output, or its end.
        while fetched.source != "task_logs" and not await _finished(backend, attempt.handle):
            await asyncio.sleep(FOLLOW_INTERVAL_S)
            fetched = await _fetch(backend, record, attempt)
    if args.json:
        data = {
            "task": record.id,
            "attempt": attempt.number,
            "source": fetched.source,
            "stdout": fetched.stdout,
            "stderr": fetched.stderr,
        }
        out.write(json.dumps(data, indent=2) + "\n")
        return EXIT_OK
    if fetched.source != "task_logs" and not fetched.stderr:
        err.write(
            f"altar: no output of task {record.id!r} attempt {attempt.number} is left: backend "
            f"{_backend_named(journal, attempt)} does not give a task's logs, and keeps only "
            "the log tail of a failed attempt\n"
        )
        return EXIT_FAILED
    if fetched.source != "task_logs":
        what = (
            "the journal"
            if fetched.source == "journal"
            else f"backend {_backend_named(journal, attempt)}"
        )
        err.write(f"altar: {what} keeps only the log tail of a failed attempt; showing it\n")
    _write(out, fetched.stdout)
    _write(err, fetched.stderr)
    if not args.follow or backend is None or attempt.handle is None:
        if not (fetched.stdout or fetched.stderr):
            # the backend gave the logs, and they are empty: an answer, not a failure
            err.write(f"altar: task {record.id!r} attempt {attempt.number} wrote no output\n")
        return EXIT_OK
    shown = fetched
    while fetched.source == "task_logs" and not await _finished(backend, attempt.handle):
        await asyncio.sleep(FOLLOW_INTERVAL_S)
        fetched = await _fetch(backend, record, attempt)
        # logs only grow: print what was added since (a provider that rotated them: all of it)
        for stream, old, new in (
            (out, shown.stdout, fetched.stdout),
            (err, shown.stderr, fetched.stderr),
        ):
            _write(stream, new[len(old) :] if new.startswith(old) else new)
        shown = fetched
    final = await _fetch(backend, record, attempt)
    if final.source == "task_logs":
        _write(
            out, final.stdout[len(shown.stdout) :] if final.stdout.startswith(shown.stdout) else ""
        )
        _write(
            err, final.stderr[len(shown.stderr) :] if final.stderr.startswith(shown.stderr) else ""
        )
    return EXIT_OK
