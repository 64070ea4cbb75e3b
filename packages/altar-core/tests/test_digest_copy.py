"""copy_and_verify: one pass, temp file + rename, never touches the source."""

from __future__ import annotations

import contextvars
import errno
import hashlib
import itertools
import os
import subprocess
import threading
from pathlib import Path

import pytest
from altar.execution import TransferIntegrityError, copy_and_verify
from altar.execution.digests import digest

MiB = 1 << 20


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@pytest.fixture(params=["kernel", "user"])
def copy_route(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test through copy_file_range, and again through the user-space fallback."""
    if request.param == "user":

        def cross_device(*args: object) -> int:
            raise OSError(errno.EXDEV, "Invalid cross-device link")

        monkeypatch.setattr(digest.os, "copy_file_range", cross_device)
    return str(request.param)


def snapshot(path: Path) -> tuple[bytes, int, int, int, int]:
    st = os.stat(path)
    return path.read_bytes(), st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_mode


@pytest.mark.parametrize("size", [0, 1, MiB - 1, MiB, 4 * MiB, 4 * MiB + 1, 9 * MiB + 7])
def test_copies_and_hashes_in_one_pass(tmp_path: Path, size: int, copy_route: str) -> None:
    data = os.urandom(size)
    source = tmp_path / "src"
    source.write_bytes(data)
    os.chmod(source, 0o640)
    before = snapshot(source)
    result = copy_and_verify(source, tmp_path / "dest", sha(data))
    assert result.digest == sha(data)
    assert (tmp_path / "dest").read_bytes() == data
    assert result.stat.st_ino == os.stat(tmp_path / "dest").st_ino
    assert result.stat.st_mode & 0o777 == 0o640
    assert snapshot(source) == before
    assert sorted(os.listdir(tmp_path)) == ["dest", "src"]
    assert copy_and_verify(source, tmp_path / "dest2").digest == sha(data)  # no digest given


@pytest.mark.parametrize("size", [10, 6 * MiB])
def test_mismatch_removes_the_temp_and_keeps_source_and_old_destination(
    tmp_path: Path, size: int, copy_route: str
) -> None:
    data = os.urandom(size)
    source = tmp_path / "src"
    source.write_bytes(data)
    dest = tmp_path / "dest"
    dest.write_bytes(b"old copy")
    before, old = snapshot(source), snapshot(dest)
    wrong = sha(b"other")
    with pytest.raises(TransferIntegrityError) as caught:
        copy_and_verify(source, dest, wrong, label="input 'genome'")
    assert (
        str(caught.value)
        == f"input 'genome' at {str(source)!r} has digest {sha(data)}; expected {wrong}"
    )
    assert snapshot(source) == before
    assert snapshot(dest) == old
    assert sorted(os.listdir(tmp_path)) == ["dest", "src"]


def test_existing_destination_is_replaced_by_rename_not_rewritten(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.write_bytes(b"new bytes")
    dest = tmp_path / "dest"
    dest.write_bytes(b"old bytes, read by a running task")
    with dest.open("rb") as reader:  # a task that opened the old file keeps its bytes
        old_inode = os.fstat(reader.fileno()).st_ino
        copy_and_verify(source, dest, sha(b"new bytes"))
        assert reader.read() == b"old bytes, read by a running task"
    assert dest.read_bytes() == b"new bytes"
    assert os.stat(dest).st_ino != old_inode


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_source_that_is_not_a_file(tmp_path: Path, kind: str) -> None:
    source = tmp_path / "src"
    if kind == "directory":
        source.mkdir()
    elif kind == "fifo":
        os.mkfifo(source)
    with pytest.raises(TransferIntegrityError, match="regular file"):
        copy_and_verify(source, tmp_path / "dest", sha(b"x"))
    assert not (tmp_path / "dest").exists()
    assert sorted(os.listdir(tmp_path)) == ["src"]


def test_destination_that_is_the_source_is_never_rewritten(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.write_bytes(b"caller's file")
    os.link(source, tmp_path / "hardlink")
    before = snapshot(source)
    result = copy_and_verify(source, tmp_path / "hardlink", sha(b"caller's file"))
    assert result.digest == sha(b"caller's file")
    with pytest.raises(TransferIntegrityError, match="has digest"):
        copy_and_verify(source, source, sha(b"other"))
    assert snapshot(source) == before  # not replaced, not removed
    assert sorted(os.listdir(tmp_path)) == ["hardlink", "src"]


@pytest.mark.parametrize("size", [3 * MiB, 24 * MiB])
@pytest.mark.parametrize("fail_after", [0, 2 * MiB])
def test_disk_full_at_the_write_seam_removes_the_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: int, fail_after: int, copy_route: str
) -> None:
    source = tmp_path / "src"
    source.write_bytes(os.urandom(size))
    before = snapshot(source)
    written = 0
    real_write, real_copy = os.write, os.copy_file_range

    def filling_write(fd: int, data) -> int:  # type: ignore[no-untyped-def]
        nonlocal written
        if written >= fail_after:
            raise OSError(errno.ENOSPC, "No space left on device")
        written += real_write(fd, data)
        return len(data)

    def filling_copy(src: int, dst: int, count: int, *offsets: int) -> int:
        nonlocal written
        if written >= fail_after:
            raise OSError(errno.ENOSPC, "No space left on device")
        copied = real_copy(src, dst, count, *offsets)
        written += copied
        return copied

    monkeypatch.setattr(digest.os, "write", filling_write)
    if copy_route == "kernel":
        monkeypatch.setattr(digest.os, "copy_file_range", filling_copy)
    with pytest.raises(OSError) as caught:
        copy_and_verify(source, tmp_path / "dest", None, label="input 'genome'")
    monkeypatch.undo()
    assert caught.value.errno == errno.ENOSPC
    assert "no space left while copying input 'genome'" in str(caught.value)
    assert "the partial copy was removed" in str(caught.value)
    assert snapshot(source) == before
    assert sorted(os.listdir(tmp_path)) == ["src"]


def test_disk_full_on_a_real_small_tmpfs(tmp_path: Path) -> None:
    source = tmp_path / "src"
    data = os.urandom(3 * MiB)
    source.write_bytes(data)
    mount = tmp_path / "small"
    mount.mkdir()
    try:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
            check=True,
            capture_output=True,
        )
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        with pytest.raises(OSError) as caught:
            copy_and_verify(source, mount / "dest", sha(data))
        assert caught.value.errno == errno.ENOSPC
        assert os.listdir(mount) == []
        small = os.urandom(100_000)
        (tmp_path / "small-src").write_bytes(small)
        copy_and_verify(tmp_path / "small-src", mount / "dest", sha(small))  # space is back
        assert os.listdir(mount) == ["dest"]
    finally:
        subprocess.run(["umount", str(mount)], check=True)
    assert source.read_bytes() == data


def test_interrupt_mid_copy_removes_the_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, copy_route: str
) -> None:
    source = tmp_path / "src"
    source.write_bytes(os.urandom(40 * MiB))
    calls = 0
    name = "copy_file_range" if copy_route == "kernel" else "readv"
    real = getattr(os, name)

    def interrupted(*args):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        if calls == 3:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(digest.os, name, interrupted)
    with pytest.raises(KeyboardInterrupt):
        copy_and_verify(source, tmp_path / "dest", None)
    monkeypatch.undo()
    assert calls == 3
    assert sorted(os.listdir(tmp_path)) == ["src"]


def test_hashes_exactly_the_bytes_it_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, copy_route: str
) -> None:
    """A source that changes mid-copy: the digest still describes the destination's bytes."""
    source = tmp_path / "src"
    source.write_bytes(b"a" * (40 * MiB))
    name = "copy_file_range" if copy_route == "kernel" else "readv"
    real = getattr(os, name)
    calls = 0

    def changing(*args):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        if calls == 3:
            with source.open("r+b") as handle:
                handle.write(b"b" * (40 * MiB))
        return real(*args)

    monkeypatch.setattr(digest.os, name, changing)
    result = copy_and_verify(source, tmp_path / "dest")
    monkeypatch.undo()
    copied = (tmp_path / "dest").read_bytes()
    assert result.digest == sha(copied)
    assert copied != source.read_bytes()


def test_large_copies_go_through_the_kernel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "src"
    data = os.urandom(20 * MiB)
    source.write_bytes(data)
    calls = 0
    real = os.copy_file_range

    def counting(*args):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        return real(*args)

    monkeypatch.setattr(digest.os, "copy_file_range", counting)
    assert copy_and_verify(source, tmp_path / "dest", sha(data)).digest == sha(data)
    assert calls >= 3  # 8 MiB steps, then the call that finds the end


def test_a_failing_hash_thread_fails_the_copy_instead_of_hanging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, copy_route: str
) -> None:
    source = tmp_path / "src"
    source.write_bytes(os.urandom(8 * MiB))

    class BrokenSha:
        def update(self, data: object) -> None:
            raise MemoryError("simulated")

    monkeypatch.setattr(digest.hashlib, "sha256", BrokenSha)
    with pytest.raises(MemoryError, match="simulated"):
        copy_and_verify(source, tmp_path / "dest")
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path)) == ["src"]


# -- progress -------------------------------------------------------------------------------


def check_progress(calls: list[int], size: int) -> None:
    assert calls, "progress was never called"
    assert calls[-1] == size
    assert all(a < b for a, b in itertools.pairwise(calls)), calls
    # several MiB per call, never one per chunk
    assert len(calls) <= size // digest._PROGRESS_STEP + 2, calls


@pytest.mark.parametrize("size", [0, 10, 4 * MiB + 1, 70 * MiB + 3])
def test_progress_counts_up_to_the_size(tmp_path: Path, size: int, copy_route: str) -> None:
    data = os.urandom(size)
    source = tmp_path / "src"
    source.write_bytes(data)
    calls: list[int] = []
    copy_and_verify(source, tmp_path / "dest", sha(data), progress=calls.append)
    check_progress(calls, size)
    if size > 2 * digest._PROGRESS_STEP:
        assert len(calls) >= 3  # reported along the way, not only at the end
        assert calls[0] >= digest._PROGRESS_STEP


def test_progress_while_only_hashing_a_file_that_is_its_destination(tmp_path: Path) -> None:
    size = 40 * MiB + 5
    source = tmp_path / "src"
    source.write_bytes(os.urandom(size))
    calls: list[int] = []
    copy_and_verify(source, source, progress=calls.append)
    check_progress(calls, size)
    assert len(calls) == 2


def test_progress_runs_in_the_callers_context_even_on_the_hash_thread(
    tmp_path: Path, copy_route: str
) -> None:
    marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="unset")
    source = tmp_path / "src"
    source.write_bytes(os.urandom(digest._PROGRESS_STEP + 5 * MiB))
    seen: list[tuple[str, str]] = []
    marker.set("caller")
    copy_and_verify(
        source,
        tmp_path / "dest",
        progress=lambda done: seen.append((marker.get(), threading.current_thread().name)),
    )
    assert [value for value, _ in seen] == ["caller", "caller"]
    assert "altar-copy-hash" in {name for _, name in seen}  # really from the helper thread


@pytest.mark.parametrize("size", [10, 40 * MiB])
def test_a_failing_progress_callback_aborts_the_copy_cleanly(
    tmp_path: Path, size: int, copy_route: str
) -> None:
    source = tmp_path / "src"
    source.write_bytes(os.urandom(size))

    def fail(done: int) -> None:
        raise RuntimeError("display broke")

    with pytest.raises(RuntimeError, match="display broke"):
        copy_and_verify(source, tmp_path / "dest", progress=fail)
    assert sorted(os.listdir(tmp_path)) == ["src"]
