"""The operator CLI: ``httk-workflow remote …`` and ``httk-workflow transfer …``.

The same command tree as upstream's ``httk workflow remote|transfer``, under its own
console script so it never collides with httk-core's ``httk`` (see docs/httk/cli.md).
Every failure is reported on stderr (``PROG: MESSAGE``) with exit status 2.

The contract's command tree is kept in one place so it reads as the reference does; the
operator commands are in :mod:`.operator_cli`, the ``transfer`` commands in
:mod:`.transfer_cli`, terminal handling in :mod:`._console`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn, TextIO

from .__about__ import __version__
from ._console import (
    Terminated,
    error_lines,
    terminating_like_interrupt,
    warnings_as_lines,
)
from .bundles import NO_PROJECT, add_remote, resolve_remote
from .constants import MAINTAINED_TEMPLATES
from .describe import describe_remote, remove_remote
from .errors import BundleError
from .legacy import import_v1_remote
from .run import run_adapter
from .settings import parse_assignments, persist_settings, unset_settings

PROG = "httk-workflow"
REMOTE_ACTIONS = (
    "list",
    "add",
    "configure",
    "install",
    "import-v1",
    "show",
    "remove",
    "doctor",
    "queue",
    "disconnect",
)
TRANSFER_ACTIONS = ("status", "start-manager", "push", "pull", "invoke")
MANAGER_ACTIONS = ("list", "cancel")
REMOTE_STATUS_COMMAND = ("httk", "workflow", "workspace", "status")
REMOTE_MANAGER_COMMAND = ("httk", "workflow", "manager", "run")
_ENVELOPE = frozenset({"format", "format_version", "operation", "ok"})

Handler = Callable[[argparse.Namespace], int]


class CLIError(ValueError):
    """A mistake on the command line, reported like any other error."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line like every other error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see: {self.prog} --help)\n")


def _positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if not number > 0:
        raise argparse.ArgumentTypeError("must be positive")
    return number


def _out() -> TextIO:
    return sys.stdout


def _print_json(document: object) -> None:
    _out().write(json.dumps(document, indent=2, sort_keys=True) + "\n")


def _print_values(result: Mapping[str, Any]) -> None:
    for key in sorted(result):
        if key in _ENVELOPE or key == "diagnostics":
            continue
        value = result[key]
        shown = " ".join(str(item) for item in value) if isinstance(value, list) else value
        if isinstance(shown, bool):
            shown = "yes" if shown else "no"
        _out().write(f"{key:<22}{shown}\n")


def _interactive(args: argparse.Namespace) -> bool:
    return not getattr(args, "non_interactive", False) and sys.stdin.isatty()


# --- remote -----------------------------------------------------------------------------


def _remote_list_rows(args: argparse.Namespace) -> int:
    from .operator_cli import _remote_list as with_kind_and_validity

    return with_kind_and_validity(args)


def _remote_add(args: argparse.Namespace) -> int:
    template = args.template
    if template is None:
        if not _interactive(args):
            raise CLIError("missing required value 'adapter template' in non-interactive operation")
        answer = input(f"adapter template ({', '.join(MAINTAINED_TEMPLATES)}) [local]: ").strip()
        template = answer or "local"
    try:
        bundle = add_remote(
            args.name, template=template, global_scope=args.global_scope, project=args.project
        )
    except FileExistsError as exists:
        raise CLIError(f"remote {args.name!r} already exists: {exists}") from None
    except BundleError as error:
        if str(error) != NO_PROJECT:
            raise
        # The message stays as it is; the next line says how to get a project.
        raise CLIError(
            f"{error}\nmake this directory a project with `httk project init`, or add the "
            "remote for every project with --global"
        ) from None
    if args.json:
        _print_json({"name": args.name, "template": template, "bundle": str(bundle)})
    else:
        _out().write(f"{bundle}\n")
        sys.stderr.write(_next_steps(args.name, template))
    return 0


def _next_steps(name: str, template: str) -> str:
    """What to run after ``remote add`` (stderr: stdout is the bundle path, as before)."""
    configure = f"{PROG} remote configure {name}"
    first = (
        f"{configure} --set host=HOST --set workspace=PATH (the login node and its workspace)"
        if template == "ssh-slurm"
        else f"{configure} --set workspace=PATH (where its jobs run)"
    )
    return (
        f"next: {first}; then {PROG} remote install {name} (checks httk there and creates "
        f"the workspace), {PROG} remote doctor {name}, and push jobs with "
        f"{PROG} transfer send {name} JOB_ID...\n"
    )


def _remote_configure(args: argparse.Namespace) -> int:
    from .operator_cli import secret_settings

    target = resolve_remote(args.remote, project=args.project)
    settings = parse_assignments(args.set)
    settings.update(secret_settings(args))
    unset = list(getattr(args, "unset", None) or [])
    clash = sorted(set(unset) & set(settings))
    if clash:
        raise CLIError(f"{', '.join(clash)}: both set and unset")
    if unset and not settings:
        # Removing needs no check by the adapter: nothing new has to work.
        removed = unset_settings(target.bundle, target.queue, unset)
        if args.json:
            _print_json({"queue": target.queue, "unset": removed})
        else:
            for where, keys in removed.items():
                for key in keys:
                    _out().write(f"unset {key} (from {where})\n")
        return 0
    result = run_adapter(
        target.bundle,
        args.action,
        {"queue": target.queue, "settings": settings},
        timeout=args.adapter_timeout,
    )
    if args.action == "configure" and settings:
        _, credentials_file, secrets = persist_settings(target.bundle, target.queue, settings)
        if credentials_file is not None:
            print(
                f"stored {', '.join(secrets)} for queue {target.queue} in {credentials_file}; "
                "values there are excluded from signed project manifests",
                file=sys.stderr,
            )
    if args.action == "configure" and unset:
        result["unset"] = unset_settings(target.bundle, target.queue, unset)
    if args.json:
        _print_json(result)
    else:
        _print_values(result)
    return 0


def _remote_import(args: argparse.Namespace) -> int:
    bundle = import_v1_remote(
        args.source, name=args.name, global_scope=args.global_scope, project=args.project
    )
    if args.json:
        _print_json({"bundle": str(bundle)})
    else:
        _out().write(f"{bundle}\n")
    return 0


def _show_text(description: Mapping[str, Any]) -> None:
    valid = "yes" if description["valid"] else f"no: {description['problem']}"
    rows = [
        ("name", description["name"]),
        ("scope", description["scope"]),
        ("bundle", description["bundle"]),
        ("kind", description["kind"] or "-"),
        ("adapter_version", description["adapter_version"]),
        ("valid", valid),
        ("default_queue", description["default_queue"]),
        ("timeout_seconds", description["timeout_seconds"]),
        ("required_binaries", ", ".join(map(str, description["required_binaries"])) or "-"),
        ("credentials_file", description["credentials_file"] or "-"),
    ]
    for label, value in rows:
        _out().write(f"{label:<22}{value}\n")
    for queue, detail in description["queues"].items():
        _out().write(f"queue {queue}\n")
        for key in sorted(detail["settings"]):
            _out().write(f"  {key}={detail['settings'][key]}\n")
        for key in detail["credential_keys"]:
            _out().write(f"  {key}=<credential>\n")


def _remote_show(args: argparse.Namespace) -> int:
    description = describe_remote(args.name, project=args.project)
    if args.json:
        _print_json(description)
    else:
        _show_text(description)
    return 0


def _remote_remove(args: argparse.Namespace) -> int:
    if not args.force:
        if not _interactive(args):
            raise CLIError(f"removing the remote {args.name!r} without a terminal requires --force")
        if input(
            f"remove the remote {args.name!r} and its credentials? [y/N] "
        ).strip().lower() not in {
            "y",
            "yes",
        }:
            raise CLIError("not removed")
    result = remove_remote(args.name, project=args.project)
    if args.json:
        _print_json(result)
    else:
        _out().write(f"removed {result['name']} ({result['scope']}) {result['bundle']}\n")
    return 0


# --- transfer ---------------------------------------------------------------------------


def _common(parser: argparse.ArgumentParser, *, timeout: bool = False) -> None:
    parser.add_argument("--json", action="store_true", help="print the result as a JSON document")
    if timeout:
        parser.add_argument(
            "--adapter-timeout",
            type=_positive_float,
            metavar="SECONDS",
            help="override the bundle's timeout_seconds for this operation",
        )


def _remote_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("remote", metavar="REMOTE", help="the remote as NAME or NAME:QUEUE")


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    from .operator_cli import add_secret_options, register  # it imports this module
    from .transfer_cli import (  # it imports this module
        _transfer_invoke,
        _transfer_move,
        _transfer_start_manager,
        _transfer_status,
    )

    parser = _Parser(
        prog=prog, description="Manage httk-workflow remote adapters and drive their operations."
    )
    parser.add_argument("--version", action="version", version=f"{prog} {__version__}")
    parser.add_argument(
        "--project",
        metavar="DIR",
        help="start project discovery here instead of the current directory",
    )
    groups = parser.add_subparsers(dest="group", metavar="GROUP")

    remote = groups.add_parser("remote", help="add, configure, inspect and remove remotes")
    remote.set_defaults(group_parser=remote)
    actions = remote_actions = remote.add_subparsers(dest="action", metavar="ACTION")

    p = actions.add_parser("list", help="list remotes of the project and the global scope")
    _common(p)
    p.set_defaults(handler=_remote_list_rows)

    p = actions.add_parser("add", help="add a remote from a maintained template")
    p.add_argument("name", help="the new remote's name")
    p.add_argument("--template", choices=MAINTAINED_TEMPLATES, help="the maintained kind to copy")
    p.add_argument(
        "--global",
        dest="global_scope",
        action="store_true",
        help="add to the global scope instead of the project",
    )
    p.add_argument("--non-interactive", action="store_true", help="never prompt")
    _common(p)
    p.set_defaults(handler=_remote_add)

    for name, helptext, set_help in (
        (
            "configure",
            "check settings with the adapter, then store them",
            "a queue setting (repeatable); unknown keys are stored as credentials",
        ),
        (
            "install",
            "check (or, with bootstrap=pip, arrange) httk on the target; make the workspace",
            "a pending setting passed to the adapter (repeatable); nothing is stored",
        ),
    ):
        p = actions.add_parser(name, help=helptext)
        _remote_arg(p)
        p.add_argument("--set", action="append", metavar="KEY=VALUE", help=set_help)
        add_secret_options(p)
        if name == "configure":
            p.add_argument(
                "--unset",
                action="append",
                metavar="KEY",
                help="remove a setting or credential of the queue (repeatable)",
            )
        _common(p, timeout=True)
        p.set_defaults(handler=_remote_configure)

    p = actions.add_parser("import-v1", help="import an httk v1 computer definition")
    p.add_argument("source", help="the v1 definition directory")
    p.add_argument("--name", help="the remote's name (default: the directory name)")
    p.add_argument(
        "--global", dest="global_scope", action="store_true", help="import into the global scope"
    )
    _common(p)
    p.set_defaults(handler=_remote_import)

    p = actions.add_parser("show", help="describe a remote; credential values are never shown")
    p.add_argument("name", help="the remote's name")
    _common(p)
    p.set_defaults(handler=_remote_show)

    p = actions.add_parser("remove", help="delete a remote bundle and its credentials")
    p.add_argument("name", help="the remote's name")
    p.add_argument("--force", action="store_true", help="do not ask for confirmation")
    _common(p)
    p.set_defaults(handler=_remote_remove)

    transfer = groups.add_parser("transfer", help="run operations on a remote")
    transfer.set_defaults(group_parser=transfer)
    actions = transfer.add_subparsers(dest="action", metavar="ACTION")

    p = actions.add_parser("status", help="report the remote workspace's status")
    _remote_arg(p)
    p.add_argument("--remote-workspace", metavar="WS", help="the workspace on the remote")
    _common(p, timeout=True)
    p.set_defaults(handler=_transfer_status)

    p = actions.add_parser("start-manager", help="start task managers on the remote")
    _remote_arg(p)
    p.add_argument("--remote-workspace", metavar="WS", help="the workspace on the remote")
    p.add_argument("--workers", type=int, help="workers per manager (default: the queue's)")
    p.add_argument("--count", type=int, default=1, help="how many managers to start")
    _common(p, timeout=True)
    p.set_defaults(handler=_transfer_start_manager)

    for name, helptext in (
        ("push", "copy a tree or file to the remote"),
        ("pull", "copy a tree or file from the remote"),
    ):
        p = actions.add_parser(name, help=helptext)
        _remote_arg(p)
        p.add_argument("source", help="where the data is now")
        p.add_argument("destination", help="where it must end up")
        p.add_argument(
            "--file",
            action="append",
            metavar="RELPATH",
            help="transfer only this path relative to SOURCE (repeatable)",
        )
        p.add_argument(
            "--files-from",
            metavar="LIST",
            help="a file listing relative paths to transfer, one per line",
        )
        p.add_argument(
            "--directory",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="whether SOURCE's contents are transferred (default: inferred)",
        )
        p.add_argument(
            "--progress",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="show rsync's progress (default: when stderr is a terminal)",
        )
        _common(p, timeout=True)
        p.set_defaults(handler=_transfer_move)

    p = actions.add_parser("invoke", help="run one command on the remote: invoke REMOTE -- ARGV...")
    _remote_arg(p)
    p.add_argument("--cwd", help="the directory to run it in")
    _common(p, timeout=True)
    p.set_defaults(handler=_transfer_invoke)

    register(remote_actions, groups)
    return parser


def main(argv: Sequence[str] | None = None, *, prog: str = PROG) -> int:
    parser = build_parser(prog)
    words = list(sys.argv[1:] if argv is None else argv)
    # Everything after the first "--" is a command for `transfer invoke`, never options;
    # argparse cannot express that for a subcommand, so it is split off here.
    command: list[str] | None = None
    if "--" in words:
        split = words.index("--")
        words, command = words[:split], words[split + 1 :]
    args = parser.parse_args(words)
    from .transfer_cli import _transfer_invoke

    if command is not None and getattr(args, "handler", None) is not _transfer_invoke:
        parser.error("'--' is only used by: transfer invoke REMOTE -- ARGV...")
    args.command = command
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        (getattr(args, "group_parser", None) or parser).print_help()
        return 0
    try:
        with terminating_like_interrupt(), warnings_as_lines(prog):
            return handler(args)
    except (OSError, ValueError, RuntimeError, TimeoutError) as exc:
        print(f"{prog}: {error_lines(str(exc)) or type(exc).__name__}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except Terminated as terminated:
        print(f"{prog}: terminated", file=sys.stderr)
        return 128 + terminated.signum
