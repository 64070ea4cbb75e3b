"""``altar check PLAN [--backend TYPE] [--option K=V]... [--json]`` (and ``run --dry-run``).

Exit status 0 when nothing would fail, 2 with one ``altar: error:`` line per problem.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from altar.execution.backend import ExecutionBackend
from altar.execution.checking import CheckReport, check_plan, format_check
from altar.execution.plan import Plan, load_plan
from altar.execution.progress import terminal_safe

__all__ = ["cmd_check", "print_check"]

BackendFor = Callable[
    [Plan, str | None, Sequence[tuple[str, Any]]], tuple[ExecutionBackend, dict[str, Any]]
]


async def cmd_check(
    args: argparse.Namespace, out: TextIO, err: TextIO, *, backend_for: BackendFor
) -> int:
    plan = load_plan(args.plan)
    backend, _ = backend_for(plan, args.backend, args.option)
    return print_check(await check_plan(plan, backend), plan, args.json, out, err)


def print_check(report: CheckReport, plan: Plan, as_json: bool, out: TextIO, err: TextIO) -> int:
    if as_json:
        out.write(json.dumps(report.to_dict(), indent=2) + "\n")
    else:
        for problem in report.problems:
            err.write(f"altar: error: {terminal_safe(problem)}\n")
        if report.ok:
            out.write(terminal_safe(format_check(report, plan.source)) + "\n")
    return 0 if report.ok else 2
