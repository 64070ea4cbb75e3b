"""A run's summary beside its journal: what ``altar runs`` shows, in a few hundred bytes.

The journal writes ``summary.json`` after each snapshot. It names the snapshot it was made
from (size, mtime and inode of ``journal.json``), so a reader can tell whether it is exact: it
is, while that snapshot is still the one on disk and the log beside it is empty. Otherwise
(an older altar's run, a run killed after appending to its log, a run going on, a summary a
power cut lost: it is not fsynced) the reader falls back to loading the journal. A summary
that cannot be written costs nothing but speed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from altar.execution.atomic import atomic_write

if TYPE_CHECKING:
    from altar.execution.state.journal import Journal

__all__ = ["SUMMARY_FORMAT", "SUMMARY_NAME", "read_summary", "write_summary"]

SUMMARY_NAME = "summary.json"
SUMMARY_FORMAT = "altar-run-summary/1"
_READ_LIMIT = 64 * 1024


def _identity(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def write_summary(journal: Journal) -> None:
    """Write the summary of ``journal`` as its snapshot on disk is now (OSError if it cannot)."""
    from altar.execution.run.budget import RetryBudget
    from altar.execution.state.runs import ordered_counts, row_state  # runs imports the journal

    budget = RetryBudget()  # unused without a poll

    data = {
        "format": SUMMARY_FORMAT,
        "snapshot": _identity(os.stat(journal.path)),
        "plan": journal.plan_source,
        "backend": journal.backend_type,
        "finished": journal.finished,
        "created_at": journal.created_at,
        "counts": ordered_counts(row_state(r, None, budget) for r in journal.tasks.values()),
    }
    # not fsynced: a summary a power cut lost or emptied fails read_summary's checks, and the
    # reader loads the journal instead (the journal's snapshot is what is durable)
    atomic_write(journal.run_dir / SUMMARY_NAME, json.dumps(data).encode(), durable=False)


def read_summary(run_dir: Path, *, journal_name: str, log_name: str) -> dict[str, Any] | None:
    """The run's summary if it is exact for the journal on disk now, else None."""
    try:
        with open(run_dir / SUMMARY_NAME, "rb") as f:
            data = json.loads(f.read(_READ_LIMIT))
        snapshot = _identity(os.stat(run_dir / journal_name))
        log = run_dir / log_name
        log_size = log.stat().st_size if log.exists() else 0
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != SUMMARY_FORMAT:
        return None
    if data.get("snapshot") != snapshot or log_size:
        return None  # the snapshot was replaced since, or changes wait in the log
    if not isinstance(data.get("counts"), dict):
        return None
    return data
