"""Atomic writes and the cleanup that recognises their temporary files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from altar.execution.atomic import (
    atomic_write,
    remove_stale_temporaries,
    temp_owner,
    temp_path,
)


def test_atomic_write_replaces_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "a b.json"
    target.write_bytes(b"old")
    atomic_write(target, b"new")
    assert target.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a b.json"]
    assert target.stat().st_mode & 0o777 == 0o600


def test_a_failed_write_keeps_the_old_content(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "j.json"
    target.write_bytes(b"old")

    def broken_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="No space"):
        atomic_write(target, b"new")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["j.json"]


def test_temp_names_carry_their_writer() -> None:
    tmp = temp_path("/x/weights.bin", pid=4242)
    assert tmp.parent == Path("/x")
    assert tmp.name.startswith(".weights.bin.altar-tmp-4242-")
    assert temp_owner(tmp.name) == 4242
    # what altar-core 0.4 wrote is still recognised, for one release
    assert temp_owner(".journal.json.17.0123abcd.tmp") == 17
    assert temp_owner("w.bin.17.0123456789abcdef0123456789abcdef.partial") == 17
    for name in ("weights.bin", "notes.tmp", "a.partial", ".x.altar-tmp-12", "x.altar-tmp-1-ab"):
        assert temp_owner(name) is None


def test_cleanup_removes_only_the_named_writers_temporaries(tmp_path: Path) -> None:
    ours = temp_path(tmp_path / "out.bin", pid=111)
    legacy = tmp_path / "w.bin.111.0123456789abcdef.partial"
    someone_else = temp_path(tmp_path / "out.bin", pid=222)
    not_ours = tmp_path / "results.tmp"
    live = temp_path(tmp_path / "out.bin")  # this process's: a writer may still use it
    for path in (ours, legacy, someone_else, not_ours, live):
        path.write_bytes(b"x")
    (tmp_path / "sub").mkdir()
    nested = temp_path(tmp_path / "sub" / "n", pid=111)
    nested.write_bytes(b"x")
    removed = remove_stale_temporaries(tmp_path, [111, os.getpid()])
    assert sorted(removed) == sorted([ours, legacy])
    for path in (someone_else, not_ours, live, nested):
        assert path.exists()
    assert remove_stale_temporaries(tmp_path / "missing", [111]) == []


def test_atomic_write_takes_chunks_and_returns_the_size(tmp_path: Path) -> None:
    target = tmp_path / "j.json"
    assert atomic_write(target, iter([b"ab", b"", b"cde"])) == 5
    assert target.read_bytes() == b"abcde"
    assert atomic_write(target, b"xy") == 2


def test_chunks_that_fail_midway_keep_the_old_content(tmp_path: Path) -> None:
    target = tmp_path / "j.json"
    target.write_bytes(b"old")

    def chunks():
        yield b"new"
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        atomic_write(target, chunks())
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["j.json"]
