"""``httk-workflow transfer status|start-manager|push|pull|invoke``: one adapter operation each."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ._console import write_exact
from .bundles import resolve_remote
from .cli import (
    REMOTE_MANAGER_COMMAND,
    REMOTE_STATUS_COMMAND,
    CLIError,
    _out,
    _print_json,
)
from .run import run_adapter


def _workspace(args: argparse.Namespace, bundle: Path, queue: str) -> str:
    from .settings import queue_settings

    workspace = args.remote_workspace or queue_settings(bundle, queue).get("workspace")
    if not isinstance(workspace, str) or not workspace:
        raise CLIError(
            "remote workspace is missing; use --remote-workspace or configure queue workspace=PATH"
        )
    return workspace


def _report_command(args: argparse.Namespace, result: Mapping[str, Any]) -> int:
    if args.json:
        _print_json(result)
        return 0
    write_exact(_out(), str(result.get("stdout", "")))
    write_exact(sys.stderr, str(result.get("stderr", "")))
    code = result.get("returncode", 0)
    return code if isinstance(code, int) and 0 <= code < 256 else 1


def _transfer_status(args: argparse.Namespace) -> int:
    target = resolve_remote(args.remote, project=args.project)
    workspace = _workspace(args, target.bundle, target.queue)
    request = {"queue": target.queue, "argv": [*REMOTE_STATUS_COMMAND, workspace, "--json"]}
    result = run_adapter(target.bundle, "status", request, timeout=args.adapter_timeout)
    return _report_command(args, result)


def _transfer_start_manager(args: argparse.Namespace) -> int:
    if args.count < 1:
        raise CLIError("--count must be a positive integer")
    if args.workers is not None and args.workers < 1:
        raise CLIError("--workers must be a positive integer")
    target = resolve_remote(args.remote, project=args.project)
    workspace = _workspace(args, target.bundle, target.queue)
    argv = [*REMOTE_MANAGER_COMMAND, workspace]
    if args.workers is not None:
        argv += ["--workers", str(args.workers)]
    request = {"queue": target.queue, "argv": argv, "workspace": workspace, "count": args.count}
    result = run_adapter(target.bundle, "start-manager", request, timeout=args.adapter_timeout)
    if args.json:
        _print_json(result)
    elif "job_ids" in result:
        # Only what the contract fixes is relied on; a custom adapter may report less.
        ids = [str(job_id) for job_id in result["job_ids"]]
        _out().write(
            f"submitted {result.get('count', len(ids))} manager job(s): {', '.join(ids)}\n"
        )
        if "script" in result:
            _out().write(f"script {result['script']}\n")
    else:
        pids = ", ".join(str(pid) for pid in result.get("pids", []))
        _out().write(f"started {result.get('count')} manager process(es): {pids}\n")
    return 0


def _transfer_move(args: argparse.Namespace) -> int:
    target = resolve_remote(args.remote, project=args.project)
    request: dict[str, Any] = {
        "queue": target.queue,
        "source": args.source,
        "destination": args.destination,
    }
    files = list(args.file or [])
    if args.files_from:
        text = Path(args.files_from).read_text(encoding="utf-8")
        files += [line for line in text.splitlines() if line]
    if args.file is not None or args.files_from:
        request["files"] = files
    if args.directory is not None:
        request["directory"] = args.directory
    progress = sys.stderr.isatty() if args.progress is None else args.progress
    on_stderr = None
    if progress and not args.json:
        request["progress"] = True

        def on_stderr(data: bytes) -> None:
            sys.stderr.flush()
            sys.stderr.buffer.write(data)
            sys.stderr.buffer.flush()

    result = run_adapter(
        target.bundle, args.action, request, timeout=args.adapter_timeout, on_stderr=on_stderr
    )
    if args.json:
        _print_json(result)
    elif "path" not in result:
        raise RuntimeError(f"adapter {args.action} reported no path")
    else:
        _out().write(f"{result['path']}\n")
    return 0


def _transfer_invoke(args: argparse.Namespace) -> int:
    argv = list(args.command or [])
    if not argv:
        raise CLIError(
            "transfer invoke needs a command: httk-workflow transfer invoke REMOTE -- ARGV..."
        )
    target = resolve_remote(args.remote, project=args.project)
    request: dict[str, Any] = {"queue": target.queue, "argv": argv}
    if args.cwd is not None:
        request["cwd"] = args.cwd
    result = run_adapter(target.bundle, "invoke", request, timeout=args.adapter_timeout)
    return _report_command(args, result)


# --- parser -----------------------------------------------------------------------------
