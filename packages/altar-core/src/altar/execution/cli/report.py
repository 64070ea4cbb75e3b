"""``altar report RUN_DIR [--output FILE] [--json]``: write the run's HTML report."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TextIO

from altar.execution.errors import AltarError
from altar.execution.report import REPORT_GROUP_THRESHOLD, write_report
from altar.execution.state.journal import Journal
from altar.execution.state.views import group_threshold

__all__ = ["add_arguments", "cmd_report"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument(
        "--output",
        "-o",
        metavar="FILE",
        help="where to write the page (default: RUN_DIR/report.html)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print {path, bytes, tasks, counts, interruptions, grouped}",
    )


def cmd_report(args: argparse.Namespace, out: TextIO) -> int:
    run_dir = Path(args.run_dir)
    Journal.load(run_dir)  # a clear error for a directory that is not a run
    output = Path(args.output) if args.output else None
    if output is not None and output.is_dir():
        raise AltarError(
            f"--output {output} is a directory; name a file, e.g. {output / 'report.html'}"
        )
    try:
        path, report = write_report(run_dir, output)
    except OSError as error:
        where = f"--output {output}" if output is not None else str(run_dir / "report.html")
        raise AltarError(
            f"cannot write the report to {where}: {error.strerror or error}; "
            "name a writable file with --output"
        ) from error
    size = path.stat().st_size
    grouped = len(report.tasks) > group_threshold(REPORT_GROUP_THRESHOLD)
    if args.json:
        data = {
            "path": str(path),
            "bytes": size,
            "tasks": len(report.tasks),
            "counts": dict(report.counts),
            "interruptions": len(report.interruptions),
            "grouped": grouped,
        }
        out.write(json.dumps(data, indent=2) + "\n")
    else:
        how = ", grouped" if grouped else ""
        out.write(f"wrote {path} ({len(report.tasks)} tasks{how}, {size / 1024:.0f} KiB)\n")
    return 0
