"""A run directory's lock: one altar process drives a run at a time.

``lock`` holds the pid of the process that took it (for the message a second process gets);
``flock`` on it is what counts, so a lock left by a killed process is free again at once.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from altar.execution.errors import JournalError

__all__ = ["LOCK_NAME", "lock_is_held", "run_lock"]

LOCK_NAME = "lock"


@contextlib.contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Hold ``run_dir``'s lock: one altar process drives a run at a time."""
    path = run_dir / LOCK_NAME
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as error:
        raise JournalError(
            f"cannot use {run_dir} as a run directory: {error.strerror or error}"
        ) from error
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise JournalError(
                f"{run_dir} is in use by another altar process (pid {holder}); "
                "wait for it, or run `altar cancel` on this run directory"
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
        except OSError as error:  # a full disk, a quota: nothing was started yet
            raise JournalError(
                f"cannot use {run_dir} as a run directory: {error.strerror or error}; "
                "free space and run again"
            ) from error
        yield
    finally:
        os.close(fd)


def lock_is_held(run_dir: Path) -> bool:
    """True if another process holds ``run_dir``'s lock right now."""
    path = run_dir / LOCK_NAME
    try:
        # read-only is enough for flock, so a user who may only look at a run can ask
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    except OSError as error:
        raise JournalError(f"cannot read {path}: {error.strerror or error}") from error
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)
