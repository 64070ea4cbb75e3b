"""The operator commands beside the contract's: doctor, queues, unsetting, secrets from
stdin or the environment, manager jobs, and closing a multiplexed connection.

Registered into :mod:`.cli`'s parser by :func:`register`; each prints a human form and,
with ``--json``, one JSON document.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from typing import Any

from . import cli as _cli
from ._console import error_lines
from .bundles import check_remote_name, read_metadata, resolve_remote, split_remote
from .describe import find_bundle
from .doctor import as_documents, diagnose
from .run import run_adapter
from .settings import add_queue, parse_assignments, queue_settings, remove_queue

MANAGER_JOB_NAME = "httk-manager"
_SQUEUE_FIELDS = ("job_id", "state", "elapsed", "partition", "workdir")


# --- secrets that never touch argv ----------------------------------------------------------


def secret_settings(args: argparse.Namespace) -> dict[str, str]:
    """Values from ``--set-from-env KEY=VAR`` and ``--set-stdin KEY`` (ps and history see
    neither: only the variable's name or the key is on the command line)."""
    values: dict[str, str] = {}
    for assignment in getattr(args, "set_from_env", None) or []:
        key, variable = parse_assignments([assignment]).popitem()
        if variable not in os.environ:
            raise _cli.CLIError(f"--set-from-env {key}: environment variable {variable} is not set")
        values[key] = os.environ[variable]
    keys = getattr(args, "set_stdin", None) or []
    if len(keys) > 1:
        raise _cli.CLIError("--set-stdin reads one value; give it once")
    for key in keys:
        if sys.stdin.isatty():
            values[key] = getpass.getpass(f"{key}: ")
        else:
            line = sys.stdin.readline()
            values[key] = line[:-1] if line.endswith("\n") else line
        if not values[key]:
            raise _cli.CLIError(f"--set-stdin {key}: no value on standard input")
    return values


def add_secret_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set-from-env",
        action="append",
        metavar="KEY=VARIABLE",
        help="take KEY's value from an environment variable (repeatable)",
    )
    parser.add_argument(
        "--set-stdin",
        action="append",
        metavar="KEY",
        help="read KEY's value from standard input (a prompt without echo on a terminal)",
    )


# --- remote list / doctor / queue / disconnect ----------------------------------------------


def remote_rows(project: str | None) -> list[dict[str, Any]]:
    """``list_remotes`` rows with each bundle's kind and whether it validates."""
    from .bundles import list_remotes, validate_adapter_bundle

    rows: list[dict[str, Any]] = []
    for row in list_remotes(project):
        entry: dict[str, Any] = dict(row)
        try:
            kind = read_metadata(row["path"]).get("kind")
        except ValueError:
            kind = None
        entry["kind"] = kind if isinstance(kind, str) else None
        try:
            validate_adapter_bundle(row["path"])
            entry.update(valid=True, problem=None)
        except ValueError as exc:
            entry.update(valid=False, problem=str(exc))
        rows.append(entry)
    return rows


def _remote_list(args: argparse.Namespace) -> int:
    rows = remote_rows(args.project)
    if args.json:
        _cli._print_json(rows)
    elif not rows:
        _cli._out().write(
            "no remotes; add one with: httk-workflow remote add NAME --template local\n"
        )
    else:
        width = max(len(row["name"]) for row in rows) + 2
        kinds = max(len(str(row["kind"] or "-")) for row in rows) + 2
        for row in rows:
            valid = "valid" if row["valid"] else f"INVALID: {row['problem']}"
            _cli._out().write(
                f"{row['name']:<{width}}{row['scope']:<9}{row['kind'] or '-':<{kinds}}"
                f"{valid}  {row['path']}\n"
            )
    return 0


def _remote_doctor(args: argparse.Namespace) -> int:
    target = resolve_remote(args.remote, project=args.project)
    checks = diagnose(target, timeout=args.adapter_timeout)
    failed = any(check.ok is False for check in checks)
    if args.json:
        _cli._print_json(
            {
                "remote": target.name,
                "queue": target.queue,
                "ok": not failed,
                "checks": as_documents(checks),
            }
        )
    else:
        for check in checks:
            status = {True: "ok", False: "FAIL", None: "skip"}[check.ok]
            _cli._out().write(f"{status:<6}{check.check:<16}{error_lines(check.detail)}\n")
    return 1 if failed else 0


def _remote_queue(args: argparse.Namespace) -> int:
    check_remote_name(args.name)
    bundle, _ = find_bundle(args.name, project=args.project)
    if args.queue_action == "add":
        settings = parse_assignments(args.set)
        from .settings import split_settings

        persistable, secrets = split_settings(settings)
        if secrets:
            raise _cli.CLIError(
                f"{', '.join(sorted(secrets))}: credentials are stored with "
                f"remote configure {args.name}:{args.queue} once the queue exists"
            )
        add_queue(bundle, args.queue, persistable)
    else:
        remove_queue(bundle, args.queue)
    verb = "added" if args.queue_action == "add" else "removed"
    if args.json:
        _cli._print_json({"name": args.name, "queue": args.queue, verb: True})
    else:
        _cli._out().write(f"{verb} queue {args.queue} of {args.name}\n")
    return 0


def _remote_disconnect(args: argparse.Namespace) -> int:
    from httk.workflow.adapter_runtime.targets import close_masters

    name, queue = split_remote(args.remote)
    bundle, _ = find_bundle(name, project=args.project)
    if read_metadata(bundle).get("kind") != "ssh-slurm":
        raise _cli.CLIError(f"remote {name!r} is not an ssh-slurm remote: nothing to close")
    queues = read_metadata(bundle).get("queues") or {"default": {}}
    closed: list[str] = []
    for each in [queue] if queue else sorted(queues):
        settings = queue_settings(bundle, each)
        if settings.get("host"):
            closed += [path for path in close_masters(settings) if path not in closed]
    if args.json:
        _cli._print_json({"name": name, "closed": closed})
    else:
        _cli._out().write(f"closed {len(closed)} multiplexed connection(s) of {name}\n")
    return 0


# --- manager jobs ---------------------------------------------------------------------------


def _slurm_target(args: argparse.Namespace) -> Any:
    target = resolve_remote(args.remote, project=args.project)
    kind = read_metadata(target.bundle).get("kind")
    if kind not in {"local-slurm", "ssh-slurm"}:
        raise _cli.CLIError(f"manager jobs are Slurm jobs; remote {target.name!r} is kind {kind}")
    return target


def _invoke(args: argparse.Namespace, target: Any, argv: list[str]) -> dict[str, Any]:
    result = run_adapter(
        target.bundle,
        "invoke",
        {"queue": target.queue, "argv": argv},
        timeout=args.adapter_timeout,
    )
    if result.get("returncode") != 0:
        detail = str(result.get("stderr", "")).strip() or f"exit {result.get('returncode')}"
        raise RuntimeError(f"{argv[0]} failed on {target.name}: {detail}")
    return result


def manager_jobs(args: argparse.Namespace, target: Any) -> list[dict[str, str]]:
    """This user's pending and running manager jobs, as squeue reports them."""
    fmt = "%i|%T|%M|%P|%Z"
    argv = ["squeue", "--me", "--noheader", f"--name={MANAGER_JOB_NAME}", f"--format={fmt}"]
    result = _invoke(args, target, argv)
    jobs = []
    for line in str(result.get("stdout", "")).splitlines():
        parts = line.split("|", len(_SQUEUE_FIELDS) - 1)
        if len(parts) == len(_SQUEUE_FIELDS):
            jobs.append(dict(zip(_SQUEUE_FIELDS, parts, strict=True)))
    return jobs


def _manager_list(args: argparse.Namespace) -> int:
    target = _slurm_target(args)
    jobs = manager_jobs(args, target)
    if args.json:
        _cli._print_json(jobs)
    elif not jobs:
        _cli._out().write(f"no manager jobs of yours on {target.name}\n")
    else:
        for job in jobs:
            _cli._out().write(
                f"{job['job_id']:<10}{job['state']:<12}{job['elapsed']:<12}"
                f"{job['partition']:<12}{job['workdir']}\n"
            )
    return 0


def _manager_cancel(args: argparse.Namespace) -> int:
    if bool(args.job_ids) == args.all:
        raise _cli.CLIError("name the manager jobs to cancel, or give --all")
    target = _slurm_target(args)
    known = {job["job_id"] for job in manager_jobs(args, target)}
    if args.all:
        chosen = sorted(known)
    else:
        strangers = [job for job in args.job_ids if job not in known]
        if strangers:
            raise _cli.CLIError(
                f"not a pending or running manager job of yours: {', '.join(strangers)}"
            )
        chosen = list(args.job_ids)
    if chosen:
        _invoke(args, target, ["scancel", "--", *chosen])
    if args.json:
        _cli._print_json({"cancelled": chosen})
    else:
        _cli._out().write(f"cancelled {len(chosen)} manager job(s): {', '.join(chosen) or '-'}\n")
    return 0


# --- parser ---------------------------------------------------------------------------------


def register(remote_actions: Any, groups: Any) -> None:
    """Add the operator commands to the ``remote`` actions and a ``manager`` group."""
    p = remote_actions.add_parser(
        "doctor", help="check everything a remote needs, one line each; exit 1 on a failure"
    )
    _cli._remote_arg(p)
    _cli._common(p, timeout=True)
    p.set_defaults(handler=_remote_doctor)

    p = remote_actions.add_parser("queue", help="add or remove a queue of a remote")
    queue_actions = p.add_subparsers(dest="queue_action", metavar="ACTION", required=True)
    for action, helptext in (("add", "add an empty queue"), ("remove", "remove a queue")):
        q = queue_actions.add_parser(action, help=helptext)
        q.add_argument("name", help="the remote's name")
        q.add_argument("queue", help="the queue's name")
        if action == "add":
            q.add_argument("--set", action="append", metavar="KEY=VALUE", help="an initial setting")
        _cli._common(q)
        q.set_defaults(handler=_remote_queue)

    p = remote_actions.add_parser(
        "disconnect", help="close the multiplexed ssh connection(s) of a remote now"
    )
    _cli._remote_arg(p)
    _cli._common(p)
    p.set_defaults(handler=_remote_disconnect)

    manager = groups.add_parser("manager", help="list and cancel manager jobs on Slurm remotes")
    manager.set_defaults(group_parser=manager)
    actions = manager.add_subparsers(dest="action", metavar="ACTION")
    p = actions.add_parser("list", help="your pending and running manager jobs")
    _cli._remote_arg(p)
    _cli._common(p, timeout=True)
    p.set_defaults(handler=_manager_list)
    p = actions.add_parser("cancel", help="cancel manager jobs (only jobs named httk-manager)")
    _cli._remote_arg(p)
    p.add_argument("job_ids", nargs="*", metavar="JOB_ID", help="the jobs to cancel")
    p.add_argument("--all", action="store_true", help="cancel all your manager jobs there")
    _cli._common(p, timeout=True)
    p.set_defaults(handler=_manager_cancel)
