"""The store's index (issue 25): a hit costs two stats; a stale, corrupt or hostile row is never
trusted, and the entries stay the source of truth."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from altar.execution import ContainerTaskSpec, Transfer, sha256_file
from altar.execution.cache import CacheStore, TaskKey, task_key
from altar.execution.cache.index import INDEX_FORMAT

IMAGE = "sha256:" + "a" * 64


def a_key(n: int = 0, logical: str = "jobs/o.txt") -> TaskKey:
    spec = ContainerTaskSpec("k", "img", ["run", str(n)], outputs=[Transfer("o", logical)])
    return task_key(spec, image=IMAGE, inputs={})


def stored(tmp_path: Path, keys: list[TaskKey], logical: str = "jobs/o.txt") -> CacheStore:
    """A store holding one entry per key (a distinct object each), its records written."""
    store = CacheStore(tmp_path / "store")
    for n, key in enumerate(keys):
        path = tmp_path / "collected" / f"o{n}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(f"scores {n}\n".encode())
        store.put(key, {logical: (path, sha256_file(path))}, {"run_id": "r1", "task_id": f"t{n}"})
    time.sleep(1.05)  # a record is earned only once the objects' ctime second is over
    return store


def indexed(tmp_path: Path, keys: list[TaskKey], logical: str = "jobs/o.txt") -> CacheStore:
    """:func:`stored`, each entry looked up once the slow way and its index row written."""
    store = stored(tmp_path, keys, logical)
    for key in keys:
        assert store.lookup(key)[0] is not None
    store.flush_index()
    return store


def shard(store: CacheStore, key: TaskKey) -> Path:
    return store.root / "index" / f"{key.hex[:2]}.json"


def rows(store: CacheStore, key: TaskKey) -> dict[str, object]:
    data = json.loads(shard(store, key).read_text())
    assert data["format"] == INDEX_FORMAT
    return data["rows"]  # type: ignore[no-any-return]


def test_a_hit_through_the_index_reads_no_manifest_and_no_record(tmp_path, monkeypatch):
    keys = [a_key(n) for n in range(3)]
    first = indexed(tmp_path, keys)
    wanted = [first.get(key) for key in keys]
    assert key_in_index(first, keys[0])
    from altar.execution.cache import store as store_module

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("the slow way was taken")

    monkeypatch.setattr(store_module.CacheStore, "_read", refused)
    monkeypatch.setattr(store_module, "has_verification_record", refused)
    store = CacheStore(tmp_path / "store")  # another run: the index read from its shards
    stats = []
    real_stat = os.stat
    monkeypatch.setattr(os, "stat", lambda path, *a, **k: stats.append(path) or real_stat(path))
    for key, entry in zip(keys, wanted, strict=True):
        assert store.lookup(key) == (entry, [])
    assert len(stats) == 2 * len(keys)  # the manifest's and the object's, nothing else
    dest = tmp_path / "run2" / "o.txt"
    store.materialize(wanted[0], {"jobs/o.txt": dest})  # type: ignore[arg-type]
    assert dest.read_bytes() == b"scores 0\n"


def key_in_index(store: CacheStore, key: TaskKey) -> bool:
    return shard(store, key).exists() and key.hex in rows(store, key)


@pytest.mark.parametrize("damage", ["altered", "deleted", "manifest dropped"])
def test_a_stale_row_is_a_miss_the_slow_way_and_is_dropped(tmp_path, damage):
    key = a_key()
    first = indexed(tmp_path, [key])
    entry = first.get(key)
    assert entry is not None
    obj = first.object_path(entry.outputs["jobs/o.txt"])
    if damage == "altered":  # same size, through its write bit: mtime and mode move
        os.chmod(obj, 0o644)
        obj.write_bytes(b"scores X\n")
    elif damage == "deleted":
        obj.unlink()
    else:  # another run dropped the entry without touching the index
        first.entry_path(key.digest).unlink()
    store = CacheStore(tmp_path / "store")
    found, problems = store.lookup(key)
    assert found is None
    assert bool(problems) == (damage != "manifest dropped")  # said, when an entry was dropped
    assert store.get(key) is None  # the entry went too
    store.flush_index()
    assert not key_in_index(store, key)


def test_a_corrupt_shard_is_ignored_then_rebuilt(tmp_path):
    keys = [a_key(n) for n in range(2)]
    first = indexed(tmp_path, keys)
    for key in keys:
        shard(first, key).write_text('{"format": "altar-cache-index/1", "rows": {')  # torn
    store = CacheStore(tmp_path / "store")
    for key in keys:
        entry, problems = store.lookup(key)  # the slow way: still a verified hit
        assert entry is not None
        assert problems == []
    store.flush_index()
    assert all(key_in_index(store, key) for key in keys)


def test_hostile_rows_are_never_trusted(tmp_path, monkeypatch):
    key = a_key()
    first = indexed(tmp_path, [key])
    data = json.loads(shard(first, key).read_text())
    row = data["rows"][key.hex]
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"not from the store\n")
    # a row naming a file outside the store, and rows that are not rows at all
    escape = "sha256:../../../" + os.path.relpath(outside, first.root / "objects" / "sha256")
    row["o"] = {escape: row["o"][next(iter(row["o"]))]}
    row["p"] = {"jobs/o.txt": escape}
    data["rows"]["../../" + "0" * 58] = row
    data["rows"][key.hex[:63] + "g"] = row
    shard(first, key).write_text(json.dumps(data))
    store = CacheStore(tmp_path / "store")
    entry, problems = store.lookup(key)  # the hostile row ignored: the slow way, verified
    assert entry is not None
    assert entry.outputs["jobs/o.txt"] == first.get(key).outputs["jobs/o.txt"]  # type: ignore[union-attr]
    assert problems == []
    assert store.index.row("../../" + "0" * 58) is None


def test_hostile_task_ids_and_logical_paths_round_trip(tmp_path):
    logical = 'jobs/fold 1/"weights"\n\u00e9\u4e2d.bin'
    key = a_key(0, logical)
    store = CacheStore(tmp_path / "store")
    path = tmp_path / "o.bin"
    path.write_bytes(b"w")
    task_id = 'score"; rm -rf / #\n../..\u2028'
    origin = {"run_id": "r\x00", "task_id": task_id}
    store.put(key, {logical: (path, sha256_file(path))}, origin)
    time.sleep(1.05)
    assert store.lookup(key)[0] is not None
    store.flush_index()
    again = CacheStore(tmp_path / "store")
    entry, _ = again.lookup(key)
    assert entry is not None
    assert again.index.row(key.hex) is not None  # served through the index
    assert entry.origin == origin
    assert list(entry.outputs) == [logical]
    dest = tmp_path / "out" / "x y" / "o.bin"
    again.materialize(entry, {logical: dest})
    assert dest.read_bytes() == b"w"


def test_two_writers_merge_their_rows_into_one_shard(tmp_path):
    # keys of one shard (the same first byte), entries stored by two runs
    keys: list[TaskKey] = []
    n = 0
    while len(keys) < 4:
        key = a_key(n)
        if not keys or key.hex[:2] == keys[0].hex[:2]:
            keys.append(key)
        n += 1
    stored(tmp_path, keys)
    a, b = CacheStore(tmp_path / "store"), CacheStore(tmp_path / "store")
    for key in keys[:2]:
        assert a.lookup(key)[0] is not None
    for key in keys[2:]:
        assert b.lookup(key)[0] is not None
    b.flush_index()  # b first: a re-reads the shard and keeps b's rows
    a.flush_index()
    assert all(key_in_index(a, key) for key in keys)


CONCURRENT = textwrap.dedent(
    """
    import sys
    from altar.execution import ContainerTaskSpec, Transfer
    from altar.execution.cache import CacheStore, task_key

    def key(n):
        outputs = [Transfer("o", "jobs/o.txt")]
        spec = ContainerTaskSpec("k", "img", ["run", str(n)], outputs=outputs)
        return task_key(spec, image="sha256:" + "a" * 64, inputs={})

    for round in range(int(sys.argv[2])):
        store = CacheStore(sys.argv[1])  # a new run each round: the index read afresh
        for n in range(int(sys.argv[3])):
            entry, problems = store.lookup(key(n))
            assert entry is not None and not problems, (n, problems)
            store.index.forget(key(n).hex)  # rows churn: every round rewrites every shard
        store.flush_index()
        for n in range(int(sys.argv[3])):
            store.lookup(key(n))
        store.flush_index()
    """
)


def test_concurrent_writers_leave_whole_shards_and_correct_hits(tmp_path):
    keys = [a_key(n) for n in range(12)]
    stored(tmp_path, keys)
    procs = [
        subprocess.Popen([sys.executable, "-c", CONCURRENT, str(tmp_path / "store"), "8", "12"])
        for _ in range(2)
    ]
    assert [proc.wait(timeout=120) for proc in procs] == [0, 0]
    store = CacheStore(tmp_path / "store")
    for path in (tmp_path / "store" / "index").iterdir():
        assert json.loads(path.read_text())["format"] == INDEX_FORMAT  # whole, never torn
    for key in keys:
        assert store.lookup(key)[1] == []
        assert store.lookup(key)[0] is not None


def test_prune_drops_the_rows_of_entries_that_are_gone(tmp_path):
    keys = [a_key(n) for n in range(3)]
    store = indexed(tmp_path, keys)
    store.entry_path(keys[0].digest).unlink()  # removed by hand: its row is stale
    entry = store.get(keys[1])
    assert entry is not None
    dated = {**entry.to_dict(), "created_at": time.time() - 7200}
    store.entry_path(keys[1].digest).write_text(json.dumps(dated))  # old: prune drops it
    pruned = CacheStore(tmp_path / "store").prune(older_than_s=3600)
    assert pruned.entries == 1
    again = CacheStore(tmp_path / "store")
    assert [key_in_index(again, key) for key in keys] == [False, False, True]


def test_what_a_run_stored_is_recorded_and_indexed_once_a_second_old(tmp_path, monkeypatch):
    store = CacheStore(tmp_path / "store")
    keys = [a_key(n) for n in range(3)]
    for n, key in enumerate(keys):
        path = tmp_path / f"o{n}"
        path.write_bytes(f"scores {n}\n".encode())
        store.put(key, {"jobs/o.txt": (path, sha256_file(path))})
    store.seal()  # the same second: nothing recorded yet, nothing lost
    assert store.unsealed
    assert not list((tmp_path / "store" / "objects").rglob("*.sha256-verified"))
    altered = store.object_path(store.get(keys[2]).outputs["jobs/o.txt"])  # type: ignore[union-attr]
    os.chmod(altered, 0o644)
    altered.write_bytes(b"scores X\n")  # changed after it was stored: never vouched for
    time.sleep(1.05)
    store.seal()
    store.flush_index()
    assert not store.unsealed
    assert [key_in_index(store, key) for key in keys] == [True, True, False]
    from altar.execution.cache import store as store_module

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("the slow way was taken")

    monkeypatch.setattr(store_module.CacheStore, "_read", refused)
    later = CacheStore(tmp_path / "store")  # the next run: served through the index
    for key in keys[:2]:
        assert later.lookup(key)[0] is not None
    monkeypatch.undo()
    entry, problems = CacheStore(tmp_path / "store").lookup(keys[2])
    assert entry is None  # the altered object: hashed, a miss, dropped
    assert problems
