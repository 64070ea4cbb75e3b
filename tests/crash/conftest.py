"""The crash-consistency tests' harness (``crashkit``) and the summary of their counts.

``crashkit`` is a plain package beside the tests; under ``--import-mode=importlib`` a test
module cannot import its neighbours, so this directory goes on ``sys.path`` once here.
The counts each crash test records (``record_property("crash_counts", ...)``) are printed in
the terminal summary, also when the tests ran in xdist workers.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

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
