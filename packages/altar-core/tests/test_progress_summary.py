"""Bounded progress for large plans (issue 24): counts every few seconds, task lines to a log."""

from __future__ import annotations

import io

from altar.execution.run import progress
from altar.execution.run.progress import (
    PROGRESS_LOG,
    SUMMARY_INTERVAL_S,
    SUMMARY_THRESHOLD,
    ProgressPrinter,
)
from altar.execution.run.runner import RunEvent


def events(n: int) -> list[RunEvent]:
    """Two per task (submitted, succeeded) over ``n`` seconds, and one failure in the middle."""
    found = []
    for i in range(n):
        counts = {"succeeded": i, "pending": 1, "queued": n - i - 1}
        found.append(
            RunEvent("submitted", f"t{i} submitted (x)", f"t{i}", counts=counts, elapsed_s=float(i))
        )
        kind, text = (
            ("failed", f"t{i} failed: exit_1")
            if i == n // 2
            else ("succeeded", f"t{i} succeeded in 1.0s")
        )
        found.append(RunEvent(kind, text, f"t{i}", counts=counts, elapsed_s=i + 0.5))
    return found


def test_a_large_plan_prints_counts_and_failures_and_logs_every_task_line(tmp_path):
    n = SUMMARY_THRESHOLD + 50
    stream = io.StringIO()
    printer = ProgressPrinter(stream, total=n, live=False, task_log=tmp_path / PROGRESS_LOG)
    for event in events(n):
        printer(event)
    printer.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) <= n / SUMMARY_INTERVAL_S + 2  # was 2 per task
    assert sum("failed: exit_1" in line for line in lines) == 1  # the failure still prints
    assert all(" of 250; " in line for line in lines if "failed" not in line)
    logged = (tmp_path / PROGRESS_LOG).read_text().splitlines()
    assert len(logged) == 2 * n - 1  # every task line but the printed failure
    assert "t7 submitted (x)" in logged[14]


def test_a_small_plan_prints_every_task_line(tmp_path):
    n = SUMMARY_THRESHOLD
    stream = io.StringIO()
    printer = ProgressPrinter(stream, total=n, live=False, task_log=tmp_path / PROGRESS_LOG)
    for event in events(n):
        printer(event)
    printer.close()
    assert len(stream.getvalue().splitlines()) == 2 * n
    assert not (tmp_path / PROGRESS_LOG).exists()


def test_the_task_log_stops_at_its_bound_and_then_logs_the_summaries(tmp_path, monkeypatch):
    monkeypatch.setattr(progress, "TASK_LOG_LINES", 100)
    n = SUMMARY_THRESHOLD + 50
    for live in (False, True):
        log = tmp_path / f"{live}.log"
        stream = io.StringIO()
        printer = ProgressPrinter(stream, total=n, live=live, task_log=log)
        for event in events(n):
            printer(event)
        printer.close()
        logged = log.read_text().splitlines()
        assert logged[99].endswith("t49 succeeded in 1.0s")  # the first 100 task lines
        assert logged[100].startswith("(more than 100 per-task lines: only summaries follow;")
        summaries = logged[101:]
        assert summaries
        assert all(" of 250; " in line for line in summaries)
        assert len(summaries) <= n / SUMMARY_INTERVAL_S
        assert "failed: exit_1" in stream.getvalue()  # a failure still prints
