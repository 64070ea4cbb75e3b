"""``altar cancel RUN_DIR [--json]``: cancel a run's open tasks, or ask its running process to."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TextIO

from altar.execution.cli.command import EXIT_FAILED, EXIT_OK, _journal_backend, _print_json
from altar.execution.errors import CancelIncompleteError


async def cmd_cancel(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from altar.execution.run.runner import cancel_run, run_status
    from altar.execution.state.journal import Journal, lock_is_held

    run_dir = Path(args.run_dir)
    Journal.load(run_dir)  # a clear error for a directory that is not a run
    backend = None if lock_is_held(run_dir) else _journal_backend(run_dir)
    still_open: list[str] = []
    try:
        outcome = await cancel_run(run_dir, backend)
    except CancelIncompleteError as error:
        if not args.json:
            raise
        outcome, still_open = "incomplete", error.task_ids
    cancelled = 0
    if outcome != "requested":
        result = await run_status(run_dir)
        cancelled = sum(1 for task in result.tasks if task.status == "cancelled")
    if args.json:
        report = {
            "run_dir": str(run_dir),
            "outcome": outcome,
            "cancelled": cancelled,
            "still_open": still_open,
        }
        _print_json(report, out)
    elif outcome == "requested":
        out.write(f"asked the altar process driving {run_dir} to cancel its tasks\n")
    else:
        out.write(f"cancelled {cancelled} task(s) of {run_dir}\n")
    return EXIT_FAILED if still_open else EXIT_OK
