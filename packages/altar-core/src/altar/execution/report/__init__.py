"""``altar report RUN``: one self-contained HTML file picturing a run.

:func:`build_report` (the model, from the journal and the event log) and :func:`render_html`
(the page) are pure; :func:`write_report` reads a run directory and writes the file.
"""

from __future__ import annotations

import time
from pathlib import Path

from altar.execution.atomic import atomic_write
from altar.execution.report.events import EVENTS_NAME, EventRecorder, read_events
from altar.execution.report.grouped import REPORT_GROUP_THRESHOLD
from altar.execution.report.html import render_html
from altar.execution.report.model import Report, build_report
from altar.execution.state.journal import Journal
from altar.execution.state.views import group_threshold

__all__ = [
    "EVENTS_NAME",
    "REPORT_GROUP_THRESHOLD",
    "EventRecorder",
    "Report",
    "build_report",
    "read_events",
    "render_html",
    "write_report",
]

REPORT_NAME = "report.html"


def write_report(run_dir: Path, output: Path | None = None) -> tuple[Path, Report]:
    """Render ``run_dir``'s report to ``output`` (default ``run_dir/report.html``)."""
    journal = Journal.load(run_dir)
    report = build_report(
        journal, read_events(run_dir), now=time.time() if not journal.finished else None
    )
    target = output or Path(run_dir) / REPORT_NAME
    page = render_html(report, group_above=group_threshold(REPORT_GROUP_THRESHOLD))
    atomic_write(target, page.encode(), mode=0o644)
    return target, report
