"""``altar check PLAN [--backend TYPE] [--option K=V]... [--json]`` (and ``run --dry-run``).

Exit status 0 when nothing would fail, 2 with one ``altar: error:`` line per problem.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from altar.execution.backend import ExecutionBackend
from altar.execution.errors import AltarError
from altar.execution.plans.checking import CheckReport, check_plan, format_check
from altar.execution.plans.plan import Plan, load_plan
from altar.execution.run.progress import terminal_safe

__all__ = ["cmd_check", "error_problems", "plan_lines", "print_check", "print_error_json"]

BackendFor = Callable[
    [Plan, str | None, Sequence[tuple[str, Any]]], tuple[ExecutionBackend, dict[str, Any]]
]


async def cmd_check(
    args: argparse.Namespace, out: TextIO, err: TextIO, *, backend_for: BackendFor
) -> int:
    try:
        plan = load_plan(args.plan)
        backend, _ = backend_for(plan, args.backend, args.option)
    except AltarError as error:
        if not args.json:
            raise
        return print_error_json(error, args.backend, out)
    return print_check(await check_plan(plan, backend), plan, args.json, out, err)


def error_problems(error: AltarError) -> list[str]:
    """Every problem an error stands for, each one line (a PlanError may carry several)."""
    problems: list[str] = list(getattr(error, "problems", None) or [str(error)])
    return [terminal_safe(" ".join(problem.split())) for problem in problems]


def print_error_json(error: AltarError, backend: str | None, out: TextIO) -> int:
    """``check --json`` on a plan or backend error: the report, with the problems; exit 2."""
    report = CheckReport(tasks=0, backend=backend or "", problems=error_problems(error))
    data = report.to_dict()
    data.update(sweeps=[], outputs_dir=None)  # the same keys as a report of a plan read
    out.write(json.dumps(data, indent=2) + "\n")
    return 2


def print_check(report: CheckReport, plan: Plan, as_json: bool, out: TextIO, err: TextIO) -> int:
    if as_json:
        data = report.to_dict()
        data["sweeps"] = [sweep.to_dict() for sweep in plan.sweeps]
        data["outputs_dir"] = plan.outputs_dir
        if plan.routing is not None:
            from altar.execution.plans.routing import routing_dict

            data["routing"] = routing_dict(plan)
        out.write(json.dumps(data, indent=2) + "\n")
    else:
        for problem in report.problems:
            err.write(f"altar: error: {terminal_safe(problem)}\n")
        if report.ok:
            out.write(terminal_safe(format_check(report, plan.source)) + "\n")
            for line in plan_lines(plan):
                out.write(terminal_safe(line) + "\n")
    return 0 if report.ok else 2


def plan_lines(plan: Plan) -> list[str]:
    """What the plan expands to: a line per sweep, and where its outputs go if it says."""
    lines = [f"sweep {sweep.describe()}" for sweep in plan.sweeps]
    if plan.outputs_dir is not None:
        lines.append(f"outputs: relative output uris go below outputs_dir = {plan.outputs_dir!r}")
    if plan.routing is not None:
        from altar.execution.plans.routing import routing_lines

        lines += routing_lines(plan)
    return lines
