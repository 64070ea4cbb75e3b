"""``altar runs [DIR] [--json]``: run directories under ``.altar/runs`` (or DIR), newest first."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TextIO

from altar.execution.errors import AltarError
from altar.execution.run.progress import format_counts, terminal_safe
from altar.execution.state.runs import format_started, list_runs

__all__ = ["add_arguments", "cmd_runs"]

DEFAULT_ROOT = Path(".altar") / "runs"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "root",
        metavar="DIR",
        nargs="?",
        help=f"where the run directories are (default: {DEFAULT_ROOT})",
    )
    p.add_argument("--json", action="store_true", help="print JSON")


def cmd_runs(args: argparse.Namespace, out: TextIO) -> int:
    if args.root is not None and not Path(args.root).is_dir():
        # a typo must not read as "no runs": the default place may be missing (no run yet)
        what = "is not a directory" if Path(args.root).exists() else "does not exist"
        raise AltarError(f"{args.root} {what}; name a directory of run directories")
    args.root = args.root or str(DEFAULT_ROOT)
    runs = list_runs(Path(args.root))
    if args.json:
        out.write(json.dumps([run.to_dict() for run in runs], indent=2) + "\n")
        return 0
    if not runs:
        out.write(f"no runs under {args.root}\n")
        return 0
    header = ("RUN", "STATE", "BACKEND", "STARTED", "TASKS", "PLAN")
    rows = [
        (
            terminal_safe(str(run.run_dir)),
            run.state,
            terminal_safe(run.backend) or "-",
            format_started(run.started_at),
            format_counts(run.counts) if not run.error else terminal_safe(run.error),
            terminal_safe(run.plan) or "-",
        )
        for run in runs
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    for row in [header, *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)]
        out.write("  ".join([*cells, row[-1]]).rstrip() + "\n")
    return 0
