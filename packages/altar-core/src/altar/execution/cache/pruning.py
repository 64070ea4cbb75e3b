"""Pruning a store: by age, then by size, then the files no entry names (``altar cache prune``)."""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from altar.execution.cache.store import CacheEntry, CacheStore
from altar.execution.digests.digest import VERIFICATION_RECORD_SUFFIX

__all__ = ["WRITER_GRACE_S", "Pruned", "prune"]

#: ``prune`` leaves younger unreferenced files alone: a writer may be about to reference them.
WRITER_GRACE_S = 3600.0


@dataclass(frozen=True)
class Pruned:
    """What ``prune`` removed: entries, then the objects and temporary files no entry names."""

    entries: int = 0
    objects: int = 0
    bytes_freed: int = 0


def prune(
    store: CacheStore,
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
    entries = sorted(store.entries(), key=lambda e: e.created_at)
    dropped = 0
    keep: list[CacheEntry] = []
    for entry in entries:
        if older_than_s is not None and now - entry.created_at > older_than_s:
            dropped += store.drop(entry.key)
        else:
            keep.append(entry)
    if max_bytes is not None:
        users = Counter(d for e in keep for d in set(e.outputs.values()))
        sizes = {d: _object_size(store, d) for d in users}
        total = sum(sizes.values())
        while keep and total > max_bytes:
            oldest = keep.pop(0)
            dropped += store.drop(oldest.key)
            for digest in set(oldest.outputs.values()):
                users[digest] -= 1
                if not users[digest]:  # its last entry went: its bytes are freed
                    total -= sizes[digest]
    named = {store.object_path(d) for e in keep for d in e.outputs.values()}
    objects = freed = 0
    for path in _files(store, "objects"):
        base = Path(str(path).removesuffix(VERIFICATION_RECORD_SUFFIX))
        if base in named or not _older(path, now):
            continue
        size = path.stat().st_size
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            if path == base:
                objects += 1
                freed += size
    for path in _files(store, "tmp"):
        if _older(path, now):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
    # rows of entries gone another way (removed by hand, another store's drop) go too
    store.index.retain({e.key.removeprefix("sha256:") for e in keep})
    store.flush_index()
    return Pruned(dropped, objects, freed)


def _object_size(store: CacheStore, digest: str) -> int:
    try:
        return store.object_path(digest).stat().st_size
    except OSError:
        return 0


def _files(store: CacheStore, part: str) -> list[Path]:
    return [p for p in (store.root / part).rglob("*") if p.is_file()]


def _older(path: Path, now: float) -> bool:
    try:
        return now - path.stat().st_mtime > WRITER_GRACE_S
    except FileNotFoundError:
        return False
