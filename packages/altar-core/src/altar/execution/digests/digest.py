"""Content-addressed inputs: sha256 digests and verification records (standard library only).

A verified file carries a one-line record beside it, at ``<path>.sha256-verified``::

    verified-file/1 sha256:<64 hex> size=<bytes> mtime=<seconds> ctime=<seconds> inode=<number>

A record is accepted only while the file's current stat renders the same line, so rewriting,
replacing or truncating the file invalidates it. Accepting a record never reads the file.

A record is written only if the file did not change while it was hashed and its status-change
second was already over, by the wall clock and by the filesystem's own clock, when hashing
began. The filesystem's clock is read from the ctime of the record's temporary file, so a
coarse kernel clock or a file server whose clock differs from ours cannot make a later
same-second rewrite invisible.

This module and :mod:`altar.execution.digests.copy` (the one-pass copy, ``copy_and_verify``,
which still imports from here) are usable inside model runtimes: they import nothing outside
the standard library. The shell verifier that must agree with them byte for byte is package
data, ``verify_files.sh`` beside this module.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat as stat_module
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from altar.execution.atomic import temp_path
from altar.execution.errors import DigestMismatchError, TransferIntegrityError
from altar.execution.types import is_sha256_digest

if TYPE_CHECKING:
    from altar.execution.digests.copy import CopyResult, copy_and_verify
    from altar.execution.digests.transfers import (
        input_label,
        output_label,
        require_digest_file,
        verify_files_script,
        verify_transfer_digest,
    )

__all__ = [
    "SHA256_PREFIX",
    "VERIFICATION_RECORD_FORMAT",
    "VERIFICATION_RECORD_SUFFIX",
    "CopyResult",
    "copy_and_verify",
    "has_verification_record",
    "input_label",
    "output_label",
    "parse_sha256_digest",
    "record_path",
    "recorded_digest",
    "require_digest_file",
    "sha256_file",
    "verification_record_line",
    "verify_file",
    "verify_file_digest",
    "verify_files",
    "verify_files_script",
    "verify_transfer_digest",
    "write_verification_record",
]

SHA256_PREFIX = "sha256:"

_TRANSFER_NAMES = frozenset(
    {
        "input_label",
        "output_label",
        "require_digest_file",
        "verify_files_script",
        "verify_transfer_digest",
    }
)
VERIFICATION_RECORD_SUFFIX = ".sha256-verified"
VERIFICATION_RECORD_FORMAT = "verified-file/1"
# 1 MiB measured fastest for hashlib here: larger buffers fall out of the CPU cache.
_CHUNK = 1 << 20
_RECORD_READ_LIMIT = 512
# copy_and_verify's progress callback: one call per this many bytes (and one at the end), so
# a 30 GiB copy makes about a thousand calls and a copy of a few MiB makes one.
_PROGRESS_STEP = 32 << 20
_NS = 1_000_000_000
# O_NONBLOCK: opening a FIFO planted where a file or record should be must not hang.
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0)

StrPath = str | os.PathLike[str]


class _NotARegularFile(Exception):
    pass


def parse_sha256_digest(value: object) -> str:
    """Return ``value`` if it is ``sha256:<64 lowercase hex>``, else raise ValueError."""
    if not is_sha256_digest(value):
        raise ValueError(f"expected sha256:<64 lowercase hex>, got {value!r}")
    assert isinstance(value, str)
    return value


def _open_regular(path: StrPath) -> tuple[int, os.stat_result]:
    """Open ``path`` for reading; raise _NotARegularFile unless it is a regular file."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as error:
        raise _NotARegularFile from error
    try:
        st = os.fstat(fd)
        if not stat_module.S_ISREG(st.st_mode):
            raise _NotARegularFile
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def _advise_sequential(fd: int) -> None:
    # Doubles the kernel's readahead for cold files; a no-op where unsupported.
    with contextlib.suppress(AttributeError, OSError):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)


class _Progress:
    """Counts bytes and calls ``callback`` with the running total every ``_PROGRESS_STEP``."""

    __slots__ = ("callback", "done", "reported")

    def __init__(self, callback: Callable[[int], None]) -> None:
        self.callback = callback
        self.done = 0
        self.reported = -1

    def add(self, count: int) -> None:
        self.done += count
        if self.done - self.reported >= _PROGRESS_STEP:
            self.reported = self.done
            self.callback(self.done)

    def finish(self) -> None:
        """Report the final total (once, also for an empty file)."""
        if self.done != self.reported:
            self.reported = self.done
            self.callback(self.done)


def _hash_fd(fd: int, progress: _Progress | None = None) -> str:
    _advise_sequential(fd)
    digest = hashlib.sha256()
    buffer = bytearray(_CHUNK)
    view = memoryview(buffer)
    while True:
        count = os.readv(fd, [buffer])
        if not count:
            break
        digest.update(view[:count])
        if progress is not None:
            progress.add(count)
    if progress is not None:
        progress.finish()
    return SHA256_PREFIX + digest.hexdigest()


def sha256_file(path: StrPath) -> str:
    """The ``sha256:<hex>`` digest of a regular file's bytes (OSError for anything else)."""
    try:
        fd, _ = _open_regular(path)
    except _NotARegularFile as error:
        if isinstance(error.__cause__, OSError):
            raise error.__cause__ from None
        raise OSError(errno.EINVAL, "not a regular file", os.fspath(path)) from None
    try:
        return _hash_fd(fd)
    finally:
        os.close(fd)


def record_path(path: StrPath) -> str:
    """Where the verification record of ``path`` lives."""
    return os.fspath(path) + VERIFICATION_RECORD_SUFFIX


def _seconds(st: os.stat_result, field: str) -> int:
    # Whole seconds as the kernel stores them (what `stat -c %Y` prints). int(st_mtime) can
    # round up across a second boundary through the float, and truncates toward zero before 1970.
    ns = getattr(st, f"st_{field}_ns", None)
    if ns is None:
        return int(getattr(st, f"st_{field}"))
    return int(ns) // _NS


def verification_record_line(digest: str, st: os.stat_result) -> str:
    """The record line (without newline) for ``digest`` and a stat of the file."""
    return (
        f"{VERIFICATION_RECORD_FORMAT} {digest} size={st.st_size} "
        f"mtime={_seconds(st, 'mtime')} ctime={_seconds(st, 'ctime')} inode={st.st_ino}"
    )


def _read_small_regular(path: str, limit: int) -> bytes:
    fd = os.open(path, _OPEN_FLAGS)
    try:
        if not stat_module.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        data = b""
        while len(data) < limit:
            part = os.read(fd, limit - len(data))
            if not part:
                break
            data += part
        return data
    finally:
        os.close(fd)


def has_verification_record(path: StrPath, digest: str, *, ignore_ctime: bool = False) -> bool:
    """True if ``path`` is a regular file whose record matches its current stat and ``digest``.

    Reads the file's metadata and its record, never the file itself. ``ignore_ctime`` accepts a
    record whose status-change time alone differs: only for files no one writes in place (the
    cache store's read-only objects, whose ctime every hard link moves). A write still moves
    the mtime past the recorded second, since a record is only written once that second is over.
    """
    if not is_sha256_digest(digest):
        return False
    try:
        st = os.stat(path)
        if not stat_module.S_ISREG(st.st_mode):
            return False
        raw = _read_small_regular(record_path(path), _RECORD_READ_LIMIT)
    except OSError:
        return False
    line = verification_record_line(digest, st).encode("ascii")
    if raw in (line, line + b"\n"):
        return True
    return ignore_ctime and _without_ctime(raw.rstrip(b"\n")) == _without_ctime(line)


def _without_ctime(line: bytes) -> list[bytes]:
    return [word for word in line.split(b" ") if not word.startswith(b"ctime=")]


def recorded_digest(path: StrPath) -> str | None:
    """The digest a current verification record of ``path`` vouches for, else None.

    Reads the record and the file's metadata, never the file; a record that does not match
    the file's current stat vouches for nothing.
    """
    try:
        raw = _read_small_regular(record_path(path), _RECORD_READ_LIMIT)
    except OSError:
        return None
    words = raw.decode("ascii", "replace").split()
    if len(words) < 2 or words[0] != VERIFICATION_RECORD_FORMAT:
        return None
    return words[1] if has_verification_record(path, words[1]) else None


def _write_all(fd: int, data: memoryview) -> None:
    written = 0
    while written < len(data):
        written += os.write(fd, data[written:])


def _temp_beside(target: str) -> tuple[int, str]:
    tmp = os.fspath(temp_path(target))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    return os.open(tmp, flags, 0o644), tmp


def _record_clock(path: StrPath) -> int | None:
    """The current second by the clocks that stamp ``path``'s ctime, or None if unwritable.

    The earlier of the wall clock and the filesystem's own clock (the ctime of a probe file
    created where the record goes): a file whose ctime second is earlier than both cannot
    change afterwards without moving its ctime to a later second, even with a coarse kernel
    clock or a file server whose clock differs from ours.
    """
    wall = time.time_ns() // _NS
    try:
        fd, tmp = _temp_beside(record_path(path))
    except OSError:
        return None  # e.g. a read-only volume: check without recording
    try:
        return min(wall, _seconds(os.fstat(fd), "ctime"))
    except OSError:
        return None
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _publish_record(path: StrPath, digest: str, before: os.stat_result, clock: int) -> bool:
    """Write the record if ``path`` still matches ``before`` and its ctime is before ``clock``."""
    try:
        after = os.stat(path)
    except OSError:
        return False
    line = verification_record_line(digest, after)
    if (
        not stat_module.S_ISREG(after.st_mode)
        or line != verification_record_line(digest, before)
        or _seconds(after, "ctime") >= clock
    ):
        return False
    target = record_path(path)
    tmp = ""
    try:
        fd, tmp = _temp_beside(target)
        try:
            _write_all(fd, memoryview((line + "\n").encode("ascii")))
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except OSError:
        if tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        return False
    return True


def write_verification_record(path: StrPath, digest: str, before: os.stat_result) -> bool:
    """Write a record for ``path`` if it is safe to; return whether one was written.

    ``before`` is the stat taken before hashing. Nothing is written if the file changed since,
    or if its status-change second is not yet over. Failures are swallowed: a record is an
    optimisation, never a reason to fail a check. :func:`verify_file` is stricter: it requires
    the ctime second to be over before hashing starts.
    """
    clock = _record_clock(path)
    return clock is not None and _publish_record(path, digest, before, clock)


def _not_a_file_message(label: str, path: StrPath) -> str:
    return (
        f"{label} at {os.fspath(path)!r} is not a regular file; a sha256 digest covers the bytes "
        "of one file, so ship a directory as an archive"
    )


def _unopenable_message(label: str, path: StrPath, cause: BaseException | None) -> str:
    """Why ``path`` could not be opened: missing, unreadable, or not a regular file."""
    if isinstance(cause, OSError):
        if cause.errno in (errno.ENOENT, errno.ENOTDIR):
            return f"{label} at {os.fspath(path)!r} does not exist"
        if cause.errno != errno.EINVAL:  # something is there that we may not read
            return f"{label} at {os.fspath(path)!r} cannot be read: {cause.strerror or cause}"
    return _not_a_file_message(label, path)


def _mismatch_message(label: str, path: StrPath, actual: str, expected: str) -> str:
    return f"{label} at {os.fspath(path)!r} has digest {actual}; expected {expected}"


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
    file, a directory or a file that cannot be opened (the message says which).
    """
    parse_sha256_digest(expected)
    if trust_record and has_verification_record(path, expected):
        return False
    try:
        fd, _ = _open_regular(path)
    except _NotARegularFile as error:
        cause = error.__cause__
        raise DigestMismatchError(_unopenable_message(label, path, cause)) from cause
    try:
        # The clock is read before the stat the record will describe, so any change after
        # that stat lands in a later ctime second and alters the line.
        clock = _record_clock(path) if record else None
        before = os.fstat(fd)
        actual = _hash_fd(fd)
    finally:
        os.close(fd)
    if actual != expected:
        raise DigestMismatchError(_mismatch_message(label, path, actual, expected))
    if clock is not None:
        _publish_record(path, expected, before, clock)
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


def _worker_count(requested: int | None, jobs: int) -> int:
    if requested is not None:
        if requested < 1:
            raise ValueError(f"max_workers must be at least 1, got {requested}")
        return min(requested, jobs)
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, jobs))


def verify_files(
    items: Iterable[tuple[StrPath, str]],
    *,
    trust_records: bool = True,
    record: bool = True,
    max_workers: int | None = None,
) -> list[bool]:
    """:func:`verify_file_digest` for several ``(path, digest)`` pairs on several cores.

    Returns, in input order, True for each file that was hashed and False for each accepted
    from its record. Every file is checked; if any failed, one TransferIntegrityError names
    them all. A malformed digest raises ValueError before anything is read. ``max_workers``
    defaults to the number of usable cores.
    """
    from concurrent.futures import ThreadPoolExecutor  # only here: it costs ~10 ms to import

    pairs = [(path, parse_sha256_digest(digest)) for path, digest in items]
    if not pairs:
        return []

    def check(pair: tuple[StrPath, str]) -> bool:
        return verify_file_digest(pair[0], pair[1], trust_record=trust_records, record=record)

    with ThreadPoolExecutor(
        max_workers=_worker_count(max_workers, len(pairs)), thread_name_prefix="altar-digest"
    ) as pool:
        futures = [pool.submit(check, pair) for pair in pairs]
    results: list[bool] = []
    failures: list[TransferIntegrityError] = []
    for future in futures:
        try:
            results.append(future.result())
        except TransferIntegrityError as error:
            failures.append(error)
            results.append(False)
    if failures:
        summary = "; ".join(str(error) for error in failures)
        count = f"{len(failures)} of {len(pairs)} files failed verification"
        raise TransferIntegrityError(f"{count}: {summary}") from failures[0]
    return results


def __getattr__(name: str) -> object:
    # the copy moved to digest_copy and the transfer checks to digest_transfers; importing them
    # from here still works
    if name in ("CopyResult", "copy_and_verify"):
        from altar.execution.digests import copy as digest_copy

        return getattr(digest_copy, name)
    if name in _TRANSFER_NAMES:
        from altar.execution.digests import transfers as digest_transfers

        return getattr(digest_transfers, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
