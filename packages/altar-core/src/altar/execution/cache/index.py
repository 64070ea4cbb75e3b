"""The store's index: what a verified hit needs, so that one costs a ``stat`` per file.

Without it a hit reads the entry's manifest and each object's verification record (two opens,
two reads and a JSON parse per task). The index keeps, per entry, the manifest's stat, each
object's stat as its record vouched for it, and the manifest's outputs and origin, in 256
shard files keyed by the key's first byte::

    index/<2 hex>.json     {"format": ..., "rows": {<64 hex key>: row}}

A hit through the index stats the manifest (same size, mtime and inode: the entry was neither
dropped nor replaced) and each object (a read-only regular file with the size, mtime and inode
it had when its verification record held). That is the check ``_unchanged_object`` makes
through the record, minus reading it: an object is written once and never in place, and a
write to one needs its write bit back and moves its mtime.

The entries stay the source of truth; the index is a cache of them. A row is only written
for an entry just verified the slow way; a row that no longer matches its files is dropped
and the lookup goes the slow way (and may write the row anew). A shard that cannot be read,
or a row that does not parse, is ignored: the shard is rebuilt from what later lookups learn.
A shard is replaced whole by one rename (re-read and merged first, so two writers lose at
most a row to each other, never the file), so a writer killed at any instant leaves the old
shard or the new one. Not fsynced: a shard lost to a power cut only costs the slow way.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat as stat_module
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from altar.execution.types import is_sha256_digest

__all__ = ["INDEX_FORMAT", "CacheIndex", "IndexRow", "stat_triple"]

INDEX_FORMAT = "altar-cache-index/1"
_HEX = frozenset("0123456789abcdef")

Triple = tuple[int, int, int]  # size, mtime (ns), inode


def stat_triple(st: os.stat_result) -> Triple:
    return (st.st_size, st.st_mtime_ns, st.st_ino)


@dataclass(frozen=True)
class IndexRow:
    """One entry as the index knows it (see the module docstring)."""

    manifest: Triple
    objects: Mapping[str, Triple]  # digest -> its stat when its record held
    outputs: Mapping[str, str]  # logical path -> digest, as the manifest says
    origin: Mapping[str, Any]
    created_at: float

    def to_json(self) -> dict[str, Any]:
        return {
            "m": list(self.manifest),
            "o": {digest: list(triple) for digest, triple in self.objects.items()},
            "p": dict(self.outputs),
            "r": dict(self.origin),
            "t": self.created_at,
        }

    @classmethod
    def from_json(cls, data: Any) -> IndexRow | None:
        """The row, or None if it is not one this code wrote (a hostile or damaged row)."""
        try:
            objects = {d: _triple(t) for d, t in data["o"].items()}
            outputs = data["p"]
            origin, created_at = data["r"], data["t"]
            manifest = _triple(data["m"])
        except (KeyError, TypeError, ValueError, AttributeError):
            return None
        if not (
            type(outputs) is dict
            and type(origin) is dict
            and type(created_at) in (int, float)
            # a digest names a path under objects/: only well-formed ones, each one vouched for
            and all(map(is_sha256_digest, objects))
            and all(type(p) is str for p in outputs)
            and set(outputs.values()) == set(objects)
        ):
            return None
        return cls(manifest, objects, outputs, origin, float(created_at))


def _triple(value: Any) -> Triple:
    # read 10,000 times by a 10,000-task cached run: unrolled
    if type(value) is list and len(value) == 3:
        size, mtime, inode = value
        if type(size) is int and type(mtime) is int and type(inode) is int:
            return (size, mtime, inode)
    raise TypeError("not three integers")


def valid_hex(hex_: str) -> bool:
    return len(hex_) == 64 and _HEX.issuperset(hex_)


class CacheIndex:
    """The index under ``root`` (a store's root): read lazily, written by :meth:`flush`.

    One process's instance is used from one thread at a time (a run's lookups happen in one
    worker-thread call per tick).
    """

    def __init__(self, root: str) -> None:
        self.root = root
        self._shards: dict[str, dict[str, Any]] = {}  # shard -> raw rows as read
        self._rows: dict[str, IndexRow | None] = {}  # key hex -> parsed row (None: none)
        self._dirty: dict[str, dict[str, IndexRow | None]] = {}  # shard -> key -> row/removal

    def shard_path(self, shard: str) -> str:
        return os.path.join(self.root, "index", f"{shard}.json")

    # -- reading -----------------------------------------------------------------------------

    def row(self, hex_: str) -> IndexRow | None:
        """The row of key ``hex_`` (64 hex digits), or None."""
        if hex_ in self._rows:
            return self._rows[hex_]
        if not valid_hex(hex_):
            return None
        raw = self._shard(hex_[:2]).get(hex_)
        row = IndexRow.from_json(raw) if raw is not None else None
        self._rows[hex_] = row
        return row

    def _shard(self, shard: str) -> dict[str, Any]:
        if shard not in self._shards:
            self._shards[shard] = _read_shard(self.shard_path(shard))
        return self._shards[shard]

    def fresh(
        self,
        hex_: str,
        manifest: str,
        object_path: Any,
        seen: dict[str, tuple[int, int]] | None = None,
    ) -> IndexRow | None:
        """The row of ``hex_`` if its manifest and objects are as it says (a stat each), else
        None; a row that no longer matches is dropped (at the next :meth:`flush`).

        ``object_path(digest)`` names an object's file; ``seen`` gets each object's (device,
        inode) as those stats found it.
        """
        row = self._rows[hex_] if hex_ in self._rows else self.row(hex_)
        if row is None:
            return None
        try:
            st = os.stat(manifest)
            if (st.st_size, st.st_mtime_ns, st.st_ino) != row.manifest:
                raise OSError("the manifest changed")
            for digest, triple in row.objects.items():
                st = os.stat(object_path(digest))
                if (
                    (st.st_size, st.st_mtime_ns, st.st_ino) != triple
                    or st.st_mode & 0o222
                    or not stat_module.S_ISREG(st.st_mode)
                ):
                    raise OSError("the object changed")
                if seen is not None:
                    seen[digest] = (st.st_dev, st.st_ino)
        except OSError:
            self.forget(hex_)
            return None
        return row

    # -- writing -----------------------------------------------------------------------------

    def learn(self, hex_: str, row: IndexRow) -> None:
        """Keep ``row`` for ``hex_`` (written at the next :meth:`flush`)."""
        if valid_hex(hex_):
            self._rows[hex_] = row
            self._dirty.setdefault(hex_[:2], {})[hex_] = row

    def forget(self, hex_: str) -> None:
        """Drop the row of ``hex_``, if the index has one (at the next :meth:`flush`)."""
        if valid_hex(hex_) and self.row(hex_) is not None:
            self._rows[hex_] = None
            self._dirty.setdefault(hex_[:2], {})[hex_] = None

    def retain(self, keys: set[str]) -> None:
        """Drop every row whose key (64 hex) is not in ``keys`` (``prune``: what it kept)."""
        for shard in (f"{n:02x}" for n in range(256)):
            for hex_ in list(self._shard(shard)):
                if hex_ not in keys:  # a row that does not parse goes too
                    self._rows[hex_] = None
                    self._dirty.setdefault(shard, {})[hex_] = None

    def flush(self, tmp_dir: str) -> int:
        """Write every shard changed since the last flush; the number written.

        Each is read again and merged first (another run may have written it meanwhile),
        then replaced by one rename of a file written in ``tmp_dir``. A shard that cannot be
        written is left: the index is a cache.
        """
        written = 0
        dirty, self._dirty = self._dirty, {}
        for shard, changes in sorted(dirty.items()):
            rows = dict(_read_shard(self.shard_path(shard)))
            for hex_, row in changes.items():
                if row is None:
                    rows.pop(hex_, None)
                else:
                    rows[hex_] = row.to_json()
            self._shards[shard] = rows
            for hex_ in rows.keys() - changes.keys():
                self._rows.pop(hex_, None)  # another writer's rows: parsed again when asked
            data = json.dumps({"format": INDEX_FORMAT, "rows": rows}, separators=(",", ":"))
            with contextlib.suppress(OSError):
                _replace(self.shard_path(shard), data.encode("utf-8"), tmp_dir)
                written += 1
        return written


def _read_shard(path: str) -> dict[str, Any]:
    """A shard's rows, or none if it is missing, unreadable or not an index shard."""
    try:
        with open(path, "rb") as handle:
            data = json.loads(handle.read())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("format") != INDEX_FORMAT:
        return {}
    rows = data.get("rows")
    return rows if isinstance(rows, dict) else {}


def _replace(target: str, data: bytes, tmp_dir: str) -> None:
    os.makedirs(tmp_dir, exist_ok=True)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    name = f"index-{os.path.basename(target)}.{os.getpid()}.{os.urandom(6).hex()}"
    tmp = os.path.join(tmp_dir, name)
    try:
        with open(tmp, "xb") as handle:
            handle.write(data)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
