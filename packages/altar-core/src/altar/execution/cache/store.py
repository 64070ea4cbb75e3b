"""The cache store: entries by task key, outputs by content digest, shared safely.

Layout under the store's root::

    objects/sha256/<2 hex>/<62 hex>     one file per distinct output, read-only
    entries/<2 hex>/<62 hex>.json       one manifest per task key
    tmp/                                where both are written before their rename
    claims/<64 hex>.claim               a run computing that key now (host, pid, run)

An entry is published by one ``rename`` of its manifest, after every object it names is in
place and fsynced, so a reader (another run, on another machine of a shared filesystem) sees a
whole entry or none, and a writer killed at any instant leaves at most unreferenced files in
``tmp/`` or ``objects/`` (``prune`` removes them). Objects are never rewritten: the same digest
is the same bytes, so two runs storing one output race harmlessly.

A hit is verified before it is served: every object is checked against the manifest's digest
(a current verification record makes that a ``stat``); a missing or altered object drops the
entry and the lookup is a miss, never a stale output.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from altar.execution.atomic import temp_path
from altar.execution.cache.key import TaskKey
from altar.execution.digests.copy import copy_and_verify
from altar.execution.digests.digest import (
    VERIFICATION_RECORD_SUFFIX,
    has_verification_record,
    verify_file,
)
from altar.execution.errors import DigestMismatchError

__all__ = ["ENTRY_FORMAT", "CacheEntry", "CacheStore", "Pruned", "default_store_dir"]

ENTRY_FORMAT = "altar-cache-entry/1"
#: ``prune`` leaves younger unreferenced files alone: a writer may be about to reference them.
WRITER_GRACE_S = 3600.0
#: A claim its holder has not refreshed for this long is stale (its holder on another machine
#: is gone); a holder on this machine is judged by its pid at once.
CLAIM_LEASE_S = 600.0


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
        return cls(
            key=str(data["key"]),
            fields=dict(data["fields"]),
            outputs={str(k): str(v) for k, v in dict(data["outputs"]).items()},
            origin=dict(data.get("origin", {})),
            created_at=float(data.get("created_at", 0.0)),
        )


@dataclass(frozen=True)
class Pruned:
    """What ``prune`` removed: entries, then the objects and temporary files no entry names."""

    entries: int = 0
    objects: int = 0
    bytes_freed: int = 0


class CacheStore:
    """A directory of cache entries (see the module docstring for its layout and guarantees)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    # -- paths -------------------------------------------------------------------------------

    def object_path(self, digest: str) -> Path:
        hex_ = digest.removeprefix("sha256:")
        return self.root / "objects" / "sha256" / hex_[:2] / hex_[2:]

    def entry_path(self, key: str) -> Path:
        hex_ = key.removeprefix("sha256:")
        return self.root / "entries" / hex_[:2] / f"{hex_[2:]}.json"

    # -- reading -----------------------------------------------------------------------------

    def get(self, key: TaskKey | str) -> CacheEntry | None:
        """The entry under ``key``, unverified (None if there is none or it is unreadable)."""
        digest = key.digest if isinstance(key, TaskKey) else key
        try:
            data = json.loads(self.entry_path(digest).read_text(encoding="utf-8"))
            entry = CacheEntry.from_dict(data)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError):
            return None  # a foreign or damaged manifest is a miss; verify/prune report it
        return entry if entry.key == digest else None

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
        """A verified hit, or None with the reasons a stored entry was dropped."""
        entry = self.get(key)
        if entry is None:
            return None, []
        problems = self.problems(entry)
        if problems:
            self.drop(key.digest)
            return None, problems
        return entry, []

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

    # -- pruning -----------------------------------------------------------------------------

    def prune(
        self,
        *,
        older_than_s: float | None = None,
        max_bytes: int | None = None,
        now: float | None = None,
    ) -> Pruned:
        """Drop entries older than ``older_than_s``, then the oldest until the objects fit in
        ``max_bytes``; then remove objects no entry names and stale temporary files (those
        older than :data:`WRITER_GRACE_S`, so a run storing an entry right now keeps its own).
        """
        now = time.time() if now is None else now
        entries = sorted(self.entries(), key=lambda e: e.created_at)
        dropped = 0
        keep: list[CacheEntry] = []
        for entry in entries:
            if older_than_s is not None and now - entry.created_at > older_than_s:
                dropped += self.drop(entry.key)
            else:
                keep.append(entry)
        if max_bytes is not None:
            users = Counter(d for e in keep for d in set(e.outputs.values()))
            sizes = {d: self._object_size(d) for d in users}
            total = sum(sizes.values())
            while keep and total > max_bytes:
                oldest = keep.pop(0)
                dropped += self.drop(oldest.key)
                for digest in set(oldest.outputs.values()):
                    users[digest] -= 1
                    if not users[digest]:  # its last entry went: its bytes are freed
                        total -= sizes[digest]
        named = {self.object_path(d) for e in keep for d in e.outputs.values()}
        objects = freed = 0
        for path in self._files("objects"):
            base = Path(str(path).removesuffix(VERIFICATION_RECORD_SUFFIX))
            if base in named or not _older(path, now):
                continue
            size = path.stat().st_size
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                if path == base:
                    objects += 1
                    freed += size
        for path in self._files("tmp"):
            if _older(path, now):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
        return Pruned(dropped, objects, freed)

    def _object_size(self, digest: str) -> int:
        try:
            return self.object_path(digest).stat().st_size
        except OSError:
            return 0

    def _files(self, part: str) -> list[Path]:
        return [p for p in (self.root / part).rglob("*") if p.is_file()]

    # -- serving -----------------------------------------------------------------------------

    def materialize(self, entry: CacheEntry, destinations: Mapping[str, Path]) -> None:
        """Put each output of ``entry`` at its destination (by logical path): linked or copied.

        A hard link costs nothing but shares the read-only object; across filesystems (or where
        links are refused) the object is copied and its digest checked in the same pass. Each
        destination appears whole, by rename.
        """
        for logical_path, destination in destinations.items():
            digest = entry.outputs[logical_path]
            source = self.object_path(digest)
            destination.parent.mkdir(parents=True, exist_ok=True)
            tmp = temp_path(destination)
            try:
                os.link(source, tmp)
            except OSError as error:
                if error.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
                    raise
                copy_and_verify(source, destination, digest, label=f"cached {logical_path}")
                continue
            try:
                os.replace(tmp, destination)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
            # A destination that already is a link to this object (an earlier hit, a resumed
            # run) makes the rename a no-op that keeps tmp (POSIX: both names, one file).
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    # -- claims ------------------------------------------------------------------------------

    def claim_path(self, key: str) -> Path:
        return self.root / "claims" / f"{key.removeprefix('sha256:')}.claim"

    def claim(self, key: str, run_id: str, *, now: float | None = None) -> dict[str, Any] | None:
        """Claim ``key`` for ``run_id``: None if it is ours now, else the live holder's claim.

        Two runs of one plan sharing a store then compute each task once: the second waits for
        the first's entry. A claim of our own run (a resumed run) is ours; a stale one (its
        process gone, or not refreshed for :data:`CLAIM_LEASE_S`) is broken and taken.
        """
        path = self.claim_path(key)
        mine = {"host": _HOST, "pid": os.getpid(), "run_id": run_id}
        path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(3):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                holder = self._holder(path)
                if holder is None:
                    continue  # released meanwhile: try again
                if holder.get("run_id") == run_id:
                    self.refresh(key)
                    return None
                if not _stale(holder, path, time.time() if now is None else now):
                    return holder
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)  # a dead holder's: break it and claim again
                continue
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(json.dumps(mine))
            return None
        holder = self._holder(path)
        return holder or mine

    def refresh(self, key: str) -> None:
        """Keep our claim alive (its mtime is the lease)."""
        with contextlib.suppress(OSError):
            os.utime(self.claim_path(key))

    def release(self, key: str, run_id: str) -> None:
        """Drop our claim on ``key`` (another run's claim is left alone)."""
        path = self.claim_path(key)
        holder = self._holder(path)
        if holder is not None and holder.get("run_id") == run_id:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def _holder(self, path: Path) -> dict[str, Any] | None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return {}  # being written, or damaged: judged by its age alone
        return data if isinstance(data, dict) else {}

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
        self._publish(self.entry_path(key.digest), data)
        return entry

    def drop(self, key: str) -> bool:
        """Remove the entry under ``key`` (its objects stay until ``prune``); was it there?"""
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


_HOST = socket.gethostname()


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


def _stale(holder: Mapping[str, Any], path: Path, now: float) -> bool:
    if holder.get("host") == _HOST and isinstance(holder.get("pid"), int):
        try:
            os.kill(holder["pid"], 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass  # alive, another user's
    try:
        return now - path.stat().st_mtime > CLAIM_LEASE_S
    except FileNotFoundError:
        return True


def _older(path: Path, now: float) -> bool:
    try:
        return now - path.stat().st_mtime > WRITER_GRACE_S
    except FileNotFoundError:
        return False


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
