"""``altar compare PLAN --backend A --reference B`` or ``altar compare RUN_DIR RUN_DIR``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from altar.execution.cli import command
from altar.execution.cli.command import (
    EXIT_FAILED,
    EXIT_OK,
    _backend_for,
    _journal_backend,
    _new_dir,
    _print_json,
)
from altar.execution.cli.parser import UsageError
from altar.execution.errors import AltarError, BackendUnavailableError

if TYPE_CHECKING:
    from altar.execution.backend import ExecutionBackend
    from altar.execution.run.compare import ComparisonReport
    from altar.execution.run.results import RunEvent


def _compare_output(report: ComparisonReport, as_json: bool, out: TextIO) -> int:
    from altar.execution.run.progress import terminal_safe

    if as_json:
        _print_json(report.to_dict(), out)
    else:
        out.write(terminal_safe(report.format()) + "\n")
    return EXIT_OK if report.ok else EXIT_FAILED


async def _cmd_compare_runs(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``altar compare RUN_DIR RUN_DIR``: two runs' journals and outputs; nothing runs."""
    from altar.execution.run.compare import compare_runs
    from altar.execution.state.journal import Journal

    flags = (
        ("--backend", args.backend),
        ("--reference", args.reference),
        ("--option", args.option),
        ("--reference-option", args.reference_option),
        ("--workdir", args.workdir),
    )
    given = [flag for flag, value in flags if value]
    if given:
        raise UsageError(
            f"{', '.join(given)}: not used when comparing two run directories (they are for "
            "altar compare PLAN --backend TYPE --reference TYPE)"
        )
    backends: list[ExecutionBackend | None] = []
    for run_dir in args.targets:
        if not Journal.exists(Path(run_dir)):
            raise UsageError(
                f"{run_dir} is not a run directory (no journal); altar compare takes two run "
                "directories, or one plan with --backend and --reference"
            )
        try:  # only to ask for a failed task's log tail the journal did not keep
            backends.append(_journal_backend(Path(run_dir)))
        except (AltarError, BackendUnavailableError):
            backends.append(None)
    report = await compare_runs(args.targets[0], args.targets[1], backends=backends)
    return _compare_output(report, args.json, out)


async def cmd_compare(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from altar.execution.plans.plan import load_plan
    from altar.execution.run.compare import compare_backends
    from altar.execution.run.progress import ProgressPrinter

    if len(args.targets) == 2:
        return await _cmd_compare_runs(args, out, err)
    if len(args.targets) > 2:
        raise UsageError(
            "altar compare takes one plan (with --backend and --reference) or two run directories"
        )
    flags = (("--backend", args.backend), ("--reference", args.reference))
    missing = [flag for flag, value in flags if not value]
    if missing:
        raise UsageError(
            f"the following arguments are required to compare a plan on two backends: "
            f"{', '.join(missing)} (or give two run directories to compare existing runs)"
        )
    args.plan = args.targets[0]
    plan = load_plan(args.plan)
    backend, _ = _backend_for(plan, args.backend, args.option)
    reference, _ = _backend_for(plan, args.reference, args.reference_option)
    workdir = Path(args.workdir) if args.workdir else _new_dir("compare", args.plan)
    err.write(f"altar: comparing {backend.name} with {reference.name}; work directory {workdir}\n")
    printers = {
        side: ProgressPrinter(err, total=len(plan.tasks), live=False, prefix=f"[{side}] ")
        for side in ("backend", "reference")
    }

    def on_event(side: str, event: RunEvent) -> None:
        if not args.json:
            printers[side](event)

    report = await compare_backends(
        plan,
        backend,
        reference,
        workdir=workdir,
        on_event=on_event,
        max_poll_interval_s=command.MAX_POLL_INTERVAL_S,
    )
    return _compare_output(report, args.json, out)
