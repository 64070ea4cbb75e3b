"""Content-addressed inputs: sha256 digests and verification records (standard library only).

A verified file carries a one-line record beside it, at ``<path>.sha256-verified``::

    verified-file/1 sha256:<64 hex> size=<bytes> mtime=<seconds> ctime=<seconds> inode=<number>

A record is accepted only while the file's current stat renders the same line, so rewriting,
replacing or truncating the file invalidates it. A record is written only after the file's
status-change second has passed (a same-second rewrite would otherwise be invisible) and only
if the file did not change while it was hashed. Accepting a record never reads the file.

This module is usable inside model runtimes: it imports nothing outside the standard library.
"""

from __future__ import annotations

import hashlib
import os
import stat as stat_module
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from altar.execution.errors import DigestMismatchError, TransferIntegrityError
from altar.execution.types import is_sha256_digest

if TYPE_CHECKING:
    from altar.execution.types import Transfer

__all__ = [
    "SHA256_PREFIX",
    "VERIFICATION_RECORD_FORMAT",
    "VERIFICATION_RECORD_SUFFIX",
    "CopyResult",
    "copy_and_verify",
    "has_verification_record",
    "parse_sha256_digest",
    "require_digest_file",
    "sha256_file",
    "verification_record_line",
    "verify_file",
    "verify_file_digest",
    "verify_files_script",
    "verify_transfer_digest",
    "write_verification_record",
]

SHA256_PREFIX = "sha256:"
VERIFICATION_RECORD_SUFFIX = ".sha256-verified"
VERIFICATION_RECORD_FORMAT = "verified-file/1"
_CHUNK = 1 << 20
_RECORD_READ_LIMIT = 512

StrPath = str | os.PathLike[str]


def parse_sha256_digest(value: object) -> str:
    """Return ``value`` if it is ``sha256:<64 lowercase hex>``, else raise ValueError."""
    if not is_sha256_digest(value):
        raise ValueError(f"expected sha256:<64 lowercase hex>, got {value!r}")
    assert isinstance(value, str)
    return value


def _hash_fd(fd: int) -> str:
    digest = hashlib.sha256()
    buffer = bytearray(_CHUNK)
    view = memoryview(buffer)
    while True:
        count = os.readv(fd, [buffer])
        if not count:
            break
        digest.update(view[:count])
    return SHA256_PREFIX + digest.hexdigest()


def sha256_file(path: StrPath) -> str:
    """The ``sha256:<hex>`` digest of a file's bytes."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return _hash_fd(fd)
    finally:
        os.close(fd)


def record_path(path: StrPath) -> str:
    """Where the verification record of ``path`` lives."""
    return os.fspath(path) + VERIFICATION_RECORD_SUFFIX


def verification_record_line(digest: str, st: os.stat_result) -> str:
    """The record line (without newline) for ``digest`` and a stat of the file."""
    return (
        f"{VERIFICATION_RECORD_FORMAT} {digest} size={st.st_size} mtime={int(st.st_mtime)} "
        f"ctime={int(st.st_ctime)} inode={st.st_ino}"
    )


def has_verification_record(path: StrPath, digest: str) -> bool:
    """True if ``path`` is a regular file whose record matches its current stat and ``digest``."""
    try:
        st = os.stat(path)
        if not stat_module.S_ISREG(st.st_mode):
            return False
        with open(record_path(path), "rb") as handle:
            raw = handle.read(_RECORD_READ_LIMIT)
    except OSError:
        return False
    line = raw.decode("ascii", errors="replace").removesuffix("\n")
    return line == verification_record_line(digest, st)


def write_verification_record(path: StrPath, digest: str, before: os.stat_result) -> bool:
    """Write a record for ``path`` if it is safe to; return whether one was written.

    ``before`` is the stat taken before hashing. Nothing is written if the file changed since,
    or if its status-change second is not yet over. Failures are swallowed: a record is an
    optimisation, never a reason to fail a check.
    """
    try:
        after = os.stat(path)
    except OSError:
        return False
    line = verification_record_line(digest, after)
    if line != verification_record_line(digest, before):
        return False
    if int(after.st_ctime) >= int(time.time()):
        return False
    target = record_path(path)
    tmp = f"{target}.{os.getpid()}.{uuid.uuid4().hex}.tmp"
    try:
        with open(tmp, "w", encoding="ascii") as handle:
            handle.write(line + "\n")
        os.replace(tmp, target)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return False
    return True


def _not_a_file_message(label: str, path: StrPath) -> str:
    return (
        f"{label} at {os.fspath(path)!r} is not a regular file; a sha256 digest covers the bytes "
        "of one file, so ship a directory as an archive"
    )


def verify_file(
    path: StrPath,
    expected: str,
    *,
    label: str = "resource",
    trust_record: bool = False,
    record: bool = False,
) -> bool:
    """Check ``path`` against ``expected``; return True if it was hashed, False if a record vouched.

    Raises ValueError for a malformed digest and DigestMismatchError for a mismatch, a missing
    file or a directory.
    """
    parse_sha256_digest(expected)
    if trust_record and has_verification_record(path, expected):
        return False
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as error:
        raise DigestMismatchError(_not_a_file_message(label, path)) from error
    try:
        before = os.fstat(fd)
        if not stat_module.S_ISREG(before.st_mode):
            raise DigestMismatchError(_not_a_file_message(label, path))
        actual = _hash_fd(fd)
    finally:
        os.close(fd)
    if actual != expected:
        raise DigestMismatchError(
            f"{label} at {os.fspath(path)!r} has digest {actual}; expected {expected}"
        )
    if record:
        write_verification_record(path, expected, before)
    return True


def verify_file_digest(
    path: StrPath, digest: str, *, trust_record: bool = True, record: bool = True
) -> bool:
    """Task-side check: accept a current record, or hash the file and record it.

    Returns True if the file was hashed, False if its record vouched for it. Raises
    TransferIntegrityError on a mismatch and ValueError for a malformed digest.
    """
    try:
        return verify_file(path, digest, label="file", trust_record=trust_record, record=record)
    except TransferIntegrityError:
        raise
    except DigestMismatchError as error:
        raise TransferIntegrityError(*error.args) from error


def _transfer_label(transfer: Transfer) -> str:
    return f"staged input {transfer.uri!r} ({transfer.logical_path!r})"


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
    if transfer.digest is not None and not Path(path).is_file():
        raise TransferIntegrityError(
            f"{_transfer_label(transfer)} at {os.fspath(path)!r} is not a regular file; a "
            "transfer digest covers the bytes of one file, so ship a directory as an archive"
        )


@dataclass(frozen=True)
class CopyResult:
    """What :func:`copy_and_verify` produced: the digest of the bytes and the final stat."""

    digest: str
    stat: os.stat_result


def copy_and_verify(
    source: StrPath,
    destination: StrPath,
    expected: str | None = None,
    *,
    label: str = "input",
) -> CopyResult:
    """Copy ``source`` to ``destination`` while hashing it, in one pass.

    The bytes go to a temporary file beside ``destination`` that is renamed into place only
    after the digest matched, so readers never see a partial or wrong file. On a mismatch the
    temporary file is removed and TransferIntegrityError raised; ``source`` is never modified
    or removed. A source that is not a regular file is refused like a mismatch.
    """
    if expected is not None:
        parse_sha256_digest(expected)
    destination = os.fspath(destination)
    try:
        src_fd = os.open(source, os.O_RDONLY)
    except OSError as error:
        if expected is not None:
            raise TransferIntegrityError(_not_a_file_message(label, source)) from error
        raise
    tmp = f"{destination}.{os.getpid()}.{uuid.uuid4().hex}.partial"
    try:
        src_stat = os.fstat(src_fd)
        if not stat_module.S_ISREG(src_stat.st_mode):
            raise TransferIntegrityError(_not_a_file_message(label, source))
        digest = hashlib.sha256()
        buffer = bytearray(_CHUNK)
        view = memoryview(buffer)
        dst_fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, src_stat.st_mode & 0o777)
        try:
            while True:
                count = os.readv(src_fd, [buffer])
                if not count:
                    break
                chunk = view[:count]
                digest.update(chunk)
                written = 0
                while written < count:
                    written += os.write(dst_fd, chunk[written:])
        finally:
            os.close(dst_fd)
        actual = SHA256_PREFIX + digest.hexdigest()
        if expected is not None and actual != expected:
            raise TransferIntegrityError(
                f"{label} at {os.fspath(source)!r} has digest {actual}; expected {expected}"
            )
        os.replace(tmp, destination)
        return CopyResult(actual, os.stat(destination))
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    finally:
        os.close(src_fd)


# One POSIX sh program. Arguments are "<64 hex>  <path>" lines (sha256sum -c form); the file
# is hashed through stdin so a path may hold spaces, quotes, backslashes or newlines.
_SCRIPT = r"""status=0
for line in "$@"; do
  hex="${line%%  *}"
  path="${line#*  }"
  if [ ! -f "$path" ]; then
    printf '%s: not a regular file; a transfer digest covers one file\n' "$path" >&2
    status=1
    continue
  fi
  record="$path.sha256-verified"
  format="verified-file/1 sha256:$hex size=%s mtime=%Y ctime=%Z inode=%i"
  before=$(stat -L -c "$format" -- "$path" 2>/dev/null)
  if TRUST && [ -n "$before" ] && [ -f "$record" ] \
      && [ "$(head -c 512 -- "$record" 2>/dev/null)" = "$before" ]; then
    printf '%s: OK (verification record)\n' "$path"
    continue
  fi
  actual=$(sha256sum < "$path") || actual=""
  actual="${actual%% *}"
  if [ "$actual" != "$hex" ]; then
    printf '%s: FAILED\n' "$path"
    printf '%s: sha256 is %s; expected %s\n' "$path" "${actual:-unreadable}" "$hex" >&2
    status=1
    continue
  fi
  printf '%s: OK\n' "$path"
  after=$(stat -L -c "$format" -- "$path" 2>/dev/null)
  ctime="${after##*ctime=}"
  ctime="${ctime%% *}"
  now=$(date +%s)
  if [ -n "$after" ] && [ "$after" = "$before" ] && [ "$ctime" -lt "$now" ] 2>/dev/null; then
    tmp="$record.${HOSTNAME:-host}.$$.tmp"
    if ! { printf '%s\n' "$after" > "$tmp" && mv -f -- "$tmp" "$record"; } 2>/dev/null; then
      rm -f -- "$tmp" 2>/dev/null
    fi
  fi
done
exit "$status"
"""


def verify_files_script(*, trust_records: bool = True) -> str:
    """The digest check as a POSIX sh program for BusyBox or GNU coreutils.

    Run it as ``sh -c <program> <name> "<64 hex>  <path>" ...``. It checks every line, prints
    ``<path>: OK``, ``<path>: OK (verification record)`` or ``<path>: FAILED``, writes records
    under the same rules as :func:`write_verification_record`, and exits 1 if any line failed.
    With ``trust_records=False`` every file is hashed, and records are still written.
    """
    return _SCRIPT.replace("TRUST", "true" if trust_records else "false", 1)
