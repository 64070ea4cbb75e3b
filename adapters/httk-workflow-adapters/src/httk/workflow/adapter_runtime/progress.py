"""Progress of a local copy on stderr, in the shape of rsync's ``--info=progress2``.

The ssh kind shows rsync's own line; the local kinds copy with :mod:`shutil` and count
here, so an operator sees the same kind of line whichever kind the queue is.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

_CHUNK = 1 << 20
#: Seconds between redrawn lines: a tree of small files must not flood the terminal.
_INTERVAL = 0.2


class Progress:
    """Bytes and files copied so far out of a total counted before the copy starts."""

    def __init__(self, total_bytes: int, total_files: int) -> None:
        self.total_bytes = total_bytes
        self.total_files = total_files
        self.bytes = 0
        self.files = 0
        self._drawn = 0.0

    @classmethod
    def of(cls, source: Path, files: list[str] | None = None) -> Progress:
        """Count what a copy of ``source`` (or of ``files`` below it) will write."""
        if files is not None:
            # Each listed name is copied once, a symlink as a link (no bytes counted).
            listed = [source / item for item in files]
            sizes = [p.lstat().st_size for p in listed if not p.is_symlink() and p.is_file()]
            return cls(sum(sizes), len(listed))
        if not source.is_dir():
            return cls(source.stat().st_size, 1)
        # copytree(symlinks=True) recreates links itself: only regular files pass through.
        walked = [Path(top, name) for top, _, names in os.walk(source) for name in names]
        regular = [p for p in walked if not p.is_symlink() and p.is_file()]
        return cls(sum(p.stat().st_size for p in regular), len(regular))

    def line(self) -> str:
        percent = 100 if self.total_bytes == 0 else self.bytes * 100 // self.total_bytes
        return f"{self.bytes:>15,} {percent:>3}%   {self.files}/{self.total_files} files"

    def _draw(self, *, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self._drawn < _INTERVAL:
            return
        self._drawn = now
        sys.stderr.write("\r" + self.line() + ("\n" if final else ""))
        sys.stderr.flush()

    def advance(self, copied: int) -> None:
        self.bytes += copied
        self._draw()

    def file_done(self) -> None:
        self.files += 1
        self._draw()

    def finish(self) -> None:
        self._draw(final=True)

    def copy(self, source: str | os.PathLike[str], destination: str | os.PathLike[str]) -> None:
        """``shutil.copy2`` in chunks, counting each one (a ``copytree`` copy function)."""
        with open(source, "rb") as reader, open(destination, "wb") as writer:
            while chunk := reader.read(_CHUNK):
                writer.write(chunk)
                self.advance(len(chunk))
        shutil.copystat(source, destination)
        self.file_done()
