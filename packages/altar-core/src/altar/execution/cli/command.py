"""The ``altar`` command: run plans, inspect and cancel runs, verify digests, compare backends.

Exit status: 0 success, 1 a task failed (or a verification/comparison found a difference),
2 a usage or configuration error. A user error is one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import os
import signal
import sys
import time
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from altar.execution.cli.parser import UsageError, build_parser
from altar.execution.errors import (
    AltarError,
    BackendCallError,
    BackendUnavailableError,
    PlanError,
    RegistryError,
    RunStoppedError,
)
from altar.execution.registry import create_backend, default_registry
from altar.execution.run.routed import moved_line, transfer_summary
from altar.execution.state.bulk import collector_paused, skip_collection_at_exit

# Each command imports what it runs on (the runner, the journal, plans, asyncio, JSON) when it
# runs: `altar backends` and `altar --help` must not pay for the rest (issue 24, start-up).
if TYPE_CHECKING:
    from altar.execution.backend import ExecutionBackend
    from altar.execution.cache.settings import CacheSettings
    from altar.execution.plans.plan import Plan
    from altar.execution.run.progress import ProgressPrinter

__all__ = ["main"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
# SIGTERM and SIGHUP stop a run like Ctrl-C; the exit status is 128 + the signal: 143 and 129
#: Longest pause between polls; the first comes after the backend's own ``poll_interval_s``
#: and the pause doubles while nothing changes (a backend may lower the cap: its
#: ``max_poll_interval_s``).
MAX_POLL_INTERVAL_S = 5.0


# -- helpers ----------------------------------------------------------------------------


def _new_dir(kind: str, plan_path: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path(".altar") / kind / f"{Path(plan_path).stem}-{stamp}-{os.urandom(2).hex()}"


def _backend_for(
    plan: Plan, backend_type: str | None, overrides: Sequence[tuple[str, Any]]
) -> tuple[ExecutionBackend, dict[str, Any]]:
    from altar.execution.plans.plan import resolve_path_options

    if plan.routing is not None:  # named [backends.NAME]: see altar.execution.run.routed
        from altar.execution.run.routed import routed_backend

        return routed_backend(plan, backend_type, overrides, _backend_for)
    name = backend_type or plan.backend_type
    if not name:
        raise PlanError(
            f"{plan.source}: backend.type: the plan names no backend; add [backend] with "
            'type = "local" or pass --backend'
        )
    options = dict(plan.backend_options) if name == plan.backend_type else {}
    try:
        if options:  # the plan's own options: relative paths are relative to the plan
            options = resolve_path_options(options, default_registry.get(name), plan.base_dir)
        options.update(dict(overrides))
        try:
            backend = create_backend(name, options, source=f"{plan.source}: backend.options")
        except PlanError as error:
            raise _blame_command_line(error, name, options, overrides, plan.source) from error
    except RegistryError as error:
        if backend_type:  # named on the command line: the message says it all
            raise
        raise type(error)(f"{plan.source}: backend.type: {error}") from error
    return backend, options


def _blame_command_line(
    error: PlanError,
    name: str,
    options: dict[str, Any],
    overrides: Sequence[tuple[str, Any]],
    source: str,
) -> PlanError:
    """``error`` blamed on ``--option KEY=VALUE`` when the bad value came from the command line."""
    from altar.execution.cli.resume import option_text

    prefix, text = f"{source}: backend.options", str(error)
    for key, value in overrides:
        if text.startswith(f"{prefix}.{key}: "):
            return PlanError(
                f"--option {option_text(key, value)}: {text[len(prefix) + len(key) + 3 :]}"
            )
    if overrides and text.startswith(f"{prefix}: backend {name!r} rejected its options"):
        given = {key for key, _ in overrides}
        planned = {key: value for key, value in options.items() if key not in given}
        try:  # the plan's options alone: if they pass, the command line's value is the bad one
            create_backend(name, planned, source=prefix)
        except AltarError:
            return error
        flags = " ".join(f"--option {option_text(key, value)}" for key, value in overrides)
        return PlanError(f"{flags}: {text[len(prefix) + 2 :]}")
    return error


def _line(error: BaseException) -> str:
    """An error as one terminal-safe line: its text may come from a provider or a task."""
    from altar.execution.run.progress import terminal_safe

    return terminal_safe(" ".join(str(error).split()))


def _print_json(data: Any, out: TextIO) -> None:
    import json

    out.write(json.dumps(data, indent=2, sort_keys=False) + "\n")


# -- commands ---------------------------------------------------------------------------


def _cmd_backends(args: argparse.Namespace, out: TextIO) -> int:
    report = default_registry.discover()
    rows: list[dict[str, Any]] = []
    for entry in default_registry.entries():
        error = report.failures.get(entry.name)
        rows.append(
            {
                "name": entry.name,
                "distribution": entry.distribution,
                "version": entry.version,
                "entry_point": entry.value,
                "healthy": error is None,
                "error": str(error) if error else None,
            }
        )
    if args.json:
        _print_json(rows, out)
        return EXIT_OK
    if not rows:
        out.write("no execution backends are installed; pip install altar-backend-local\n")
        return EXIT_OK
    width = max(len(row["name"]) for row in rows)
    dist_width = max(len(f"{row['distribution'] or '-'} {row['version'] or ''}") for row in rows)
    for row in rows:
        dist = f"{row['distribution'] or '-'} {row['version'] or ''}".strip()
        state = "ok" if row["healthy"] else f"unavailable: {row['error']}"
        out.write(f"{row['name']:<{width}}  {dist:<{dist_width}}  {state}\n")
    return EXIT_OK


async def _cmd_run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    import asyncio

    from altar.execution.cli.check import print_check, print_error_json
    from altar.execution.plans.checking import check_plan
    from altar.execution.plans.plan import load_plan
    from altar.execution.report import EventRecorder
    from altar.execution.run.closing import format_outcome, write_result_json
    from altar.execution.run.progress import (
        PROGRESS_LOG,
        QUIET,
        WARNINGS,
        ProgressPrinter,
        format_summary,
        use_colour,
    )
    from altar.execution.run.retrying import reopen_failed_in
    from altar.execution.run.routed import named_max_parallel
    from altar.execution.run.runner import run_plan
    from altar.execution.state.journal import Journal

    try:
        plan = load_plan(args.plan)
        backend, options = _backend_for(plan, args.backend, args.option)
    except AltarError as error:
        if not (args.dry_run and args.json):
            raise
        return print_error_json(error, args.backend, out)
    if args.dry_run:  # before any run directory exists
        return print_check(await check_plan(plan, backend), plan, args.json, out, err)
    run_dir = Path(args.run_dir) if args.run_dir else _new_dir("runs", args.plan)
    if run_dir.exists() and not run_dir.is_dir():
        raise UsageError(
            f"--run-dir {run_dir} is a file, not a directory; name a new directory to start a "
            "run or an existing run directory to resume it"
        )
    resuming = Journal.exists(run_dir)
    if args.retry_failed:
        if not resuming:
            raise UsageError("--retry-failed needs --run-dir naming an existing run")
        reopened = reopen_failed_in(run_dir, plan)
        if not args.quiet:
            err.write(
                f"altar: rerunning {len(reopened)} failed or skipped task(s)"
                + (
                    f": {', '.join(reopened[:10])}{', ...' if len(reopened) > 10 else ''}"
                    if reopened
                    else ""
                )
                + "\n"
            )
    live = err.isatty() and not args.quiet
    # --json on a log (CI), or --quiet: the result is what is asked for, but warnings must
    # still reach the log
    only = QUIET if args.quiet else WARNINGS if args.json and not live else None
    earlier = _earlier_s(run_dir) if resuming else 0.0
    printer = ProgressPrinter(
        err,
        total=len(plan.tasks),
        live=live,
        only=only,
        earlier_s=earlier,
        task_log=run_dir / PROGRESS_LOG,  # a large plan's per-task lines (SUMMARY_THRESHOLD)
    )
    verb = "resuming" if resuming else "running"
    if not args.quiet:  # the summary names the run directory
        err.write(
            f"altar: {verb} {len(plan.tasks)} task(s) of {plan.source} on {backend.name}; "
            f"run directory {run_dir}\n"
        )
    # the report's event log (staging throughput, collection times) rides along
    show = EventRecorder(run_dir, printer)
    ticker = asyncio.create_task(_tick(printer)) if live else None
    stopped_by = _stop_on_signals()
    try:
        result = await run_plan(
            plan,
            backend,
            run_dir=run_dir,
            max_parallel=named_max_parallel(plan, args.backend, args.max_parallel),
            max_retries=args.max_retries,
            max_provider_retries=args.max_provider_retries,
            cache=_cache_choice(args, plan),
            on_event=show,
            backend_options=options,
            max_poll_interval_s=MAX_POLL_INTERVAL_S,
        )
    except (asyncio.CancelledError, KeyboardInterrupt):
        printer.close()
        how = f"stopped by {stopped_by[0].name}" if stopped_by else "interrupted"
        err.write(f"altar: {how}; {_in_flight(run_dir)}. Resume with: {_resume(args, run_dir)}\n")
        return 128 + stopped_by[0].value if stopped_by else EXIT_INTERRUPTED
    except BackendCallError as error:  # it says "resume": give the command to paste
        printer.close()
        err.write(f"altar: {_line(error)}\n")
        if not args.quiet:
            err.write(f"altar: resume with: {_resume(args, run_dir)}\n")
        return EXIT_FAILED
    finally:
        _restore_signals()
        if ticker is not None:
            ticker.cancel()
        printer.close()
    moved = transfer_summary(backend)  # a routed run: bytes moved between backends
    if args.json:
        write_result_json(result, out, {"transfers": moved} if moved else {})
    elif args.quiet:
        out.write(format_summary(result, earlier_s=earlier) + "\n")
    else:
        labels = {task.id: task.spec.labels for task in plan.tasks}
        out.write(format_outcome(result, labels, colour=use_colour(out)) + "\n")
        out.write("\n" + format_summary(result, earlier_s=earlier) + "\n")
        if moved:
            out.write(moved_line(moved) + "\n")
    return EXIT_OK if result.ok else EXIT_FAILED


_STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _stop_on_signals() -> list[signal.Signals]:
    """Make SIGTERM and SIGHUP stop the run like Ctrl-C; the list names the first one received.

    Like Ctrl-C they cancel the run, which gives its submits in flight a grace period to
    return (so their handles are journaled); a second signal ends the grace.
    """
    import asyncio

    received: list[signal.Signals] = []
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()

    def stop(signum: signal.Signals) -> None:
        if not received:
            received.append(signum)
        if main is not None:
            main.cancel()

    for signum in _STOP_SIGNALS:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signum, stop, signum)
    return received


def _restore_signals() -> None:
    import asyncio

    loop = asyncio.get_running_loop()
    for signum in _STOP_SIGNALS:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.remove_signal_handler(signum)


async def _tick(printer: ProgressPrinter) -> None:
    import asyncio

    while True:
        await asyncio.sleep(1.0)
        printer.tick()


def _earlier_s(run_dir: Path) -> float:
    """The time a run spent in the processes before this one, from its journal: its creation
    to the last thing recorded (an attempt's times or the journal's last save)."""
    from altar.execution.state.journal import Journal

    try:
        journal = Journal.load(run_dir)
    except AltarError:
        return 0.0
    stamps = [journal.updated_at]
    for record in journal.tasks.values():
        for attempt in record.attempts:
            stamps += [
                t
                for t in (attempt.submitted_at, attempt.started_at, attempt.finished_at)
                if t is not None
            ]
    return max(0.0, max(stamps) - journal.created_at) if journal.created_at else 0.0


def _cache_choice(args: argparse.Namespace, plan: Plan) -> CacheSettings | bool:
    """``--no-cache``: none; ``--cache DIR``: that store, keyed as the plan says; else the plan."""
    from altar.execution.cache.settings import CacheSettings

    if args.no_cache:
        return False
    if args.cache:
        settings = plan.cache or CacheSettings()
        return dataclasses.replace(settings, store_dir=Path(args.cache).expanduser())
    return True


def _resume(args: argparse.Namespace, run_dir: Path) -> str:
    """The command that resumes this run: every flag a resume must repeat (this command's,
    and those an earlier start of the run recorded in its journal)."""
    from altar.execution.cli.resume import flag_words, resume_command
    from altar.execution.state.journal import Journal

    flags: dict[str, int] = {}
    with contextlib.suppress(AltarError, OSError):
        flags.update(Journal.load(run_dir).flags)
    given = (
        ("max_parallel", args.max_parallel),
        ("max_retries", args.max_retries),
        ("max_provider_retries", getattr(args, "max_provider_retries", None)),
    )
    for name, value in given:
        if value is not None:
            flags[name] = value
    extra = flag_words(flags)
    if getattr(args, "cache", None):
        extra += ["--cache", str(args.cache)]
    if getattr(args, "no_cache", False):
        extra += ["--no-cache"]
    return resume_command(
        str(args.plan),
        str(run_dir),
        backend=args.backend,
        options=args.option,
        extra=extra,
    )


def _in_flight(run_dir: Path) -> str:
    """What still runs at the provider after the run stopped, from its journal, in words."""
    from altar.execution.state.journal import Journal
    from altar.execution.state.records import IN_DOUBT, PENDING, RUNNING, SUBMITTING

    try:
        tasks = Journal.load(run_dir).tasks.values()
    except (AltarError, OSError):
        return "no task was submitted"  # stopped before its journal existed
    running = sum(1 for record in tasks if record.state in (PENDING, RUNNING))
    doubtful = sum(
        1 for r in tasks if r.attempts and r.attempts[-1].state in (SUBMITTING, IN_DOUBT)
    )
    parts = []
    if running:
        parts.append(f"{running} submitted task(s) keep running")
    if doubtful:
        parts.append(f"{doubtful} whose submit did not answer may be running")
    return "; ".join(parts) if parts else "no submitted task is running"


def _journal_backend(run_dir: Path) -> ExecutionBackend:
    from altar.execution.state.journal import Journal

    journal = Journal.load(run_dir)
    return create_backend(
        journal.backend_type, journal.backend_options, source=f"{run_dir}: backend.options"
    )


# -- entry point ------------------------------------------------------------------------


#: Commands that read a run or a plan and end: the cyclic collector waits until they do.
_READING_COMMANDS = frozenset({"status", "runs", "report", "check"})


def _dispatch(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.command == "backends":
        return _cmd_backends(args, out)
    if args.command == "verify":
        from altar.execution.cli.verify import cmd_verify

        return cmd_verify(args, out)
    if args.command == "verify-script":
        from altar.execution.digests.digest import verify_files_script

        out.write(verify_files_script(trust_records=not args.no_trust_records))
        return EXIT_OK
    from altar.execution.cli import logs as cli_logs
    from altar.execution.cli import report as cli_report
    from altar.execution.cli import runs as cli_runs
    from altar.execution.cli import status as cli_status

    if args.command == "runs":
        return cli_runs.cmd_runs(args, out)
    if args.command == "report":
        return cli_report.cmd_report(args, out)
    if args.command == "cache":
        from altar.execution.cli import cache as cli_cache

        return cli_cache.cmd_cache(args, out)
    import asyncio

    from altar.execution.cli.cancel import cmd_cancel
    from altar.execution.cli.check import cmd_check
    from altar.execution.cli.compare import cmd_compare

    handlers: dict[
        str, Callable[[argparse.Namespace, TextIO, TextIO], Coroutine[Any, Any, int]]
    ] = {
        "run": _cmd_run,
        "status": cli_status.cmd_status,
        "logs": cli_logs.cmd_logs,
        "check": functools.partial(cmd_check, backend_for=_backend_for),
        "cancel": cmd_cancel,
        "compare": cmd_compare,
    }
    return asyncio.run(handlers[args.command](args, out, err))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``altar`` command line; returns the exit status."""
    out, err = sys.stdout, sys.stderr
    skip_collection_at_exit()
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command in _READING_COMMANDS:
            with collector_paused():  # short-lived, and building one object per task
                return _dispatch(args, out, err)
        return _dispatch(args, out, err)
    except UsageError as error:
        err.write(f"altar: error: {_line(error)}\n")
        return EXIT_USAGE
    except (RunStoppedError, BackendUnavailableError) as error:
        err.write(f"altar: {_line(error)}\n")
        return EXIT_FAILED
    except AltarError as error:
        for problem in getattr(error, "problems", None) or [error]:
            err.write(f"altar: error: {_line(problem)}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        err.write("altar: interrupted\n")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # `altar ... | head`: stop quietly, and keep Python from complaining at exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FAILED
