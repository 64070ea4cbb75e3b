"""The journal's log (``journal.log``): lines appended durably, and read back after a crash.

A failed append is cut back off, so a full disk never leaves a partial line; a line torn by a
crash can only be the last one and is ignored, and the next append cuts it off first.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import NamedTuple

from altar.execution.errors import JournalError
from altar.execution.state.changes import apply_changes
from altar.execution.state.records import Context, TaskRecord

__all__ = ["Replayed", "append_durably", "replay"]


def append_durably(path: Path, data: bytes) -> None:
    """Append ``data`` to ``path`` and fsync; on error cut the file back to its old length."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        size = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise
    finally:
        os.close(fd)


class Replayed(NamedTuple):
    """What replaying a log found: the last seq, the log's size, the repair a torn line needs
    ((length to cut back to, newline needed) or None), and the lines applied."""

    seq: int
    log_bytes: int
    repair: tuple[int, bool] | None
    lines: int


def replay(path: Path, tasks: dict[str, TaskRecord], seq: int, context: Context) -> Replayed | None:
    """Apply the log at ``path`` onto ``tasks`` (the snapshot's, at ``seq``); None if no log.

    Lines of a seq the snapshot already holds are skipped; a line naming a task the run does
    not have is a JournalError (another run's log). A line without a seq (version 4: every
    line of an append but its first) has the seq after its previous line's.
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise JournalError(f"cannot read {path}: {error.strerror or error}") from error
    offset = good_end = lines = 0
    previous: int | None = None  # the seq of the line before, whether applied or not
    for line in raw.split(b"\n"):
        end = min(offset + len(line) + 1, len(raw))  # past this line's newline, if any
        offset += len(line) + 1
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            if "seq" in entry:
                line_seq = int(entry["seq"])
            elif previous is not None:
                line_seq = previous + 1
            else:
                raise ValueError("a first line without a seq")
            task_id = entry["task"]
            earlier = tasks.get(task_id)
            if "record" in entry:  # a whole record (every line of versions 1 and 2)
                record = TaskRecord.from_dict(task_id, entry["record"], earlier, context)
            elif line_seq > seq and earlier is not None:  # what changed (version 3)
                record = apply_changes(earlier, entry, context)
            else:
                record = None
        except (ValueError, KeyError, TypeError):
            break  # a line torn by a crash: only ever the last one
        good_end = end
        previous = line_seq
        if line_seq <= seq:
            continue  # already in the snapshot
        if record is None:
            raise JournalError(f"{path} names task {task_id!r}, unknown to the run")
        tasks[task_id] = record
        seq = line_seq
        lines += 1
    repair = None
    if raw and (good_end < len(raw) or not raw.endswith(b"\n")):
        # a torn last line, or a whole one missing its newline: mend before appending
        repair = (good_end, good_end > 0 and raw[good_end - 1 : good_end] != b"\n")
    return Replayed(seq, len(raw), repair, lines)
