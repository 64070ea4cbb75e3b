"""Text rendering for the ``altar`` CLI: event lines, the live status line, result tables.

Pure functions (plus one small printer class) so the output is tested without a terminal.
Text that comes from tasks or providers (log tails, error messages) is shown with its control
characters escaped, so a task cannot move the cursor, rewrite earlier lines or send commands
to the user's terminal.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TextIO

from altar.execution.run.runner import TASK_STATES, RunEvent, RunResult, TaskResult

__all__ = [
    "PROGRESS_LOG",
    "QUIET",
    "SUMMARY_THRESHOLD",
    "TASK_LOG_LINES",
    "WARNINGS",
    "ProgressPrinter",
    "format_counts",
    "format_duration",
    "format_eta",
    "format_event",
    "format_failures",
    "format_summary",
    "format_table",
    "terminal_safe",
    "use_colour",
]

#: Events worth a line of their own; ``state`` changes only in plain (non-TTY) output.
NOTABLE = frozenset(
    {
        "staging",
        "staged",
        "edited",
        "resumed",
        "submitted",
        "in_doubt",
        "retry",
        "succeeded",
        "cached",
        "cache_miss",
        "cache_wait",
        "cache_store_failed",
        "failed",
        "skipped",
        "cancelled",
        "cancel_failed",
        "backend_unavailable",
        "held",
        "paused",
        "hold_lifted",
        "cleanup_failed",
        "stopping",
    }
)
#: What ``altar run --json`` still prints when stderr is not a terminal (a CI log): what a
#: user must hear about even when only the JSON result is wanted.
WARNINGS = frozenset(
    {
        "edited",
        "resumed",
        "in_doubt",
        "retry",
        "failed",
        "cache_miss",
        "cache_store_failed",
        "cancel_failed",
        "backend_unavailable",
        "held",
        "paused",
        "hold_lifted",
        "cleanup_failed",
        "stopping",
    }
)
#: What ``altar run --quiet`` prints: warnings and errors only, not that a run resumes.
QUIET = WARNINGS - {"resumed"}
#: Events that show the backend answered again: the next outage prints its advice anew.
_ANSWERED = frozenset({"submitted", "state", "succeeded", "failed", "staged", "resumed"})
_OUTAGE = re.compile(
    r"^(?:(?P<task>\S+): )?(?P<call>submit|poll|capacity|collect): (?P<why>.*)$", re.S
)
_FINAL = ("succeeded", "cached", "failed", "skipped", "cancelled")
_DETAIL_WIDTH = 60
#: Plain output prints a ``staging_progress`` line at most this often (a terminal redraws).
PLAIN_STAGING_INTERVAL_S = 5.0
#: Plans of more tasks than this print no line per task that goes well (``submitted``, state
#: changes, ``succeeded``, ``cached``): those go to the task log (``PROGRESS_LOG`` in the run
#: directory), and plain output prints a line of counts every ``SUMMARY_INTERVAL_S`` instead.
#: Failures, retries and warnings still print.
SUMMARY_THRESHOLD = 200
SUMMARY_INTERVAL_S = 10.0
PROGRESS_LOG = "progress.log"
#: The per-task lines a large plan sends to its task log instead of the stream.
PER_TASK = frozenset({"submitted", "state", "succeeded", "cached"})
#: The task log holds at most this many per-task lines, then one line saying so, and from
#: then on the summary lines only (issue 24: two lines per task were 74 bytes a task of a
#: 100,000-task run; ``altar status`` shows every task from the journal).
TASK_LOG_LINES = 10_000


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


_ORDER = (*TASK_STATES[:4], "collecting", *TASK_STATES[4:])


def format_counts(counts: Mapping[str, int]) -> str:
    """``2 running, 1 succeeded`` in the order tasks move through states."""
    known = [state for state in _ORDER if counts.get(state)]
    other = [state for state in counts if state not in _ORDER and counts[state]]
    parts = [f"{counts[state]} {state}" for state in [*known, *other]]
    return ", ".join(parts) or "nothing yet"


#: SGR colours of the STATUS column on a terminal.
_COLOURS = {
    "succeeded": "32",  # green
    "cached": "32",
    "failed": "31",  # red
    "running": "36",  # cyan
    "pending": "36",
    "submitting": "36",
    "collecting": "36",
    "skipped": "33",  # yellow
    "cancelled": "33",
}


def use_colour(stream: TextIO) -> bool:
    """Colour for a terminal, unless ``NO_COLOR`` is set (https://no-color.org) or TERM=dumb."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _paint(text: str, status: str, colour: bool) -> str:
    code = _COLOURS.get(status) if colour else None
    return f"\x1b[{code}m{text}\x1b[0m" if code else text


def format_eta(done: int, total: int, elapsed_s: float) -> str:
    """``50% done, ETA 12.0s`` (the ETA once a task finished: elapsed per finished task)."""
    if total <= 0:
        return ""
    percent = f"{100 * done // total}% done"
    if done <= 0 or done >= total:
        return percent
    return f"{percent}, ETA {format_duration(elapsed_s * (total - done) / done)}"


def format_event(event: RunEvent, *, plain: bool) -> str | None:
    """The line for ``event``, or None if it only updates the status line."""
    if event.kind in NOTABLE or (plain and event.kind == "state"):
        message = terminal_safe(event.message).replace("\n", " ")
        return f"{format_duration(event.elapsed_s):>7}  {message}"
    return None


# C0 controls but tab and newline (carriage return too: it rewrites the line), DEL and C1.
_UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def terminal_safe(text: str) -> str:
    """``text`` with every control character but tab and newline written as ``\\xNN``."""
    return _UNSAFE.sub(lambda match: f"\\x{ord(match.group()):02x}", text)


def _last_line(text: str | None) -> str:
    if not text:
        return ""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    line = lines[-1] if lines else ""
    return line if len(line) <= _DETAIL_WIDTH else line[: _DETAIL_WIDTH - 3] + "..."


def _detail(task: TaskResult) -> str:
    if task.status == "succeeded":
        return ""
    if task.status in ("skipped", "cached"):
        return task.detail or ""
    reason = task.reason or ""
    last = _last_line(task.detail)
    return f"{reason}: {last}" if last and reason else reason or last


REEXECUTED_NOTE = (
    "* started again after a submit whose answer never arrived: the provider may have run "
    "the task twice (see `altar status --json`, in_doubt and reexecuted)"
)


def format_table(tasks: Sequence[TaskResult], *, colour: bool = False) -> str:
    """One row per task: id, kind, status, executions, time of the last attempt, why it failed.

    ATTEMPTS counts executions; a ``*`` marks a task started again after an in-doubt submit
    (explained in a note under the table); ``(2 preempted)`` counts the attempts the provider
    ended, which used no retry. ``colour`` paints the STATUS column (for a
    terminal; see :func:`use_colour`).
    """
    header = ("TASK", "KIND", "STATUS", "ATTEMPTS", "TIME", "DETAIL")
    rows = [
        (
            task.id,
            terminal_safe(task.kind),
            task.status,
            task.attempts_text,
            format_duration(task.duration_s),
            terminal_safe(_detail(task)),
        )
        for task in tasks
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    lines = []
    for number, row in enumerate([header, *rows]):
        cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)]
        if number:
            cells[2] = _paint(cells[2], row[2], colour)
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    if any(task.reexecuted for task in tasks):
        lines.append(REEXECUTED_NOTE)
    return "\n".join(lines)


def format_failures(tasks: Sequence[TaskResult]) -> str:
    """The full failure detail (log tail) of every failed task, indented under its id."""
    blocks = []
    for task in tasks:
        if task.status != "failed" or not task.detail:
            continue
        lines = terminal_safe(task.detail.rstrip()).splitlines()
        body = "\n".join(f"    {line}" for line in lines)
        blocks.append(f"{task.id} ({task.reason}):\n{body}")
    return "\n".join(blocks)


def format_summary(result: RunResult, *, earlier_s: float = 0.0) -> str:
    """``4 tasks: 4 succeeded in 5.0s; run directory DIR``; ``earlier_s``: the run's time in
    the processes before this one (a resumed run counts its whole history)."""
    total = len(result.tasks)
    took = format_duration(result.elapsed_s + earlier_s)
    if earlier_s > 0:
        took += f" ({format_duration(result.elapsed_s)} in this process)"
    return (
        f"{total} task{'s' if total != 1 else ''}: {format_counts(result.counts())} "
        f"in {took}; run directory {result.run_dir}"
    )


class ProgressPrinter:
    """Prints run events: on a terminal a live status line under the event lines, else lines."""

    def __init__(
        self,
        stream: TextIO,
        *,
        total: int,
        live: bool,
        prefix: str = "",
        only: frozenset[str] | None = None,
        earlier_s: float = 0.0,
        task_log: Path | None = None,
    ) -> None:
        self.stream = stream
        # a large plan's per-task lines go to this file (opened once the run directory exists)
        self.task_log = task_log if total > SUMMARY_THRESHOLD else None
        self._log: TextIO | None = None
        self._logged = 0  # per-task lines written to the task log
        self._summarized = 0.0  # elapsed_s of the last plain summary line
        # a resumed run's time before this process: the clock and the ETA count its history
        self.earlier_s = earlier_s
        self.only = only  # print event lines of these kinds only (None: every notable one)
        self._outages: set[str] = set()  # outage texts printed since the backend last answered
        self.total = total
        self.live = live
        self.prefix = prefix
        self._status = ""
        self._counts: Mapping[str, int] = {}
        self._offset = 0.0  # monotonic time at elapsed 0, to redraw the clock between events
        self._staging = ""  # the latest staging_progress message, shown while staging
        self._staging_printed = -float("inf")  # elapsed_s of the last plain staging line

    def __call__(self, event: RunEvent) -> None:
        line = format_event(event, plain=not self.live)
        if event.kind == "backend_unavailable" and line is not None:
            line = self._outage(event, line)
        elif event.kind in _ANSWERED:
            self._outages.clear()
        if event.kind == "staging_progress":
            self._staging = event.message
            if (
                not self.live
                and event.elapsed_s - self._staging_printed >= PLAIN_STAGING_INTERVAL_S
            ):
                self._staging_printed = event.elapsed_s
                line = f"{format_duration(event.elapsed_s):>7}  {event.message}"
        elif event.kind in ("staged", "done"):
            self._staging = ""
        if self.only is not None and event.kind not in self.only:
            line = None
        if line is not None and self.task_log is not None and event.kind in PER_TASK:
            self._to_log(line)
            line = None
            if event.elapsed_s - self._summarized >= SUMMARY_INTERVAL_S:
                self._summarized = event.elapsed_s
                summary = self._summary(event)
                if self._logged > TASK_LOG_LINES:
                    self._to_log(summary, per_task=False)
                line = None if self.live else summary
        if self.live:
            self._clear()
            if line is not None:
                self.stream.write(f"{self.prefix}{line}\n")
            self._counts = event.counts
            self._offset = time.monotonic() - event.elapsed_s
            if event.kind != "done":
                self._draw(event.elapsed_s)
            else:
                self._status = ""
        elif line is not None:
            self.stream.write(f"{self.prefix}{line}\n")
        self.stream.flush()

    def _summary(self, event: RunEvent) -> str:
        done = sum(event.counts.get(state, 0) for state in _FINAL)
        eta = format_eta(done, self.total, event.elapsed_s + self.earlier_s)
        return (
            f"{format_duration(event.elapsed_s):>7}  {format_counts(event.counts)} of "
            f"{self.total}; {eta} (each task's lines: {self.task_log})"
        )

    def _to_log(self, line: str, *, per_task: bool = True) -> None:
        if per_task:
            self._logged += 1
            if self._logged > TASK_LOG_LINES + 1:
                return
            if self._logged > TASK_LOG_LINES:
                line = (
                    f"(more than {TASK_LOG_LINES} per-task lines: only summaries follow; "
                    "altar status shows every task)"
                )
        if self._log is None:
            assert self.task_log is not None
            if not self.task_log.parent.is_dir():
                return  # no run directory yet: nothing per task happened
            self._log = self.task_log.open("a", encoding="utf-8")
        self._log.write(f"{line}\n")

    def _outage(self, event: RunEvent, line: str) -> str:
        """The first report of an outage in full (its advice), a repeat as one short line."""
        match = _OUTAGE.match(event.message)
        why = match.group("why") if match else event.message
        if why not in self._outages:
            self._outages.add(why)
            return line
        where = f"{match.group('task')}: " if match and match.group("task") else ""
        call = match.group("call") if match else "call"
        return (
            f"{format_duration(event.elapsed_s):>7}  {where}{call}: the backend is still "
            "unavailable (as above)"
        )

    def tick(self) -> None:
        """Redraw the status line with the current elapsed time (a terminal only)."""
        if self.live and self._status:
            self._clear()
            self._draw(time.monotonic() - self._offset)
            self.stream.flush()

    def _draw(self, elapsed_s: float) -> None:
        elapsed_s += self.earlier_s
        finished = sum(self._counts.get(state, 0) for state in _FINAL)
        eta = format_eta(finished, self.total, elapsed_s)
        inside = self._staging or f"{format_counts(self._counts)} of {self.total}; {eta}"
        status = f"{self.prefix}{format_duration(elapsed_s):>7}  [{inside}]"
        # a line wider than the terminal wraps, and "\r" would then redraw only its tail
        width = shutil.get_terminal_size((100, 24)).columns - 1
        self._status = status if len(status) <= width else status[: max(0, width - 3)] + "..."
        self.stream.write(self._status)

    def _clear(self) -> None:
        if self._status:
            self.stream.write("\r\x1b[K")

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
        if self.live and self._status:
            self._clear()
            self._status = ""
            self.stream.flush()
