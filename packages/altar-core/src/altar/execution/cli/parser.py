"""The ``altar`` command line's parser: every command and its flags, usage errors as one line."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Sequence
from typing import Any, NoReturn

from altar.execution.__about__ import __version__


class UsageError(Exception):
    """A command-line mistake: printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """Usage errors as :class:`UsageError`. ``arguments="module"`` names the module whose
    ``add_arguments`` adds this command's arguments, imported the first time the command is
    parsed: building the parser imports no command's module."""

    def __init__(self, *args: Any, arguments: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._arguments = arguments

    def parse_known_args(  # type: ignore[override]  # typeshed's overloads; same signature
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self._arguments is not None:
            importlib.import_module(self._arguments).add_arguments(self)
            self._arguments = None
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def _option(text: str) -> tuple[str, Any]:
    """``key=value``; the value is read as a TOML value if it is one (2, true, "x"), else text."""
    import tomllib

    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        parsed: Any = tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        parsed = value
    return key.strip(), parsed


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be zero or more, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="altar",
        description="Run portable container task plans on any Altar execution backend.",
    )
    parser.add_argument("--version", action="version", version=f"altar {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True

    p = commands.add_parser("backends", help="list installed backends, healthy or why not")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = commands.add_parser("run", help="run a plan (resume it with the same --run-dir)")
    p.add_argument("plan", metavar="PLAN", help="plan file (.toml or .json)")
    p.add_argument(
        "--backend",
        metavar="NAME",
        help="a [backends.NAME] of the plan, or a backend type, to run every task on",
    )
    p.add_argument(
        "--option",
        metavar="KEY=VALUE",
        type=_option,
        action="append",
        default=[],
        help="backend option (repeatable); overrides the plan's [backend] options",
    )
    p.add_argument("--max-parallel", metavar="N", type=_positive, help="tasks in flight at most")
    p.add_argument("--max-retries", metavar="N", type=_non_negative, help="retries per task")
    p.add_argument(
        "--max-provider-retries",
        metavar="N",
        type=_non_negative,
        help="retries per task after the provider ended an attempt (preempted, node lost, ...)",
    )
    p.add_argument("--run-dir", metavar="DIR", help="run directory (default: a new one)")
    cached = p.add_mutually_exclusive_group()
    cached.add_argument(
        "--cache", metavar="DIR", help="use the task cache store in DIR (even without [cache])"
    )
    cached.add_argument("--no-cache", action="store_true", help="never use the task cache")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="check the plan, backend options, inputs, images and resources; run nothing",
    )
    p.add_argument(
        "--retry-failed",
        action="store_true",
        help="with --run-dir: rerun the run's failed tasks and the dependants they skipped",
    )
    p.add_argument(
        "--quiet", "-q", action="store_true", help="only warnings on stderr, the summary on stdout"
    )

    p = commands.add_parser("check", help="check a plan against its backend; run nothing")
    p.add_argument("plan", metavar="PLAN", help="plan file (.toml or .json)")
    p.add_argument(
        "--backend",
        metavar="NAME",
        help="a [backends.NAME] of the plan, or a backend type, to run every task on",
    )
    p.add_argument(
        "--option",
        metavar="KEY=VALUE",
        type=_option,
        action="append",
        default=[],
        help="backend option (repeatable); overrides the plan's [backend] options",
    )
    p.add_argument("--json", action="store_true", help="print JSON")

    commands.add_parser(
        "runs", help="list run directories, newest first", arguments="altar.execution.cli.runs"
    )

    commands.add_parser(
        "status",
        help="show a run's tasks (polls the backend)",
        arguments="altar.execution.cli.status",
    )

    commands.add_parser(
        "logs", help="print what a task's attempt wrote", arguments="altar.execution.cli.logs"
    )

    commands.add_parser(
        "report",
        help="write a run's self-contained HTML report",
        arguments="altar.execution.cli.report",
    )

    commands.add_parser(
        "cache", help="list, verify or prune the task cache", arguments="altar.execution.cli.cache"
    )

    p = commands.add_parser("cancel", help="cancel a run's unfinished tasks")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = commands.add_parser("verify", help="check files against a sha256 digest")
    p.add_argument("files", metavar="FILE", nargs="+")
    p.add_argument(
        "--digest",
        metavar="sha256:HEX",
        action="append",
        required=True,
        help="expected digest: once for all files, or once per file in order",
    )
    p.add_argument(
        "--no-trust-records",
        action="store_true",
        help="hash every file even if a current verification record vouches for it",
    )

    p = commands.add_parser("verify-script", help="print the POSIX sh digest verifier")
    p.add_argument("--no-trust-records", action="store_true", help="the script hashes every file")

    p = commands.add_parser(
        "compare", help="run a plan on two backends, or read two runs, and diff the results"
    )
    p.add_argument(
        "targets",
        metavar="PLAN | RUN_DIR RUN_DIR",
        nargs="+",
        help="a plan to run on --backend and --reference, or two run directories to compare",
    )
    p.add_argument("--backend", metavar="TYPE", help="backend under test (with a PLAN)")
    p.add_argument("--reference", metavar="TYPE", help="reference backend (with a PLAN)")
    p.add_argument("--option", metavar="KEY=VALUE", type=_option, action="append", default=[])
    p.add_argument(
        "--reference-option", metavar="KEY=VALUE", type=_option, action="append", default=[]
    )
    p.add_argument("--workdir", metavar="DIR", help="where both runs go (default: a new one)")
    p.add_argument("--json", action="store_true", help="print JSON")
    return parser
