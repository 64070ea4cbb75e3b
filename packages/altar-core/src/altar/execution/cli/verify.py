"""``altar verify FILE... --digest sha256:...``: check files against digests, records first."""

from __future__ import annotations

import argparse
from typing import TextIO

from altar.execution.cli.command import EXIT_FAILED, EXIT_OK
from altar.execution.cli.parser import UsageError
from altar.execution.errors import DigestMismatchError
from altar.execution.types import is_sha256_digest


def cmd_verify(args: argparse.Namespace, out: TextIO) -> int:
    from altar.execution.digests.digest import verify_file_digest

    digests: list[str] = args.digest
    if len(digests) not in (1, len(args.files)):
        raise UsageError(
            f"give one --digest for all files or one per file; got {len(digests)} digest(s) "
            f"for {len(args.files)} file(s)"
        )
    for digest in digests:
        if not is_sha256_digest(digest):
            raise UsageError(f"--digest must be sha256:<64 lowercase hex>, got {digest!r}")
    if len(digests) == 1:
        digests = digests * len(args.files)
    status = EXIT_OK
    for path, digest in zip(args.files, digests, strict=True):
        try:
            hashed = verify_file_digest(path, digest, trust_record=not args.no_trust_records)
        except DigestMismatchError as error:
            out.write(f"{path}: FAILED ({error})\n")
            status = EXIT_FAILED
            continue
        except OSError as error:  # e.g. an I/O error while reading it
            out.write(f"{path}: FAILED (cannot read it: {error.strerror or error})\n")
            status = EXIT_FAILED
            continue
        out.write(f"{path}: OK\n" if hashed else f"{path}: OK (verification record)\n")
    return status
