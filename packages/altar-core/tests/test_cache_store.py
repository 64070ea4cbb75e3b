"""The cache store: whole entries or none, verified hits, links, and a writer killed (issue 25)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from altar.execution import ContainerTaskSpec, Transfer, sha256_file
from altar.execution.cache import CacheStore, task_key

IMAGE = "sha256:" + "a" * 64


def a_key(n: int = 0):
    spec = ContainerTaskSpec("k", "img", ["run", str(n)], outputs=[Transfer("o", "jobs/o.txt")])
    return task_key(spec, image=IMAGE, inputs={})


def output(tmp_path: Path, data: bytes, name: str = "o.txt") -> tuple[Path, str]:
    path = tmp_path / "collected" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path, sha256_file(path)


def test_a_stored_success_is_served_back_linked_and_identical(tmp_path):
    store = CacheStore(tmp_path / "store")
    path, digest = output(tmp_path, b"scores\n")
    stored = store.put(a_key(), {"jobs/o.txt": (path, digest)}, {"run_id": "r1", "task_id": "t"})
    entry, problems = store.lookup(a_key())
    assert problems == []
    assert entry == stored
    assert entry.origin["run_id"] == "r1"
    dest = tmp_path / "next run" / "results" / "o.txt"
    store.materialize(entry, {"jobs/o.txt": dest})
    assert dest.read_bytes() == b"scores\n"
    assert os.stat(dest).st_ino == os.stat(store.object_path(digest)).st_ino  # linked, not copied
    assert not os.access(store.object_path(digest), os.W_OK) or os.geteuid() == 0


def test_serving_onto_an_earlier_hits_link_leaves_nothing_beside_it(tmp_path):
    # rename(2) of a link onto another link of the same file does nothing: tmp would stay
    store = CacheStore(tmp_path / "store")
    path, digest = output(tmp_path, b"scores\n")
    entry = store.put(a_key(), {"jobs/o.txt": (path, digest)})
    dest = tmp_path / "results" / "o.txt"
    for _ in range(2):
        store.materialize(entry, {"jobs/o.txt": dest})
    assert os.listdir(dest.parent) == ["o.txt"]
    assert dest.read_bytes() == b"scores\n"


def test_a_re_run_in_place_links_nothing_where_the_object_already_is(tmp_path, monkeypatch):
    store = CacheStore(tmp_path / "store")
    path, digest = output(tmp_path, b"scores\n")
    entry = store.put(a_key(), {"jobs/o.txt": (path, digest)})
    dest = tmp_path / "results" / "o.txt"
    store.materialize(entry, {"jobs/o.txt": dest})  # the first run serving it
    before = os.stat(store.object_path(digest))
    links = []
    real_link = os.link
    monkeypatch.setattr(os, "link", lambda *a, **k: links.append(a) or real_link(*a, **k))
    store.materialize(entry, {"jobs/o.txt": dest})  # the plan re-run where it ran
    assert links == []
    after = os.stat(store.object_path(digest))
    assert (after.st_nlink, after.st_ctime_ns) == (before.st_nlink, before.st_ctime_ns)
    assert os.listdir(dest.parent) == ["o.txt"]
    assert os.stat(dest).st_ino == after.st_ino


@pytest.mark.parametrize("there", ["other bytes", "same bytes", "symlink", "symlink elsewhere"])
def test_a_file_at_the_uri_that_is_not_the_object_is_replaced_by_it(tmp_path, there):
    store = CacheStore(tmp_path / "store")
    path, digest = output(tmp_path, b"scores\n")
    entry = store.put(a_key(), {"jobs/o.txt": (path, digest)})
    obj = store.object_path(digest)
    dest = tmp_path / "results" / "o.txt"
    dest.parent.mkdir()
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_bytes(b"not ours\n")
    if there == "other bytes":
        dest.write_bytes(b"scoreZ\n")
    elif there == "same bytes":
        dest.write_bytes(b"scores\n")  # a copy: the user may edit it; the object is linked
    else:
        dest.symlink_to(obj if there == "symlink" else elsewhere)
    store.materialize(entry, {"jobs/o.txt": dest})
    assert not dest.is_symlink()
    assert os.stat(dest).st_ino == os.stat(obj).st_ino
    assert dest.read_bytes() == b"scores\n"
    assert elsewhere.read_bytes() == b"not ours\n"  # a symlink's target is never written
    assert os.listdir(dest.parent) == ["o.txt"]


def _a_recorded_entry(tmp_path: Path) -> tuple[CacheStore, object, Path]:
    store = CacheStore(tmp_path / "store")
    path, digest = output(tmp_path, b"weights " * 64)
    entry = store.put(a_key(), {"jobs/o.txt": (path, digest)})
    time.sleep(1.05)  # a record is earned only once the object's ctime second is over
    assert store.lookup(a_key())[1] == []
    obj = store.object_path(digest)
    assert os.path.exists(str(obj) + ".sha256-verified")
    return store, entry, obj


def test_links_made_by_serving_hits_do_not_make_later_lookups_read_the_object(
    tmp_path, monkeypatch
):
    from altar.execution.digests import digest as digest_module

    store, entry, obj = _a_recorded_entry(tmp_path)
    before = os.stat(obj).st_ctime_ns
    for n in range(3):
        store.materialize(entry, {"jobs/o.txt": tmp_path / f"run{n}" / "o.txt"})
    (tmp_path / "run0" / "o.txt").unlink()  # a run's results removed: its ctime moves again
    assert os.stat(obj).st_ctime_ns != before
    reads = []
    real_hash = digest_module._hash_fd
    monkeypatch.setattr(digest_module, "_hash_fd", lambda fd, *a: reads.append(fd) or real_hash(fd))
    assert store.lookup(a_key()) == (entry, [])
    assert reads == []
    assert store.problems(entry, rehash=True) == []  # `altar cache verify --rehash` reads it
    assert len(reads) == 1


@pytest.mark.parametrize("restore_mode", [True, False])
def test_an_object_rewritten_through_a_served_link_is_a_miss(tmp_path, restore_mode):
    store, entry, _obj = _a_recorded_entry(tmp_path)
    served = tmp_path / "run" / "o.txt"
    store.materialize(entry, {"jobs/o.txt": served})
    os.chmod(served, 0o644)  # the user makes the served output writable and edits it in place
    with open(served, "r+b") as f:
        f.write(b"W")  # same size, other bytes
    if restore_mode:
        os.chmod(served, 0o444)
    found, problems = store.lookup(a_key())
    assert found is None
    assert problems
    assert "cached output jobs/o.txt" in problems[0]


def test_identical_outputs_are_stored_once(tmp_path):
    store = CacheStore(tmp_path / "store")
    path, digest = output(tmp_path, b"same bytes")
    store.put(a_key(1), {"jobs/o.txt": (path, digest)})
    store.put(a_key(2), {"jobs/o.txt": (path, digest)})
    objects = [p for p in (tmp_path / "store" / "objects").rglob("*") if p.is_file()]
    assert [p for p in objects if not p.name.endswith(".sha256-verified")] == [
        store.object_path(digest)
    ]


@pytest.mark.parametrize("damage", ["delete", "alter"])
def test_a_missing_or_altered_object_is_a_miss_that_drops_the_entry(tmp_path, damage):
    store = CacheStore(tmp_path / "store")
    path, digest = output(tmp_path, b"scores\n")
    store.put(a_key(), {"jobs/o.txt": (path, digest)})
    obj = store.object_path(digest)
    if damage == "delete":
        obj.unlink()
    else:
        os.chmod(obj, 0o644)
        obj.write_bytes(b"scoreZ\n")  # same size, other bytes
    entry, problems = store.lookup(a_key())
    assert entry is None
    assert len(problems) == 1
    assert "jobs/o.txt" in problems[0]
    assert store.get(a_key()) is None  # dropped: the task runs again and stores anew


def test_a_collected_output_that_does_not_match_its_digest_is_not_stored(tmp_path):
    store = CacheStore(tmp_path / "store")
    path, _ = output(tmp_path, b"scores\n")
    with pytest.raises(ValueError, match=r"jobs/o\.txt"):
        store.put(a_key(), {"jobs/o.txt": (path, "sha256:" + "0" * 64)})
    assert store.get(a_key()) is None
    assert list((tmp_path / "store" / "tmp").iterdir()) == []


def test_a_damaged_manifest_is_a_miss(tmp_path):
    store = CacheStore(tmp_path / "store")
    path, digest = output(tmp_path, b"x")
    store.put(a_key(), {"jobs/o.txt": (path, digest)})
    store.entry_path(a_key().digest).write_text("{not json")
    assert store.lookup(a_key()) == (None, [])


WRITER = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from altar.execution import ContainerTaskSpec, Transfer, sha256_file
    from altar.execution.cache import CacheStore, task_key

    store, source = CacheStore(sys.argv[1]), Path(sys.argv[2])
    block = os.urandom(4 << 20)
    print("ready", flush=True)
    n = 0
    while True:
        source.write_bytes(block + str(n).encode())  # a new object each time
        spec = ContainerTaskSpec("k", "img", ["run", str(n)], outputs=[Transfer("o", "jobs/o")])
        key = task_key(spec, image="sha256:" + "a" * 64, inputs={})
        store.put(key, {"jobs/o": (source, sha256_file(source))})
        n += 1
    """
)


def test_a_writer_killed_at_any_instant_leaves_only_whole_entries(tmp_path):
    store_dir = tmp_path / "store"
    for attempt in range(10):
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(store_dir), str(tmp_path / f"src{attempt}")],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"
        time.sleep(0.1 + 0.037 * attempt)  # lands in a different phase of a put each time
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    store = CacheStore(store_dir)
    entries = list(store.entries())
    assert entries  # the writer stored some before each kill
    for entry in entries:
        assert store.problems(entry) == []
    for manifest in (store_dir / "entries").rglob("*.json"):
        assert store.get("sha256:" + manifest.parent.name + manifest.stem) is not None


# -- pruning and the `altar cache` commands ---------------------------------------------------


def test_prune_drops_by_age_then_by_size_and_keeps_what_a_writer_may_still_need(tmp_path):
    store = CacheStore(tmp_path / "store")
    keys = [a_key(n) for n in range(4)]
    now = time.time()
    for n, key in enumerate(keys):  # made 4000, 3000, 2000 and 1000 s ago
        path, digest = output(tmp_path, bytes([n]) * 1000, f"o{n}")
        entry = store.put(key, {"jobs/o.txt": (path, digest)})
        dated = {**entry.to_dict(), "created_at": now - 1000.0 * (4 - n)}
        store.entry_path(key.digest).write_text(json.dumps(dated))
    pruned = store.prune(older_than_s=2500)
    assert pruned.entries == 2
    assert pruned.objects == 0  # their objects are fresh: a writer may be publishing them
    assert store.get(keys[1]) is None
    assert store.get(keys[2]) is not None
    for path in (tmp_path / "store" / "objects").rglob("*"):
        if path.is_file():  # as if written two hours ago
            os.utime(path, (now - 7200, now - 7200))
    pruned = store.prune(max_bytes=1000)  # two entries of 1000 bytes: the older goes
    assert pruned.entries == 1
    assert store.get(keys[2]) is None
    assert store.get(keys[3]) is not None
    assert (pruned.objects, pruned.bytes_freed) == (3, 3000)  # no entry names them any more
    assert store.lookup(keys[3])[1] == []  # what is left is whole


def test_altar_cache_ls_verify_and_prune(tmp_path, capsys):
    from altar.execution.cli import command as cli

    store = CacheStore(tmp_path / "store")
    path, digest = output(tmp_path, b"scores\n")
    store.put(a_key(), {"jobs/o.txt": (path, digest)}, {"run_id": "r1", "task_id": "score-f1"})
    where = ["--cache", str(tmp_path / "store")]
    assert cli.main(["cache", "ls", *where]) == 0
    assert "score-f1 of run r1" in capsys.readouterr().out
    assert cli.main(["cache", "verify", *where]) == 0
    assert capsys.readouterr().out == "1 of 1 entries ok\n"
    obj = store.object_path(digest)
    os.chmod(obj, 0o644)
    obj.write_bytes(b"altered\n")
    assert cli.main(["cache", "verify", "--drop", *where]) == 1
    out = capsys.readouterr().out
    assert "jobs/o.txt" in out
    assert out.endswith("0 of 1 entries ok (dropped)\n")
    assert store.get(a_key()) is None
    assert cli.main(["cache", "prune", *where]) == 2  # says what to drop, drops nothing
    assert "--older-than" in capsys.readouterr().err
    assert cli.main(["cache", "ls", "--cache", str(tmp_path / "nope")]) == 2


def test_recorded_digest_trusts_only_a_current_record_and_never_blocks_on_a_fifo(tmp_path):
    from altar.execution.digests.digest import (
        record_path,
        recorded_digest,
        write_verification_record,
    )

    path = tmp_path / "w.bin"
    path.write_bytes(b"weights")
    before = os.stat(path)
    time.sleep(1.1)  # a record is written only once the file's ctime second is over
    digest = sha256_file(path)
    assert write_verification_record(path, digest, before)
    assert recorded_digest(path) == digest
    path.write_bytes(b"weightZ")  # changed: the record vouches for nothing
    assert recorded_digest(path) is None
    os.unlink(record_path(path))
    os.mkfifo(record_path(path))  # planted: read without blocking, refused
    assert recorded_digest(path) is None
