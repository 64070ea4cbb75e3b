"""Digest checks named for transfers (staged inputs, collected outputs) and the shell verifier.

Split from :mod:`altar.execution.digests.digest`, which re-exports every name here; like it, this
module imports nothing outside the standard library, so model runtimes can use it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from altar.execution.digests.digest import StrPath, verify_file
from altar.execution.errors import DigestMismatchError, TransferIntegrityError

if TYPE_CHECKING:
    from altar.execution.types import Transfer

__all__ = [
    "input_label",
    "output_label",
    "require_digest_file",
    "verify_files_script",
    "verify_transfer_digest",
]


def input_label(transfer: Transfer) -> str:
    """How messages name a staged input: ``staged input '<uri>' ('<logical path>')``."""
    return f"staged input {transfer.uri!r} ({transfer.logical_path!r})"


def output_label(transfer: Transfer) -> str:
    """How messages name a collected output: ``output '<logical path>'``."""
    return f"output {transfer.logical_path!r}"


_transfer_label = input_label


def verify_transfer_digest(transfer: Transfer, path: StrPath, *, record: bool = False) -> None:
    """Always hash ``path`` against ``transfer.digest`` (no-op without one); never trust a record.

    This is where records are earned: pass ``record=True`` only for a copy the backend owns.
    """
    if transfer.digest is None:
        return
    try:
        verify_file(path, transfer.digest, label=_transfer_label(transfer), record=record)
    except TransferIntegrityError:
        raise
    except DigestMismatchError as error:
        raise TransferIntegrityError(*error.args) from error


def require_digest_file(transfer: Transfer, path: StrPath) -> None:
    """Refuse a digest-bearing transfer whose source is not a regular file."""
    if transfer.digest is not None and not os.path.lexists(path):
        raise TransferIntegrityError(
            f"{input_label(transfer)} at {os.fspath(path)!r} does not exist"
        )
    if transfer.digest is not None and not Path(path).is_file():
        raise TransferIntegrityError(
            f"{_transfer_label(transfer)} at {os.fspath(path)!r} is not a regular file; a "
            "transfer digest covers the bytes of one file, so ship a directory as an archive"
        )


# One POSIX sh program for BusyBox and GNU coreutils, kept as package data beside this module so
# shellcheck can read it (the tests run it on the file and pin its bytes). Arguments are
# "<64 hex>  <path>" lines (sha256sum -c form). Files are hashed through stdin and records read
# with the `read` builtin, so a path may hold spaces, quotes, backslashes, newlines or a leading
# '-'. A probe file made beside the record before the stat it records gives the filesystem clock.
_SCRIPT_FILE = "verify_files.sh"


def verify_files_script(*, trust_records: bool = True) -> str:
    """The digest check as a POSIX sh program for BusyBox or GNU coreutils.

    Run it as ``sh -c <program> <name> "<64 hex>  <path>" ...``. It checks every line, prints
    ``<path>: OK``, ``<path>: OK (verification record)`` or ``<path>: FAILED``, writes records
    under the same rules as :func:`verify_file`, and exits 1 if any line failed. With
    ``trust_records=False`` every file is hashed, and records are still written. Needs ``[``,
    ``printf``, ``read``, ``stat -L -c``, ``mktemp``, ``chmod``, ``date +%s``, ``mv``, ``rm`` and
    ``sha256sum``, all in BusyBox.
    """
    from importlib.resources import files  # only here: most callers never need the script

    template = files("altar.execution.digests").joinpath(_SCRIPT_FILE).read_bytes().decode("utf-8")
    return template.replace("@TRUST@", "1" if trust_records else "0", 1)
