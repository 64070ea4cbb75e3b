"""Copy a file while hashing it, in one pass: ``copy_and_verify`` (standard library only).

Large files are copied in the kernel (``copy_file_range``, as cp does) while a second thread
hashes each copied range from the page cache; elsewhere a user-space pipeline reads, writes and
hashes three buffers in turn. Either way the bytes land in a temporary file beside the
destination that is renamed into place only once the digest matched. The hashing, the records
and the messages are :mod:`altar.execution.digests.digest`'s.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import hashlib
import os
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass

from altar.execution.atomic import temp_path
from altar.execution.digests.digest import (
    _CHUNK,
    SHA256_PREFIX,
    StrPath,
    _hash_fd,
    _mismatch_message,
    _NotARegularFile,
    _open_regular,
    _Progress,
    _unopenable_message,
    _write_all,
    parse_sha256_digest,
)
from altar.execution.errors import TransferIntegrityError

__all__ = ["CopyResult", "copy_and_verify"]

# copy_and_verify: one buffer being hashed, one being written, one read ahead.
_PIPELINE_BUFFERS = 3
_KERNEL_COPY_STEP = 8 << 20
# copy_file_range cannot copy between these files: copy through user space instead.
_NO_KERNEL_COPY = frozenset({errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP})


@dataclass(frozen=True)
class CopyResult:
    """What :func:`copy_and_verify` produced: the digest of the bytes and the final stat."""

    digest: str
    stat: os.stat_result


def _copy_hashing(src_fd: int, dst_fd: int, size: int, progress: _Progress | None) -> str:
    """Copy ``src_fd`` to ``dst_fd`` (opened read-write) and return the digest of the copy."""
    digest = None
    if size > 4 * _CHUNK:
        digest = _kernel_copy_hashing(src_fd, dst_fd, progress)
    if digest is None:
        digest = _user_copy_hashing(src_fd, dst_fd, size, progress)
    if progress is not None:
        progress.finish()
    return digest


def _in_this_context(function: Callable[[], None]) -> Callable[[], None]:
    """``function`` to run on a helper thread in the caller's contextvars context.

    A progress callback may rely on context variables (see altar.execution.transfer_progress).
    """
    context = contextvars.copy_context()
    return lambda: context.run(function)


def _kernel_copy_hashing(src_fd: int, dst_fd: int, progress: _Progress | None) -> str | None:
    """Copy in the kernel and hash each copied range as read back from the destination.

    copy_file_range moves the bytes without passing them through Python, the way cp does, while
    a second thread reads every range it copied back from the destination (page cache) and
    hashes it, so the digest describes exactly the destination's bytes. Returns None, having
    copied nothing, where the kernel cannot copy between these two files.
    """
    copy = getattr(os, "copy_file_range", None)
    if copy is None:
        return None
    try:
        count = copy(src_fd, dst_fd, _KERNEL_COPY_STEP, 0, 0)
    except OSError as error:
        if error.errno in _NO_KERNEL_COPY:
            return None
        raise
    digest = hashlib.sha256()
    work: queue.SimpleQueue[tuple[int, int] | None] = queue.SimpleQueue()
    failed: list[BaseException] = []

    def hash_copied() -> None:
        view = memoryview(bytearray(_CHUNK))
        try:
            while (item := work.get()) is not None:
                offset, end = item
                while offset < end:
                    got = os.preadv(dst_fd, [view[: min(_CHUNK, end - offset)]], offset)
                    if not got:
                        raise OSError(errno.EIO, "the copy shrank while it was hashed")
                    digest.update(view[:got])
                    offset += got
                    if progress is not None:
                        progress.add(got)
        except BaseException as error:  # hand it to the copying thread
            failed.append(error)

    hasher = threading.Thread(
        target=_in_this_context(hash_copied), name="altar-copy-hash", daemon=True
    )
    hasher.start()
    offset = 0
    try:
        while count and not failed:
            work.put((offset, offset + count))
            offset += count
            count = copy(src_fd, dst_fd, _KERNEL_COPY_STEP, offset, offset)
    finally:
        work.put(None)
        hasher.join()
    if failed:
        raise failed[0]
    return SHA256_PREFIX + digest.hexdigest()


def _user_copy_hashing(src_fd: int, dst_fd: int, size: int, progress: _Progress | None) -> str:
    """Copy through our own buffers, hashing exactly the bytes written.

    For large files a second thread hashes each buffer while this one writes it and reads
    ahead into the next (hashlib, os.readv and os.write release the GIL).
    """
    digest = hashlib.sha256()
    if size <= 4 * _CHUNK:
        buffer = bytearray(_CHUNK)
        view = memoryview(buffer)
        while count := os.readv(src_fd, [buffer]):
            digest.update(view[:count])
            _write_all(dst_fd, view[:count])
            if progress is not None:
                progress.add(count)
        return SHA256_PREFIX + digest.hexdigest()
    views = [memoryview(bytearray(_CHUNK)) for _ in range(_PIPELINE_BUFFERS)]
    free: queue.SimpleQueue[int] = queue.SimpleQueue()
    work: queue.SimpleQueue[tuple[int, int] | None] = queue.SimpleQueue()
    for index in range(len(views)):
        free.put(index)

    failed: list[BaseException] = []

    def hash_buffers() -> None:
        try:
            while (item := work.get()) is not None:
                digest.update(views[item[0]][: item[1]])
                free.put(item[0])
                if progress is not None:
                    progress.add(item[1])
        except BaseException as error:  # hand it to the copying thread, never hang it
            failed.append(error)
            free.put(-1)

    hasher = threading.Thread(
        target=_in_this_context(hash_buffers), name="altar-copy-hash", daemon=True
    )
    hasher.start()
    try:
        while True:
            index = free.get()
            if index < 0:
                raise failed[0]
            count = os.readv(src_fd, [views[index]])
            if not count:
                break
            work.put((index, count))
            _write_all(dst_fd, views[index][:count])
    finally:
        work.put(None)
        hasher.join()
    if failed:
        raise failed[0]
    return SHA256_PREFIX + digest.hexdigest()


def copy_and_verify(
    source: StrPath,
    destination: StrPath,
    expected: str | None = None,
    *,
    label: str = "input",
    progress: Callable[[int], None] | None = None,
) -> CopyResult:
    """Copy ``source`` to ``destination`` while hashing it, in one pass.

    Large files are copied in the kernel (as cp does) while a second thread hashes each copied
    range from the page cache, so the digest is that of the destination's bytes. The bytes go
    to a temporary file beside ``destination`` that is renamed into place only
    after the digest matched, so readers never see a partial or wrong file. On a mismatch or
    any error (a full disk included) the temporary file is removed; ``source`` is never
    modified or removed. A source that is not a regular file is refused like a mismatch. If
    ``destination`` already is ``source`` (same file), it is only hashed, never rewritten.

    ``progress``, if given, is called with the number of bytes copied and hashed so far: every
    32 MiB and once at the end (with the file's size, also for an empty file), with increasing
    counts. It may be called on a helper thread, always in the caller's contextvars context;
    an exception it raises aborts the copy like any other error.
    """
    if expected is not None:
        parse_sha256_digest(expected)
    destination = os.fspath(destination)
    try:
        src_fd, src_stat = _open_regular(source)
    except _NotARegularFile as error:
        cause = error.__cause__
        if expected is None and isinstance(cause, OSError):
            raise cause from None  # no digest to check: a plain I/O error
        raise TransferIntegrityError(_unopenable_message(label, source, cause)) from cause
    try:
        try:
            dest_stat: os.stat_result | None = os.stat(destination)
        except OSError:
            dest_stat = None
        if dest_stat is not None and (dest_stat.st_dev, dest_stat.st_ino) == (
            src_stat.st_dev,
            src_stat.st_ino,
        ):
            actual = _hash_fd(src_fd, None if progress is None else _Progress(progress))
            if expected is not None and actual != expected:
                raise TransferIntegrityError(_mismatch_message(label, source, actual, expected))
            return CopyResult(actual, os.fstat(src_fd))
        return _copy_to_temp(src_fd, src_stat, source, destination, expected, label, progress)
    finally:
        os.close(src_fd)


def _copy_to_temp(
    src_fd: int,
    src_stat: os.stat_result,
    source: StrPath,
    destination: str,
    expected: str | None,
    label: str,
    progress: Callable[[int], None] | None,
) -> CopyResult:
    tmp = os.fspath(temp_path(destination))
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        dst_fd = os.open(tmp, flags, src_stat.st_mode & 0o777)
        try:
            counter = None if progress is None else _Progress(progress)
            actual = _copy_hashing(src_fd, dst_fd, src_stat.st_size, counter)
        finally:
            os.close(dst_fd)
        if expected is not None and actual != expected:
            raise TransferIntegrityError(_mismatch_message(label, source, actual, expected))
        os.replace(tmp, destination)
        return CopyResult(actual, os.stat(destination))
    except BaseException as error:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
            raise OSError(
                error.errno,
                f"no space left while copying {label} {os.fspath(source)!r} to "
                f"{destination!r} ({src_stat.st_size} bytes); the partial copy was removed, "
                "free space on that volume and retry",
                destination,
            ) from error
        raise
