"""The cache store: entries by task key, outputs by content digest, shared safely.

Layout under the store's root::

    objects/sha256/<2 hex>/<62 hex>     one file per distinct output, read-only
    entries/<2 hex>/<62 hex>.json       one manifest per task key
    tmp/                                where both are written before their rename
    claims/<64 hex>.claim               a run computing that key now (:mod:`.claims`)
    index/<2 hex>.json                  what a hit needs, by key (:mod:`.index`: a cache)

An entry is published by one ``rename`` of its manifest, after every object it names is in
place and fsynced, so a reader (another run, on another machine of a shared filesystem) sees a
whole entry or none, and a writer killed at any instant leaves at most unreferenced files in
``tmp/`` or ``objects/`` (``prune`` removes them). Objects are never rewritten: the same digest
is the same bytes, so two runs storing one output race harmlessly.

A hit is verified before it is served: every object is checked against the manifest's digest
(a current verification record makes that a ``stat``); a missing or altered object drops the
entry and the lookup is a miss, never a stale output. Through the index a verified hit costs
a ``stat`` of its manifest and one of each object; the first lookup of an entry goes the slow
way (its manifest and records read) and writes its index row.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from altar.execution.atomic import temp_path
from altar.execution.cache.claims import Claims
from altar.execution.cache.index import CacheIndex, IndexRow, stat_triple
from altar.execution.cache.key import TaskKey
from altar.execution.digests.copy import copy_and_verify
from altar.execution.digests.digest import (
    has_verification_record,
    verify_file,
)
from altar.execution.errors import DigestMismatchError
from altar.execution.types import is_sha256_digest

if TYPE_CHECKING:
    from altar.execution.cache.pruning import Pruned

__all__ = ["ENTRY_FORMAT", "CacheEntry", "CacheStore", "default_store_dir"]

ENTRY_FORMAT = "altar-cache-entry/1"


def default_store_dir() -> Path:
    """``$ALTAR_CACHE_DIR``, else ``$XDG_CACHE_HOME/altar/tasks``, else ``~/.cache/altar/tasks``."""
    explicit = os.environ.get("ALTAR_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "altar" / "tasks"


@dataclass(frozen=True)
class CacheEntry:
    """What a successful task left: its key's fields, its outputs' digests, where it came from."""

    key: str
    fields: Mapping[str, Any]
    outputs: Mapping[str, str]  # logical path -> sha256 digest
    origin: Mapping[str, Any] = field(default_factory=dict)  # run_id, task_id, backend, ...
    created_at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": ENTRY_FORMAT,
            "key": self.key,
            "fields": dict(self.fields),
            "outputs": dict(self.outputs),
            "origin": dict(self.origin),
            "created_at": self.created_at,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CacheEntry:
        if data.get("format") != ENTRY_FORMAT:
            raise ValueError(f"not a {ENTRY_FORMAT} manifest")
        outputs = {str(k): str(v) for k, v in dict(data["outputs"]).items()}
        if not all(map(is_sha256_digest, outputs.values())):
            raise ValueError("an output digest is not sha256:<64 hex>")  # it names a path
        return cls(
            key=str(data["key"]),
            fields=dict(data["fields"]),
            outputs=outputs,
            origin=dict(data.get("origin", {})),
            created_at=float(data.get("created_at", 0.0)),
        )


class CacheStore:
    """A directory of cache entries (see the module docstring for its layout and guarantees)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self._root = os.fspath(root)  # the hot paths join strings: no Path per file
        self.index = CacheIndex(self._root)
        self.claims = Claims(self.root / "claims")
        # what this process stored and has not yet recorded and indexed (see seal)
        self._unsealed: list[tuple[str, str, int]] = []  # object, digest, its ctime second
        self._unindexed: list[tuple[CacheEntry, os.stat_result]] = []  # entry, manifest's
        #: the (device, inode) of each object the last lookup verified through the index, by
        #: digest: what materialize compares an output already at its uri with
        self._verified: dict[str, tuple[int, int]] = {}

    # -- paths -------------------------------------------------------------------------------

    def object_path(self, digest: str) -> Path:
        return Path(self._object_file(digest))

    def entry_path(self, key: str) -> Path:
        return Path(self._entry_file(key.removeprefix("sha256:")))

    def _object_file(self, digest: str) -> str:
        hex_ = digest.removeprefix("sha256:")
        return f"{self._root}/objects/sha256/{hex_[:2]}/{hex_[2:]}"

    def _entry_file(self, hex_: str) -> str:
        return f"{self._root}/entries/{hex_[:2]}/{hex_[2:]}.json"

    # -- reading -----------------------------------------------------------------------------

    def get(self, key: TaskKey | str) -> CacheEntry | None:
        """The entry under ``key``, unverified (None if there is none or it is unreadable)."""
        found = self._read(key.digest if isinstance(key, TaskKey) else key)
        return found[0] if found is not None else None

    def _read(self, key: str) -> tuple[CacheEntry, os.stat_result] | None:
        """The entry under ``key`` and the stat of the manifest it was read from."""
        try:
            with open(self._entry_file(key.removeprefix("sha256:")), "rb") as handle:
                st = os.fstat(handle.fileno())
                entry = CacheEntry.from_dict(json.loads(handle.read()))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None  # a foreign or damaged manifest is a miss; verify/prune report it
        return (entry, st) if entry.key == key else None

    def problems(self, entry: CacheEntry, *, rehash: bool = False) -> list[str]:
        """Why ``entry`` cannot be served (empty: every object is there with its bytes).

        An object whose record still holds is not read, though hard links have moved its
        ctime (see :func:`_unchanged_object`); ``rehash`` reads every object that has no
        record matching its full stat.
        """
        found = []
        for logical_path, digest in sorted(entry.outputs.items()):
            path = self.object_path(digest)
            if not rehash and _unchanged_object(path, digest):
                continue
            try:
                verify_file(
                    path,
                    digest,
                    label=f"cached output {logical_path}",
                    trust_record=True,
                    record=True,
                )
            except DigestMismatchError as error:
                found.append(str(error))
        return found

    def lookup(self, key: TaskKey) -> tuple[CacheEntry | None, list[str]]:
        """A verified hit, or None with the reasons a stored entry was dropped.

        Through the index when its row holds (a stat of the manifest and one of each object),
        else the slow way: the manifest read and verified, its row kept for :meth:`flush_index`.
        """
        hex_ = key.hex
        self._verified = {}
        row = self.index.fresh(hex_, self._entry_file(hex_), self._object_file, self._verified)
        if row is not None:
            return CacheEntry(key.digest, key.fields, row.outputs, row.origin, row.created_at), []
        found = self._read(key.digest)
        if found is None:
            return None, []
        entry, manifest = found
        if self._index(entry, manifest):
            return entry, []  # every object's record holds (what problems() checks first)
        problems = self.problems(entry)
        if problems:
            self.drop(key.digest)
            return None, problems
        self._index(entry, manifest)  # the objects problems() hashed may have records now
        return entry, []

    def _index(self, entry: CacheEntry, manifest: os.stat_result) -> bool:
        """Keep the index row of ``entry`` if every object's record vouches for it; did it?"""
        objects = {}
        for digest in set(entry.outputs.values()):
            vouched = _vouched_stat(self._object_file(digest), digest)
            if vouched is None:
                return False  # not (yet) recorded, or changed: verified the slow way
            objects[digest] = vouched
        row = IndexRow(
            stat_triple(manifest), objects, dict(entry.outputs), entry.origin, entry.created_at
        )
        self.index.learn(entry.key.removeprefix("sha256:"), row)
        return True

    def flush_index(self) -> None:
        """Write the index rows learned and dropped since the last flush (once per tick)."""
        self.index.flush(os.path.join(self._root, "tmp"))

    def entries(self) -> Iterator[CacheEntry]:
        """Every readable entry, in no particular order."""
        for path in sorted((self.root / "entries").glob("*/*.json")):
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                yield CacheEntry.from_dict(json.loads(path.read_text(encoding="utf-8")))

    def size_of(self, entry: CacheEntry) -> int:
        """Bytes of the entry's objects (shared objects count in full for each entry)."""
        total = 0
        for digest in entry.outputs.values():
            with contextlib.suppress(OSError):
                total += self.object_path(digest).stat().st_size
        return total

    # -- pruning (see :mod:`.pruning`) -------------------------------------------------------

    def prune(
        self,
        *,
        older_than_s: float | None = None,
        max_bytes: int | None = None,
        now: float | None = None,
    ) -> Pruned:
        """:func:`.pruning.prune`: by age, then by size, then what no entry names."""
        from altar.execution.cache.pruning import prune  # it imports this module

        return prune(self, older_than_s=older_than_s, max_bytes=max_bytes, now=now)

    # -- serving -----------------------------------------------------------------------------

    def materialize(
        self, entry: CacheEntry, destinations: Mapping[str, str | os.PathLike[str]]
    ) -> None:
        """Put each output of ``entry`` at its destination (by logical path): linked or copied.

        A hard link costs nothing but shares the read-only object; across filesystems (or where
        links are refused) the object is copied and its digest checked in the same pass. Each
        destination appears whole: a new name is the link itself, one already there is
        replaced by rename, unless it already is the object (a plan re-run in place: the
        previous run's link), which is left as it is.
        """
        for logical_path, destination in destinations.items():
            digest = entry.outputs[logical_path]
            source, target = self._object_file(digest), os.fspath(destination)
            try:
                there = os.lstat(target)
            except OSError:
                there = None
            try:
                if there is None:
                    _link(source, target)
                elif not self._is_object(there, digest, source):
                    _link_over(source, target)
            except FileExistsError:  # a name that appeared since the lstat
                _link_over(source, target)
            except OSError as error:
                if error.errno not in _NO_LINK:
                    raise
                copy_and_verify(source, destination, digest, label=f"cached {logical_path}")

    def _is_object(self, there: os.stat_result, digest: str, source: str) -> bool:
        """Whether ``there`` (an lstat) is the object itself: a hard link to it, not a copy,
        a symlink or another file. The object's bytes, just verified, are already there."""
        ours = self._verified.get(digest)
        if ours is None:
            try:
                st = os.stat(source)
            except OSError:
                return False
            ours = (st.st_dev, st.st_ino)
        return (there.st_dev, there.st_ino) == ours

    # -- claims (see :mod:`.claims`) ---------------------------------------------------------

    def claim_path(self, key: str) -> Path:
        return self.claims.path(key)

    def claim(self, key: str, run_id: str, *, now: float | None = None) -> dict[str, Any] | None:
        """:meth:`.Claims.claim`: None if ``key`` is ours now, else the live holder's claim."""
        return self.claims.claim(key, run_id, now=now)

    def refresh(self, key: str) -> None:
        self.claims.refresh(key)

    def release(self, key: str, run_id: str) -> None:
        self.claims.release(key, run_id)

    # -- writing -----------------------------------------------------------------------------

    def put(
        self,
        key: TaskKey,
        outputs: Mapping[str, tuple[Path, str]],
        origin: Mapping[str, Any] | None = None,
    ) -> CacheEntry:
        """Store a success: ``outputs`` maps logical path -> (collected file, its digest).

        Each file is copied into the objects (its digest checked while copying) unless an
        object with that digest is already there; the manifest is renamed into place last.
        """
        for logical_path, (path, digest) in sorted(outputs.items()):
            self._add_object(path, digest, logical_path)
        entry = CacheEntry(
            key=key.digest,
            fields=key.fields,
            outputs={lp: digest for lp, (_, digest) in outputs.items()},
            origin=dict(origin or {}),
            created_at=time.time(),
        )
        data = json.dumps(entry.to_dict(), sort_keys=True, indent=1).encode("utf-8")
        manifest = self.entry_path(key.digest)
        self._publish(manifest, data)
        with contextlib.suppress(OSError):
            self._unindexed.append((entry, os.stat(manifest)))
        return entry

    @property
    def unsealed(self) -> bool:
        """Whether :meth:`seal` has anything left to record or index."""
        return bool(self._unsealed or self._unindexed)

    def seal(self) -> None:
        """Record and index what this process stored, once each object's ctime second is over.

        Each object is verified (hashed, its record written) and its entry's index row kept,
        so the next run serves it through the index instead of reading the manifest and
        hashing the object itself. What is not yet a second old waits for the next call; an
        object changed since it was stored gets no record and no row (the next lookup drops
        its entry). Index rows are written by :meth:`flush_index`.
        """
        waiting = []
        second = time.time_ns() // 1_000_000_000
        for path, digest, stored in self._unsealed:
            if stored >= second:
                waiting.append((path, digest, stored))  # its ctime second is not over: later
                continue
            # hashed again, as the next run's first lookup would: a record needs a hash that
            # began after its ctime second was over (one written within the second of its
            # copy would vouch for a write made in that second)
            with contextlib.suppress(DigestMismatchError, OSError, ValueError):
                verify_file(path, digest, label="cached object", trust_record=True, record=True)
        self._unsealed = waiting
        pending = {digest for _, digest, _ in waiting}
        self._unindexed = [
            (entry, manifest)
            for entry, manifest in self._unindexed
            if not self._index(entry, manifest) and pending & set(entry.outputs.values())
        ]

    def drop(self, key: str) -> bool:
        """Remove the entry under ``key`` (its objects stay until ``prune``); was it there?"""
        self.index.forget(key.removeprefix("sha256:"))
        try:
            os.unlink(self.entry_path(key))
        except FileNotFoundError:
            return False
        return True

    def _add_object(self, path: Path, digest: str, logical_path: str) -> None:
        target = self.object_path(digest)
        if target.exists() and not self.problems_of_object(target, digest):
            return
        tmp_dir = self.root / "tmp"
        tmp_dir.mkdir(parents=True, exist_ok=True)
        tmp = tmp_dir / f"{target.name}.{os.getpid()}.{time.monotonic_ns()}"
        try:
            copy_and_verify(path, tmp, digest, label=f"output {logical_path}")
            os.chmod(tmp, 0o444)
            _fsync_file(tmp)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, target)  # same bytes as any object already there
            _fsync_dir(target.parent)
            self._unsealed.append((str(target), digest, os.stat(target).st_ctime_ns // 10**9))
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def problems_of_object(self, path: Path, digest: str) -> list[str]:
        try:
            verify_file(path, digest, label="cached object", trust_record=True, record=True)
        except DigestMismatchError as error:
            return [str(error)]
        return []

    def _publish(self, target: Path, data: bytes) -> None:
        tmp_dir = self.root / "tmp"
        tmp_dir.mkdir(parents=True, exist_ok=True)
        tmp = tmp_dir / f"{target.name}.{os.getpid()}.{time.monotonic_ns()}"
        try:
            with open(tmp, "xb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, target)
            _fsync_dir(target.parent)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


def _unchanged_object(path: Path, digest: str) -> bool:
    """The object is still read-only and its record matches all of its stat but the ctime.

    Serving a hit links the object, and a link (or removing one) moves its ctime, which voids
    a full record: every later run would hash every object it serves again (a 1 GiB output,
    each time). Objects are written once by the store and never in place; a write to one needs
    its write bit back first (refused here) and moves its mtime past the recorded second.
    Restoring an mtime on purpose is not caught: ``altar cache verify --rehash`` reads all.
    """
    try:
        if os.stat(path).st_mode & 0o222:
            return False
    except OSError:
        return False
    return has_verification_record(path, digest, ignore_ctime=True)


def _vouched_stat(path: str, digest: str) -> tuple[int, int, int] | None:
    """The object's (size, mtime, inode) while its record vouches for it, else None.

    Stat, record, stat: a file that changed between the two stats is not vouched for.
    """
    try:
        before = os.stat(path)
        if not _unchanged_object(Path(path), digest):
            return None
        after = os.stat(path)
    except OSError:
        return None
    if (stat_triple(after), after.st_mode) != (stat_triple(before), before.st_mode):
        return None
    return stat_triple(before)


#: link(2) refused: across filesystems, by the filesystem, too many links. Then copy.
_NO_LINK = (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP)


def _link(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except FileNotFoundError:
        if not os.path.exists(source):
            raise
        os.makedirs(os.path.dirname(target), exist_ok=True)  # the first output of its folder
        os.link(source, target)


def _link_over(source: str, target: str) -> None:
    """Replace ``target`` by a link to ``source``: a temporary link beside it, renamed."""
    tmp = temp_path(target)
    os.link(source, tmp)
    try:
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    # A target that already is a link to this object (an earlier hit, a resumed run)
    # makes the rename a no-op that keeps tmp (POSIX: both names, one file).
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):  # not every filesystem lets a directory be fsynced
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
