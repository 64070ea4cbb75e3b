"""Staging inputs into the data root: one-pass verified copies, records, and a staging index.

Why a staging index beside the ``.sha256-verified`` records: a record stores whole-second
times, so it may only be written once the file's status-change second is over (otherwise a
rewrite within the same second would go unnoticed). A freshly staged small file is copied in
well under a second, so a record alone would leave the *next* ``stage_inputs`` to hash it again.
The index is the backend's own memory of what it verified, keyed on the destination's full
``stat`` with nanosecond times, device, inode, size and mode: a rewrite or replacement changes
one of those, so the entry stops matching. It lets the next staging skip a verified copy at
once, and that staging promotes the entry to a regular verification record (which tasks and
other tools read) as soon as the status-change second has passed.

Entries live under ``<data_root>/.altar-staging/``. Like records, anyone who can write the data
root can forge them; ``trust_verification_records=False`` makes staging hash every input.

Progress: a copy reports its bytes through :func:`altar.execution.transfer_progress.report` as
it goes (under the transfer's logical path, with the source's size). An input found already in
place (skipped or verified where it is) is reported once, as complete, so a driver's totals
reach 100%; the skip itself still reads nothing but metadata.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import json
import os
import stat as stat_module
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

from altar.backends.local.render import contained_host_path
from altar.execution import Transfer, TransferIntegrityError
from altar.execution.digest import (
    CopyResult,
    copy_and_verify,
    has_verification_record,
    require_digest_file,
    verify_file,
    write_verification_record,
)
from altar.execution.errors import DigestMismatchError
from altar.execution.transfer_progress import current_callback, report
from altar.execution.uris import local_file

__all__ = ["INDEX_DIR", "StageAction", "Stager", "local_path"]

INDEX_DIR = ".altar-staging"
_INDEX_FORMAT = "altar-local-staging/1"

# One lock per destination, shared by every Stager in the process: two stagings of one file
# never copy it twice at once. Across processes each copy goes to its own temporary file and is
# renamed into place, so readers only ever see a complete, verified file.
_DEST_LOCKS: dict[str, threading.Lock] = {}
_DEST_LOCKS_GUARD = threading.Lock()


def _dest_lock(path: str) -> threading.Lock:
    with _DEST_LOCKS_GUARD:
        return _DEST_LOCKS.setdefault(path, threading.Lock())


class StageAction(enum.StrEnum):
    """What staging one transfer did."""

    COPIED = "copied"  # copied and hashed in one pass
    VERIFIED = "verified"  # hashed where it already was; nothing copied
    SKIPPED = "skipped"  # a current index entry or record vouched for it: not read at all


def local_path(uri: str) -> str:
    """The absolute host path a transfer ``uri`` names (a bare path or ``file://``)."""
    return os.path.abspath(local_file(uri, backend="local"))


def _stat_key(st: os.stat_result) -> list[int]:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode]


def _stat_or_none(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


@dataclass(frozen=True)
class _Entry:
    digest: str | None
    owned: bool  # the backend wrote these bytes (a record may be written beside them)
    dest: list[int]
    source: list[int] | None


class Stager:
    """Copies transfers into ``data_root`` (blocking; the backend runs it in a thread)."""

    def __init__(self, data_root: str, *, trust_records: bool = True) -> None:
        self.data_root = data_root
        self.trust_records = trust_records

    # -- the index ----------------------------------------------------------------------------

    def _index_file(self, dest: str) -> str:
        relative = os.path.relpath(dest, self.data_root)
        name = hashlib.sha256(relative.encode("utf-8", "surrogateescape")).hexdigest()
        return os.path.join(self.data_root, INDEX_DIR, name[:2], name + ".json")

    def _read_entry(self, dest: str) -> _Entry | None:
        try:
            with open(self._index_file(dest), encoding="utf-8") as handle:
                data = json.load(handle)
            if data.get("format") != _INDEX_FORMAT or data.get("path") != os.path.relpath(
                dest, self.data_root
            ):
                return None
            return _Entry(data["digest"], bool(data["owned"]), data["dest"], data.get("source"))
        except (OSError, ValueError, KeyError, TypeError):
            return None  # an unreadable or foreign entry is simply absent

    def _write_entry(
        self,
        dest: str,
        *,
        digest: str | None,
        owned: bool,
        dest_stat: os.stat_result,
        source_stat: os.stat_result | None,
    ) -> None:
        target = self._index_file(dest)
        try:  # a task may have replaced the index directory with a symlink to a host path
            contained_host_path(self.data_root, os.path.relpath(target, self.data_root))
        except ValueError:
            return  # the index is an optimisation: go without it
        payload = {
            "format": _INDEX_FORMAT,
            "path": os.path.relpath(dest, self.data_root),
            "digest": digest,
            "owned": owned,
            "dest": _stat_key(dest_stat),
            "source": _stat_key(source_stat) if source_stat is not None else None,
        }
        os.makedirs(os.path.dirname(target), exist_ok=True)
        tmp = f"{target}.{os.getpid()}.{uuid.uuid4().hex}.tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as handle:
                json.dump(payload, handle)
            os.replace(tmp, target)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    def _vouched(self, dest: str, digest: str) -> bool:
        """Whether a current index entry or record vouches for ``dest`` (without reading it)."""
        if not self.trust_records:
            return False
        entry = self._read_entry(dest)
        current = _stat_or_none(dest)
        if (
            entry is not None
            and current is not None
            and entry.digest == digest
            and entry.dest == _stat_key(current)
        ):
            if entry.owned and not has_verification_record(dest, digest):
                # The index proves these exact bytes were verified: promote to a record once
                # the status-change second is over (write_verification_record checks that).
                write_verification_record(dest, digest, current)
            return True
        return has_verification_record(dest, digest)

    # -- staging ------------------------------------------------------------------------------

    def stage(self, transfer: Transfer) -> StageAction:
        """Materialize one transfer at its logical path under the data root."""
        source = local_path(transfer.uri)
        dest = contained_host_path(self.data_root, transfer.logical_path)
        with _dest_lock(dest):
            if transfer.digest is not None:
                action = self._stage_digest(transfer, transfer.digest, source, dest)
            else:
                action = self._stage_plain(transfer, source, dest)
        if action is not StageAction.COPIED and current_callback() is not None:
            # already in place: complete at once (a copy reported itself as it went); the
            # stat is spent only when someone listens
            size = _stat_or_none(dest)
            if size is not None:
                report(transfer.logical_path, size.st_size, size.st_size)
        return action

    def _copy(
        self,
        transfer: Transfer,
        source: str,
        dest: str,
        digest: str | None,
        *,
        label: str,
        size: int,
    ) -> CopyResult:
        """copy_and_verify, reporting its progress under the transfer's logical path."""

        def progress(done: int) -> None:
            report(transfer.logical_path, done, size)

        return copy_and_verify(source, dest, digest, label=label, progress=progress)

    def _label(self, transfer: Transfer) -> str:
        return f"staged input {transfer.uri!r} ({transfer.logical_path!r})"

    def _stage_digest(self, transfer: Transfer, digest: str, source: str, dest: str) -> StageAction:
        if self._vouched(dest, digest):
            return StageAction.SKIPPED
        if _same_file(source, dest):
            # The caller's file already sits at its destination: hash it where it is. On a
            # mismatch nothing is deleted, and no record is written beside a file we did not
            # copy; the index remembers the verification instead.
            self._verify_at(transfer, dest, digest, owned=False)
            return StageAction.VERIFIED
        require_digest_file(transfer, source)
        source_stat = os.stat(source)
        current = _stat_or_none(dest)
        if (
            current is not None
            and stat_module.S_ISREG(current.st_mode)
            and current.st_size == source_stat.st_size
        ):
            # Maybe an earlier copy whose entry was lost: reading it is cheaper than copying.
            try:
                self._verify_at(transfer, dest, digest, owned=True)
                return StageAction.VERIFIED
            except TransferIntegrityError:
                pass  # stale bytes at the destination: replace them below
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        result = self._copy(
            transfer, source, dest, digest, label=self._label(transfer), size=source_stat.st_size
        )
        self._write_entry(
            dest, digest=digest, owned=True, dest_stat=result.stat, source_stat=source_stat
        )
        write_verification_record(dest, digest, result.stat)
        return StageAction.COPIED

    def _verify_at(self, transfer: Transfer, dest: str, digest: str, *, owned: bool) -> None:
        before = os.stat(dest) if os.path.exists(dest) else None
        try:
            verify_file(dest, digest, label=self._label(transfer), record=owned)
        except TransferIntegrityError:
            raise
        except DigestMismatchError as error:
            raise TransferIntegrityError(*error.args) from error
        after = _stat_or_none(dest)
        if before is not None and after is not None and _stat_key(before) == _stat_key(after):
            self._write_entry(dest, digest=digest, owned=owned, dest_stat=after, source_stat=None)

    def _stage_plain(self, transfer: Transfer, source: str, dest: str) -> StageAction:
        """A transfer without a digest: copy unless the index shows nothing changed."""
        if _same_file(source, dest):
            return StageAction.SKIPPED
        source_stat = os.stat(source)
        if not stat_module.S_ISREG(source_stat.st_mode):
            raise IsADirectoryError(
                f"input {source!r} is not a regular file; the local backend stages single files"
            )
        entry = self._read_entry(dest)
        current = _stat_or_none(dest)
        if (
            entry is not None
            and current is not None
            and entry.dest == _stat_key(current)
            and entry.source == _stat_key(source_stat)
        ):
            return StageAction.SKIPPED
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        result = self._copy(
            transfer, source, dest, None, label=f"input {source!r}", size=source_stat.st_size
        )
        self._write_entry(
            dest, digest=result.digest, owned=True, dest_stat=result.stat, source_stat=source_stat
        )
        return StageAction.COPIED

    def collect(self, transfer: Transfer) -> None:
        """Copy one output from the data root back to its ``uri``."""
        source = contained_host_path(self.data_root, transfer.logical_path, follow_last=True)
        dest = local_path(transfer.uri)
        if not os.path.isfile(source):
            raise FileNotFoundError(
                f"output {transfer.logical_path!r} was not written by its task (expected "
                f"{source!r}); check the task's log"
            )
        if _same_file(source, dest):
            return
        Path(dest).parent.mkdir(parents=True, exist_ok=True)
        copy_and_verify(source, dest, transfer.digest, label=f"output {transfer.logical_path!r}")


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False
