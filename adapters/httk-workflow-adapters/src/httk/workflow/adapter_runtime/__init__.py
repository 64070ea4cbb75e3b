"""The maintained adapter implementation every packaged ``adapter`` dispatcher executes.

``python3 -m httk.workflow.adapter_runtime REQUEST.json`` reads one request, performs the
operation it names for the bundle's ``kind`` (``local``, ``local-slurm`` or ``ssh-slurm``),
prints exactly one result document, and exits 0 — also for a refusal. A request it cannot
understand is a crash: one line on stderr and exit status 2.
"""

from __future__ import annotations

import os
import sys

from . import jsontext

# Typing names only: importing typing costs every adapter call start-up time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

BATCH_DIRECTORY = ".httk-workflow/batch"
BATCH_DIRECTIVES: tuple[tuple[str, str], ...] = (
    ("account", "--account"),
    ("partition", "--partition"),
    ("time_limit", "--time"),
    ("nodes", "--nodes"),
    ("cpus_per_task", "--cpus-per-task"),
    ("reservation", "--reservation"),
)
SUPPORTED_KINDS: tuple[str, ...] = ("local", "local-slurm", "ssh-slurm")
METADATA_FILE = "remote.json"
RESULT_FORMAT = "httk-computer-result"
FORMAT_VERSION = 1

__all__ = ["BATCH_DIRECTIVES", "BATCH_DIRECTORY", "SUPPORTED_KINDS", "main", "run_isolated"]


def _emit(document: Mapping[str, Any]) -> None:
    sys.stdout.write(jsontext.dumps(document) + "\n")


def _success(operation: str, values: Mapping[str, Any]) -> None:
    _emit(
        {
            **values,
            "format": RESULT_FORMAT,
            "format_version": FORMAT_VERSION,
            "operation": operation,
            "ok": True,
        }
    )


def _refuse(operation: str, message: str, reason: str | None = None) -> None:
    document = {
        "error": message,
        "format": RESULT_FORMAT,
        "format_version": FORMAT_VERSION,
        "operation": operation,
        "ok": False,
    }
    if reason is not None:
        # An addition to the contract's refusal document: what kind of refusal it is.
        document["refusal"] = reason
    _emit(document)


def adapter_kind(request: Mapping[str, Any]) -> str | None:
    """The bundle's ``kind``, read from ``adapter_dir``; absent or empty → ``None``."""
    directory = request.get("adapter_dir")
    if not isinstance(directory, str) or not directory:
        return None
    path = os.path.join(directory, METADATA_FILE)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as handle:
        metadata = jsontext.loads(handle.read())
    if not isinstance(metadata, dict):
        raise ValueError(f"adapter JSON must be an object: {path}")
    kind = metadata.get("kind")
    return kind if isinstance(kind, str) and kind else None


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    if len(arguments) != 1:
        print("adapter dispatcher expects one REQUEST.json path", file=sys.stderr)
        return 2
    try:
        with open(arguments[0], encoding="utf-8") as handle:
            request = jsontext.loads(handle.read())
    except (OSError, ValueError) as exc:
        print(f"adapter dispatcher: {exc}", file=sys.stderr)
        return 2
    operation = request.get("operation") if isinstance(request, dict) else None
    if not isinstance(operation, str) or not operation:
        print("adapter request must carry a nonempty string operation", file=sys.stderr)
        return 2
    try:
        kind = adapter_kind(request) or "local"
        if kind not in SUPPORTED_KINDS:
            _refuse(
                operation,
                f"adapter kind {kind!r} is not implemented; the packaged operations support "
                "local, local-slurm, ssh-slurm - refusing",
            )
            return 0
        from .operations import Refusal, dispatch

        try:
            values = dispatch(kind, operation, request)
        except Refusal as refusal:
            _refuse(operation, str(refusal), refusal.reason)
            return 0
    except (OSError, RuntimeError, ValueError, KeyError) as exc:
        print(f"adapter {operation}: {exc}", file=sys.stderr)
        return 2
    _success(operation, values)
    return 0


def run_isolated() -> None:
    """:func:`main`, for the dispatcher's isolated start (``python -I -S``), then exit at once.

    Once the result is written nothing is left to do: without ``site`` no hook is loaded,
    the runtime registers no atexit handler and has reaped every command it waited for.
    Leaving through ``os._exit`` skips the interpreter's finalization, which otherwise
    costs about a millisecond a call, a tenth of a bare interpreter's whole run.
    """
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
