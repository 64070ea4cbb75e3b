"""Repo-wide tests: the terminal summary of the crash-consistency counts (tests/crash).

Each crash test records its counts with ``record_property("crash_counts", ...)``; they are
printed at the end of the session, also when the tests ran in xdist workers (the controller
sees every report). This lives here, not in ``tests/crash/``, because a controller started
with ``tests`` as its path (``scripts/test``) loads this conftest but not the subfolder's.
"""

from __future__ import annotations

import pytest

_COUNTS: list[tuple[str, str]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "call":
        return
    for name, value in report.user_properties:
        if name == "crash_counts":
            _COUNTS.append((report.nodeid, str(value)))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _COUNTS:
        return
    terminalreporter.section("crash consistency (issue 13)")
    for nodeid, text in _COUNTS:
        terminalreporter.write_line(nodeid)
        terminalreporter.write_line(text)
