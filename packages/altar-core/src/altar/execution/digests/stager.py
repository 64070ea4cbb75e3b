"""Staging inputs into a local directory and collecting outputs from it, digests checked.

For backends whose tasks read a directory on this machine (or one mounted from it): the local
Docker backend's data root, the in-process reference backend's. A :class:`LocalStager` copies
each input to the host path of its logical path, hashing it in the same pass
(:func:`~altar.execution.digests.copy.copy_and_verify`), and renames it into place only once
the digest matched, so a task never reads a partial or wrong file.

"Already there" has one mechanism: the ``verified-file/1`` record beside the file
(:mod:`~altar.execution.digests.digest`).
A current record skips the input without reading it. A record
may only describe a file whose status-change second is over, and a fresh copy's is not, so the
records of files copied in a staging are written at its end (:meth:`LocalStager.stage_all`,
or :meth:`LocalStager.settle_records` after staging one by one), waiting for the clock to pass
that second once (at most about a second, and only when something was copied).

A file that already sits at its destination (the caller's own file) is hashed where it is and
never gets a record: records are written only beside bytes the stager wrote. An input without a
digest is copied unless its destination has the source's size and modification time (the quick
check rsync makes; the copy carries the source's modification time over).

Outputs: :func:`collect_output` copies a task's output back to its ``uri`` and checks a declared
digest on the way (TransferIntegrityError on a mismatch; the destination keeps its old content).
Every backend verifies a declared output digest when it collects; one that fetches bytes its own
way calls :func:`verify_output_digest` on what it fetched before putting it in place.

Progress: copies report their bytes through :func:`altar.execution.transfer_progress.report`;
an input found in place is reported once, complete.
"""

from __future__ import annotations

import enum
import os
import stat as stat_module
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from altar.execution.atomic import remove_stale_temporaries, stale_owners
from altar.execution.digests.copy import copy_and_verify
from altar.execution.digests.digest import (
    has_verification_record,
    input_label,
    output_label,
    require_digest_file,
    verify_file,
    write_verification_record,
)
from altar.execution.errors import DigestMismatchError, TransferIntegrityError
from altar.execution.transfer_progress import current_callback, report
from altar.execution.types import Transfer
from altar.execution.uris import local_path

__all__ = ["LocalStager", "StageAction", "collect_output", "verify_output_digest"]

# One lock per destination, shared by every stager in the process: two stagings of one file
# never copy it at once. Across processes each copy goes to its own temporary file and is
# renamed into place, so readers only ever see a complete, verified file.
_DEST_LOCKS: dict[str, threading.Lock] = {}
_DEST_LOCKS_GUARD = threading.Lock()
_RECORD_WAIT_LIMIT_S = 3.0


def _dest_lock(path: str) -> threading.Lock:
    with _DEST_LOCKS_GUARD:
        return _DEST_LOCKS.setdefault(path, threading.Lock())


class StageAction(enum.StrEnum):
    """What staging one transfer did."""

    COPIED = "copied"  # copied and hashed in one pass
    VERIFIED = "verified"  # hashed where it already was; nothing copied
    SKIPPED = "skipped"  # a current record (or, without a digest, the quick check) vouched


def _stat_or_none(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _as_integrity_error(error: DigestMismatchError) -> TransferIntegrityError:
    if isinstance(error, TransferIntegrityError):
        return error
    return TransferIntegrityError(*error.args)


class LocalStager:
    """Stages transfers into a directory tree (blocking; run it in a thread from async code).

    ``resolve`` maps a logical path to its host path and refuses one that leaves the directory
    (a backend passes its own containment check). ``backend`` names the backend in messages.
    ``trust_records=False`` hashes every input, ignoring records. ``verify=False`` copies bytes
    without judging them (for backends whose tasks check their own inputs).
    """

    def __init__(
        self,
        resolve: Callable[[str], str | os.PathLike[str]],
        *,
        backend: str,
        trust_records: bool = True,
        verify: bool = True,
    ) -> None:
        self._resolve = resolve
        self.backend = backend
        self.trust_records = trust_records
        self.verify = verify
        self._pending: dict[str, tuple[str, os.stat_result]] = {}
        self._pending_guard = threading.Lock()
        self._swept: set[str] = set()

    def destination(self, transfer: Transfer) -> str:
        return os.fspath(self._resolve(transfer.logical_path))

    # -- staging ------------------------------------------------------------------------------

    def stage_all(self, transfers: Iterable[Transfer]) -> list[StageAction]:
        """Stage every transfer in order, then write the records of the fresh copies."""
        try:
            return [self.stage(transfer) for transfer in transfers]
        finally:
            self.settle_records()

    def stage(self, transfer: Transfer) -> StageAction:
        """Materialize one transfer at its logical path (see the module docstring)."""
        source = local_path(transfer.uri, backend=self.backend)
        dest = self.destination(transfer)
        self._sweep(os.path.dirname(dest))
        with _dest_lock(dest):
            if not self.verify:
                action = self._stage_unjudged(transfer, source, dest)
            elif transfer.digest is not None:
                action = self._stage_digest(transfer, transfer.digest, source, dest)
            else:
                action = self._stage_plain(transfer, source, dest)
        if action is not StageAction.COPIED and current_callback() is not None:
            # already in place: complete at once (a copy reported itself as it went); the
            # stat is spent only when someone listens
            current = _stat_or_none(dest)
            if current is not None:
                report(transfer.logical_path, current.st_size, current.st_size)
        return action

    def settle_records(self) -> int:
        """Write the records of copies made since the last call; return how many were written.

        Waits (once, at most about a second) for the clock to leave the newest copy's
        status-change second. A copy changed meanwhile gets no record.
        """
        with self._pending_guard:
            pending, self._pending = self._pending, {}
        if not pending:
            return 0
        # The filesystem's clock may lag the wall clock a little (a coarse kernel clock): try
        # again until every record is written or the copies' second is surely over.
        newest = max(int(st.st_ctime) for _, st in pending.values())
        deadline = time.monotonic() + _RECORD_WAIT_LIMIT_S
        written = 0
        while True:
            for dest, (digest, before) in list(pending.items()):
                if has_verification_record(dest, digest) or write_verification_record(
                    dest, digest, before
                ):
                    written += 1
                    del pending[dest]
                elif _stat_or_none(dest) is None or time.time() > newest + 2:
                    del pending[dest]  # gone or changed meanwhile: no record
            if not pending or time.monotonic() >= deadline:
                return written
            time.sleep(0.05)

    def _copy(
        self, transfer: Transfer, source: str, dest: str, digest: str | None
    ) -> os.stat_result:
        size = os.stat(source).st_size

        def progress(done: int) -> None:
            report(transfer.logical_path, done, size)

        os.makedirs(os.path.dirname(dest), exist_ok=True)
        label = input_label(transfer) if digest is not None else f"input {source!r}"
        result = copy_and_verify(source, dest, digest, label=label, progress=progress)
        if digest is not None and not write_verification_record(dest, digest, result.stat):
            with self._pending_guard:
                self._pending[dest] = (digest, result.stat)
        return result.stat

    def _sweep(self, directory: str) -> None:
        """Remove what killed earlier processes of this run left in ``directory`` (see atomic).

        Whatever this transfer then does: a copy's partial file, or a verification record's
        temporary file when the copy itself was done, are both theirs.
        """
        owners = stale_owners()
        if owners and directory not in self._swept:
            self._swept.add(directory)
            remove_stale_temporaries(directory, owners)

    def _stage_digest(self, transfer: Transfer, digest: str, source: str, dest: str) -> StageAction:
        if self.trust_records and has_verification_record(dest, digest):
            return StageAction.SKIPPED
        if _same_file(source, dest):
            # The caller's file already sits at its destination: hash it where it is. On a
            # mismatch nothing is deleted, and no record is written beside a file we did not copy.
            self._verify_at(transfer, dest, digest, record=False)
            return StageAction.VERIFIED
        require_digest_file(transfer, source)
        source_stat = os.stat(source)
        current = _stat_or_none(dest)
        if (
            current is not None
            and stat_module.S_ISREG(current.st_mode)
            and current.st_size == source_stat.st_size
        ):
            # Maybe an earlier copy whose record was never written: reading it is cheaper
            # than copying it again.
            try:
                self._verify_at(transfer, dest, digest, record=True)
            except TransferIntegrityError:
                pass  # stale bytes at the destination: replace them below
            else:
                verified = _stat_or_none(dest)
                if verified is not None and not has_verification_record(dest, digest):
                    with self._pending_guard:  # its second was not over: record it at the end
                        self._pending[dest] = (digest, verified)
                return StageAction.VERIFIED
        self._copy(transfer, source, dest, digest)
        return StageAction.COPIED

    def _verify_at(self, transfer: Transfer, dest: str, digest: str, *, record: bool) -> None:
        try:
            verify_file(dest, digest, label=input_label(transfer), record=record)
        except DigestMismatchError as error:
            raise _as_integrity_error(error) from error

    def _stage_plain(self, transfer: Transfer, source: str, dest: str) -> StageAction:
        if _same_file(source, dest):
            return StageAction.SKIPPED
        source_stat = os.stat(source)
        if not stat_module.S_ISREG(source_stat.st_mode):
            raise IsADirectoryError(
                f"input {source!r} is not a regular file; the {self.backend} backend stages "
                "single files"
            )
        current = _stat_or_none(dest)
        if (
            current is not None
            and stat_module.S_ISREG(current.st_mode)
            and current.st_size == source_stat.st_size
            and current.st_mtime_ns == source_stat.st_mtime_ns
        ):
            return StageAction.SKIPPED
        self._copy(transfer, source, dest, None)
        os.utime(dest, ns=(source_stat.st_atime_ns, source_stat.st_mtime_ns))
        return StageAction.COPIED

    def _stage_unjudged(self, transfer: Transfer, source: str, dest: str) -> StageAction:
        """Copy bytes without checking them: the task judges its own inputs."""
        if not os.path.isfile(source) or _same_file(source, dest):
            return StageAction.SKIPPED
        self._copy(transfer, source, dest, None)
        return StageAction.COPIED

    # -- collecting ---------------------------------------------------------------------------

    def collect(self, transfer: Transfer) -> None:
        """Copy one output from the directory back to its ``uri`` (:func:`collect_output`)."""
        collect_output(self.destination(transfer), transfer, backend=self.backend)


def verify_output_digest(transfer: Transfer, path: str | os.PathLike[str]) -> None:
    """Check fetched output bytes at ``path`` against ``transfer.digest`` (no-op without one).

    Raises TransferIntegrityError on a mismatch. Never trusts a record and never writes one.
    """
    if transfer.digest is None:
        return
    try:
        verify_file(path, transfer.digest, label=output_label(transfer))
    except DigestMismatchError as error:
        raise _as_integrity_error(error) from error


def collect_output(source: str | os.PathLike[str], transfer: Transfer, *, backend: str) -> None:
    """Copy a task's output file ``source`` to ``transfer.uri``, checking a declared digest.

    FileNotFoundError if the task did not write it; TransferIntegrityError on a digest
    mismatch, and then the destination keeps its previous content. An output that already is
    its destination is only checked.
    """
    source = os.fspath(source)
    dest = local_path(transfer.uri, backend=backend)
    if not os.path.isfile(source):
        raise FileNotFoundError(
            f"{output_label(transfer)} was not written by its task (expected {source!r}); "
            "check the task's log"
        )
    if _same_file(source, dest):
        verify_output_digest(transfer, dest)
        return
    Path(dest).parent.mkdir(parents=True, exist_ok=True)
    copy_and_verify(source, dest, transfer.digest, label=output_label(transfer))
