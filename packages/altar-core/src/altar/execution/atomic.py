"""Atomic file writes with one temporary-file name that a later cleanup can recognise.

Every temporary file altar writes beside its target is named
``.<name>.altar-tmp-<pid>-<hex>``: hidden, beside the file it will replace (so the final
``rename`` stays on one filesystem), and carrying the id of the process that writes it, so a
later run can tell the litter of a killed process from a file that is not ours
(:func:`remove_stale_temporaries`). Nothing else is ever removed by that cleanup.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

StrPath = str | os.PathLike[str]

__all__ = [
    "TEMP_MARKER",
    "atomic_write",
    "fsync_directory",
    "remove_stale_temporaries",
    "stale_owners",
    "sweeping_for",
    "temp_owner",
    "temp_path",
]

TEMP_MARKER = ".altar-tmp-"
_TEMP = re.compile(r"^\..+\.altar-tmp-(?P<pid>[0-9]+)-[0-9a-f]{8,32}$")
# Names written by altar-core 0.4 and earlier (journal snapshots, verified copies, records):
# recognised for one release so a resumed run also removes what an older runner left.
_LEGACY = re.compile(r"^.+\.(?P<pid>[0-9]+)\.[0-9a-f]{8,32}\.(?:tmp|partial)$")


def temp_path(target: StrPath, pid: int | None = None) -> Path:
    """A fresh temporary path beside ``target`` (``.<name>.altar-tmp-<pid>-<hex>``)."""
    path = Path(target)
    owner = os.getpid() if pid is None else pid
    return path.with_name(f".{path.name}{TEMP_MARKER}{owner}-{os.urandom(8).hex()}")


def temp_owner(name: str) -> int | None:
    """The pid in an altar temporary file's name, or None if ``name`` is not one."""
    match = _TEMP.match(name) or _LEGACY.match(name)
    return int(match.group("pid")) if match else None


def fsync_directory(directory: StrPath) -> None:
    """Make renames in ``directory`` durable (best effort: some filesystems refuse)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write(
    path: StrPath, data: bytes | Iterable[bytes], *, mode: int = 0o600, durable: bool = True
) -> int:
    """Replace ``path`` with ``data``: temporary file beside it, fsync, rename, fsync the directory.

    ``data`` may be chunks, written as they come (a 100,000-task journal snapshot is never
    whole in memory). Returns the bytes written. On any error the temporary file is removed
    and ``path`` keeps its previous content. A process killed midway leaves at most one
    ``.<name>.altar-tmp-<pid>-<hex>`` file, which :func:`remove_stale_temporaries` recognises.
    ``durable=False`` skips both fsyncs, for a file a reader can tell is stale and do without
    (a power cut may leave the old file, the new one, or an empty one; a kill, old or new).
    """
    path = Path(path)
    tmp = temp_path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(tmp, flags, mode)
    size = 0
    try:
        for chunk in (data,) if isinstance(data, bytes | bytearray | memoryview) else data:
            view = memoryview(chunk)
            size += len(view)
            while view:
                written = os.write(fd, view)
                view = view[written:]
        if durable:
            os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(tmp, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        fsync_directory(path.parent)
    return size


def remove_stale_temporaries(directory: StrPath, owners: Iterable[int]) -> list[Path]:
    """Remove the altar temporary files in ``directory`` written by one of ``owners`` (pids).

    Only names of the temporary-file pattern (or the older one) whose pid is in ``owners`` and
    is not this process are removed: a file that is not ours, or that a live writer in this
    process still uses, is never touched. Not recursive. Returns what was removed.
    """
    wanted = set(owners) - {os.getpid()}
    removed: list[Path] = []
    if not wanted:
        return removed
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        if temp_owner(entry.name) not in wanted:
            continue
        with contextlib.suppress(OSError):
            if entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)
                removed.append(Path(entry.path))
    return removed


_STALE_OWNERS: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar(
    "altar_stale_owners", default=frozenset()
)


@contextlib.contextmanager
def sweeping_for(owners: Iterable[int]) -> Iterator[None]:
    """While inside, :func:`stale_owners` names ``owners`` (the runner's earlier processes).

    A stager that writes into a directory first removes the temporary files these processes
    left there (a copy a killed run never finished), and nothing else.
    """
    token = _STALE_OWNERS.set(frozenset(owners))
    try:
        yield
    finally:
        _STALE_OWNERS.reset(token)


def stale_owners() -> frozenset[int]:
    """The pids whose leftover temporary files may be removed here (empty: none)."""
    return _STALE_OWNERS.get()
