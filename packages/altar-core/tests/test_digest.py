"""Digests and verification records, in Python (the shell program: test_digest_script.py)."""

from __future__ import annotations

import ctypes
import errno
import hashlib
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
from altar.execution import Transfer, TransferIntegrityError
from altar.execution.digests import digest
from altar.execution.digests.digest import (
    has_verification_record,
    record_path,
    sha256_file,
    verification_record_line,
    verify_file,
    verify_file_digest,
    verify_files,
    verify_transfer_digest,
    write_verification_record,
)

HOSTILE_NAMES = [
    "with space.bin",
    "quote'single.bin",
    'quote"double.bin',
    "$(touch pwned).bin",
    "`touch pwned`.bin",
    "back\\slash.bin",
    "new\nline.bin",
    "trailing-newline\n",
    "-leading-dash.bin",
    "--",
    "two  spaces.bin",
    "semi;colon&amp|pipe>gt<lt.bin",
    "ünïcødé.bin",
    "*glob?[x].bin",
]

_IN_ACCESS = 0x1
_IN_OPEN = 0x20
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC


class ReadWatch:
    """Counts opens and reads of one file by any process (inotify), without touching it."""

    def __init__(self, path: Path) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self._libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if self.fd < 0:
            pytest.skip("inotify is not available")
        if self._libc.inotify_add_watch(self.fd, os.fsencode(path), _IN_ACCESS | _IN_OPEN) < 0:
            raise OSError(ctypes.get_errno(), "inotify_add_watch failed", str(path))

    def events(self) -> int:
        count = 0
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return count
            offset = 0
            while offset < len(data):
                mask = int.from_bytes(data[offset + 4 : offset + 8], "little")
                name_len = int.from_bytes(data[offset + 12 : offset + 16], "little")
                if mask & (_IN_ACCESS | _IN_OPEN):
                    count += 1
                offset += 16 + name_len

    def close(self) -> None:
        os.close(self.fd)


@pytest.fixture
def read_watch():
    watches: list[ReadWatch] = []

    def watch(path: Path) -> ReadWatch:
        watches.append(ReadWatch(path))
        return watches[-1]

    yield watch
    for item in watches:
        item.close()


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def settle(*paths: Path) -> None:
    """Sleep until the status-change second of every path is over (plus clock slack)."""
    latest = max(os.stat(path).st_ctime_ns // 1_000_000_000 for path in paths)
    delay = latest + 1.05 - time.time()
    if delay > 0:
        time.sleep(delay)


def start_of_second() -> None:
    """Sleep until just after a second boundary, so the next ~0.8 s share one second."""
    time.sleep(1.02 - time.time() % 1)


def make(path: Path, data: bytes = b"genome\n") -> tuple[Path, str]:
    path.write_bytes(data)
    return path, sha(data)


# --- primitives ---------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, (1 << 20) - 1, 1 << 20, (1 << 20) + 1, 3 * (1 << 20) + 5])
def test_sha256_file_matches_hashlib(tmp_path: Path, size: int) -> None:
    data = os.urandom(size)
    path, expected = make(tmp_path / "f", data)
    assert sha256_file(path) == expected


def test_sha256_file_refuses_what_is_not_a_regular_file(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")  # must not block waiting for a writer
    with pytest.raises(OSError, match="not a regular file"):
        sha256_file(tmp_path / "fifo")
    with pytest.raises(OSError, match="not a regular file"):
        sha256_file(tmp_path)
    with pytest.raises(FileNotFoundError):
        sha256_file(tmp_path / "missing")


def test_record_line_is_byte_for_byte_the_0_3_0_format(tmp_path: Path) -> None:
    path, expected = make(tmp_path / "f", b"x" * 1234)
    st = os.stat(path)
    line = verification_record_line(expected, st)
    assert line == (
        f"verified-file/1 {expected} size=1234 mtime={int(st.st_mtime)} "
        f"ctime={int(st.st_ctime)} inode={st.st_ino}"
    )
    fmt = f"verified-file/1 {expected} size=%s mtime=%Y ctime=%Z inode=%i"
    gnu = subprocess.run(["stat", "-L", "-c", fmt, "--", str(path)], capture_output=True)
    assert gnu.stdout.decode().rstrip("\n") == line
    if shutil.which("busybox"):
        bb = subprocess.run(["busybox", "stat", "-L", "-c", fmt, str(path)], capture_output=True)
        assert bb.stdout.decode().rstrip("\n") == line


def test_record_line_uses_whole_kernel_seconds_not_a_rounded_float(tmp_path: Path) -> None:
    path, expected = make(tmp_path / "f")
    # 0.9999999999 s past a second: the float st_mtime rounds up to the next second.
    os.utime(path, ns=(1_700_000_000_999_999_999, 1_700_000_000_999_999_999))
    line = verification_record_line(expected, os.stat(path))
    assert " mtime=1700000000 " in line
    os.utime(path, ns=(-1_500_000_000, -1_500_000_000))  # before 1970: floor, like stat %Y
    assert " mtime=-2 " in verification_record_line(expected, os.stat(path))


@pytest.mark.parametrize(
    "bad",
    [
        "sha256:" + "A" * 64,
        "sha256:" + "a" * 63,
        "sha256:" + "a" * 65,
        "a" * 64,
        "sha512:" + "a" * 64,
        " sha256:" + "a" * 64,
        "sha256:" + "a" * 64 + "\n",
        "sha256:" + "g" * 64,
        "",
        None,
        b"sha256:" + b"a" * 64,
    ],
)
def test_malformed_digest_is_a_plain_value_error_with_the_0_3_0_message(
    tmp_path: Path, bad: object
) -> None:
    path, _ = make(tmp_path / "f")
    message = f"expected sha256:<64 lowercase hex>, got {bad!r}"
    calls = [
        lambda: verify_file_digest(path, bad),  # type: ignore[arg-type]
        lambda: verify_file(path, bad),  # type: ignore[arg-type]
        lambda: verify_files([(path, bad)]),  # type: ignore[list-item]
    ]
    if bad is not None:  # copy_and_verify takes None as "no digest to check"
        calls.append(lambda: digest.copy_and_verify(path, tmp_path / "copy", bad))  # type: ignore[arg-type]
    for call in calls:
        with pytest.raises(ValueError) as caught:
            call()
        assert str(caught.value) == message
        assert not isinstance(caught.value, TransferIntegrityError)
    assert not (tmp_path / "copy").exists()
    assert has_verification_record(path, bad) is False  # type: ignore[arg-type]


# --- verify_file_digest and records ------------------------------------------------------


def test_fresh_file_is_hashed_but_not_recorded_in_its_ctime_second(tmp_path: Path) -> None:
    start_of_second()
    path, expected = make(tmp_path / "f")
    assert verify_file_digest(path, expected) is True
    assert not os.path.exists(record_path(path))
    assert sorted(os.listdir(tmp_path)) == ["f"]  # no temporary record left behind


def test_record_written_after_the_second_and_then_nothing_is_read(
    tmp_path: Path, read_watch
) -> None:
    path, expected = make(tmp_path / "f", os.urandom(3 << 20))
    settle(path)
    assert verify_file_digest(path, expected) is True
    record = Path(record_path(path))
    assert (
        record.read_bytes() == (verification_record_line(expected, os.stat(path)) + "\n").encode()
    )
    assert sorted(os.listdir(tmp_path)) == ["f", "f.sha256-verified"]

    watch = read_watch(path)
    assert verify_file_digest(path, expected) is False
    assert has_verification_record(path, expected) is True
    assert verify_files([(path, expected)] * 3) == [False, False, False]
    assert watch.events() == 0, "a file with a current record was opened"
    # The control: hashing is visible to the watch, so the zero above means something.
    assert verify_file_digest(path, expected, trust_record=False) is True
    assert watch.events() > 0


def test_record_rejected_after_the_file_changes(tmp_path: Path) -> None:
    def append(path: Path) -> None:
        with path.open("ab") as handle:
            handle.write(b"more")

    def replace(path: Path) -> None:
        path.with_suffix(".new").write_bytes(path.read_bytes())
        os.replace(path.with_suffix(".new"), path)

    def touch_back(path: Path) -> None:
        st = os.stat(path)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))

    cases = {
        "rewritten": lambda p: p.write_bytes(b"GENOME\n"),  # same size, new content
        "appended": append,
        "truncated": lambda p: os.truncate(p, 2),
        "replaced": replace,  # same bytes, new inode
        "touched-back": touch_back,  # same bytes and mtime, new ctime
    }
    paths = {}
    for name in cases:
        paths[name], expected = make(tmp_path / name)
    settle(*paths.values())
    for path in paths.values():
        assert verify_file_digest(path, expected) is True
        assert has_verification_record(path, expected)
    time.sleep(1.05)  # the changes fall in a later second than the recorded ctime
    for name, change in cases.items():
        change(paths[name])
        assert has_verification_record(paths[name], expected) is False, name
    for name in ("touched-back", "replaced"):  # same bytes: re-hashed, then fine
        assert verify_file_digest(paths[name], expected) is True, name
    for name in ("rewritten", "appended", "truncated"):
        with pytest.raises(TransferIntegrityError, match="has digest sha256:"):
            verify_file_digest(paths[name], expected)


def test_file_modified_within_the_same_second_as_its_hash_gets_no_record(
    tmp_path: Path,
) -> None:
    start_of_second()
    path, expected = make(tmp_path / "f", b"version-1\n")
    assert verify_file_digest(path, expected) is True
    path.write_bytes(b"version-2\n")  # same size, same second: stat cannot tell
    settle(path)
    assert not has_verification_record(path, expected)
    with pytest.raises(TransferIntegrityError):
        verify_file_digest(path, expected)


def test_no_record_when_a_same_second_change_happens_while_hashing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer changes the file mid-hash in its ctime second and hashing ends a second later.

    The stat before and after agree (same size, same whole seconds), so only the rule that the
    ctime second must be over *before* hashing starts keeps the wrong record out.
    """
    start_of_second()
    path, expected = make(tmp_path / "f", b"version-1\n")
    real_hash = digest._hash_fd

    def racing_hash(fd: int) -> str:
        result = real_hash(fd)
        path.write_bytes(b"version-2\n")  # still the same second as the file's ctime
        time.sleep(1.1)
        return result

    monkeypatch.setattr(digest, "_hash_fd", racing_hash)
    assert verify_file_digest(path, expected) is True
    assert not os.path.exists(record_path(path))


def test_no_record_when_the_file_changes_while_hashed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, expected = make(tmp_path / "f", b"version-1\n")
    settle(path)
    real_hash = digest._hash_fd

    def racing_hash(fd: int) -> str:
        result = real_hash(fd)
        path.write_bytes(b"version-2\n")
        return result

    monkeypatch.setattr(digest, "_hash_fd", racing_hash)
    assert verify_file_digest(path, expected) is True
    assert not os.path.exists(record_path(path))
    assert sorted(os.listdir(tmp_path)) == ["f"]


def test_nothing_but_the_file_exists_beside_it_while_it_is_hashed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A check killed mid-hash leaves no temporary record behind."""
    path, expected = make(tmp_path / "f")
    settle(path)
    seen: list[list[str]] = []
    real_hash = digest._hash_fd

    def looking_hash(fd: int) -> str:
        seen.append(sorted(os.listdir(tmp_path)))
        return real_hash(fd)

    monkeypatch.setattr(digest, "_hash_fd", looking_hash)
    assert verify_file_digest(path, expected) is True
    assert seen == [["f"]]
    assert has_verification_record(path, expected)


def test_write_verification_record_rules(tmp_path: Path) -> None:
    start_of_second()
    path, expected = make(tmp_path / "f")
    before = os.stat(path)
    assert write_verification_record(path, expected, before) is False  # same second
    settle(path)
    assert write_verification_record(path, expected, before) is True
    assert has_verification_record(path, expected)
    changed = tmp_path / "g"
    changed.write_bytes(b"genome\n")
    stale = os.stat(changed)
    changed.write_bytes(b"genome, longer\n")
    settle(changed)
    assert write_verification_record(changed, expected, stale) is False
    assert write_verification_record(tmp_path / "missing", expected, stale) is False


@pytest.mark.parametrize(
    "content",
    [
        "{line}",  # no newline: accepted, as in 0.3.0
        "{line}\n",
    ],
)
def test_record_accepted_forms(tmp_path: Path, content: str) -> None:
    path, expected = make(tmp_path / "f")
    line = verification_record_line(expected, os.stat(path))
    Path(record_path(path)).write_text(content.format(line=line))
    assert has_verification_record(path, expected)


BAD_RECORDS = [
    "{line}\n\n",
    "{line}\r\n",
    "{line} \n",
    " {line}\n",
    "{line}\nextra\n",
    "{v2}\n",
    "{other}\n",
    "{upper}\n",
    "{line}\n" + "#" * 600,
    "",
    "{line}\N{NO-BREAK SPACE}\n",
]


def render_bad(template: str, path: Path, expected: str) -> str:
    line = verification_record_line(expected, os.stat(path))
    hexpart = expected.removeprefix("sha256:")
    return template.format(
        line=line,
        v2=line.replace("verified-file/1", "verified-file/2"),
        other=line.replace(expected, sha(b"other")),
        upper=line.replace(hexpart, hexpart.upper()),
    )


@pytest.mark.parametrize("template", BAD_RECORDS)
def test_record_format_mismatch_is_rejected(tmp_path: Path, template: str, read_watch) -> None:
    path, expected = make(tmp_path / "f")
    Path(record_path(path)).write_bytes(render_bad(template, path, expected).encode())
    assert has_verification_record(path, expected) is False
    watch = read_watch(path)
    assert verify_file_digest(path, expected, record=False) is True
    assert watch.events() > 0


def test_record_that_is_not_a_regular_file_is_ignored_without_hanging(tmp_path: Path) -> None:
    path, expected = make(tmp_path / "f")
    os.mkfifo(record_path(path))  # opening a FIFO for reading would block forever
    assert has_verification_record(path, expected) is False
    link_target, _ = make(tmp_path / "g")
    os.symlink(link_target, tmp_path / "link")
    assert verify_file_digest(tmp_path / "link", expected) is True  # symlinks are followed


def test_wrong_digest_raises_and_writes_no_record(tmp_path: Path) -> None:
    path, _ = make(tmp_path / "f")
    settle(path)
    wrong = sha(b"something else")
    with pytest.raises(TransferIntegrityError) as caught:
        verify_file_digest(path, wrong)
    assert str(caught.value) == (
        f"file at {str(path)!r} has digest {sha(b'genome' + bytes([10]))}; expected {wrong}"
    )
    assert sorted(os.listdir(tmp_path)) == ["f"]


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_digest_on_a_non_file_is_rejected_like_a_mismatch(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "target"
    if kind == "directory":
        target.mkdir()
    elif kind == "fifo":
        os.mkfifo(target)
    expected = sha(b"x")
    with pytest.raises(TransferIntegrityError, match="regular file") as caught:
        verify_file_digest(target, expected)
    assert str(caught.value).startswith(f"file at {str(target)!r} is not a regular file")
    transfer = Transfer(uri="s3://bucket/x", logical_path="inputs/x", digest=expected)
    with pytest.raises(TransferIntegrityError, match="regular file"):
        verify_transfer_digest(transfer, target)
    with pytest.raises(TransferIntegrityError, match="regular file"):
        verify_files([(target, expected)])
    with pytest.raises(TransferIntegrityError, match="regular file"):
        digest.require_digest_file(transfer, target)
    assert not os.path.exists(record_path(target))


def test_trust_record_false_hashes_and_still_records(tmp_path: Path, read_watch) -> None:
    path, expected = make(tmp_path / "f")
    settle(path)
    assert verify_file_digest(path, expected) is True
    Path(record_path(path)).write_text("stale\n")
    watch = read_watch(path)
    assert verify_file_digest(path, expected, trust_record=False) is True
    assert watch.events() > 0
    assert has_verification_record(path, expected)  # rewritten by the hash


def test_record_false_writes_nothing(tmp_path: Path) -> None:
    path, expected = make(tmp_path / "f")
    settle(path)
    assert verify_file_digest(path, expected, record=False) is True
    assert not os.path.exists(record_path(path))


def test_verify_transfer_digest_never_trusts_a_record(tmp_path: Path, read_watch) -> None:
    path, expected = make(tmp_path / "f")
    settle(path)
    transfer = Transfer(uri="s3://b/genome.fa", logical_path="ref/genome.fa", digest=expected)
    verify_transfer_digest(transfer, path)
    assert not os.path.exists(record_path(path))  # record=False by default
    verify_transfer_digest(transfer, path, record=True)
    assert has_verification_record(path, expected)
    watch = read_watch(path)
    verify_transfer_digest(transfer, path, record=True)
    assert watch.events() > 0
    bad = Transfer(uri="s3://b/genome.fa", logical_path="ref/genome.fa", digest=sha(b"no"))
    with pytest.raises(TransferIntegrityError, match=r"^staged input 's3://b/genome.fa' \("):
        verify_transfer_digest(bad, path)
    verify_transfer_digest(Transfer(uri="s3://b/x", logical_path="x"), tmp_path / "missing")


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_names(tmp_path: Path, name: str) -> None:
    path, expected = make(tmp_path / name)
    settle(path)
    assert verify_file_digest(path, expected) is True
    assert os.path.isfile(str(path) + ".sha256-verified")
    assert verify_file_digest(path, expected) is False
    assert not (tmp_path / "pwned").exists()
    assert sorted(os.listdir(tmp_path)) == sorted([name, name + ".sha256-verified"])


def test_read_only_volume_verifies_without_a_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, expected = make(tmp_path / "f")
    settle(path)
    real_open = os.open

    def read_only_open(target, flags, *args, **kwargs):  # type: ignore[no-untyped-def]
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(30, "Read-only file system", target)
        return real_open(target, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only_open)
    assert verify_file_digest(path, expected) is True
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path)) == ["f"]


# --- verify_files --------------------------------------------------------------------------


def test_verify_files_checks_all_in_order(tmp_path: Path) -> None:
    files = [make(tmp_path / f"f{i}", os.urandom(5 << 20)) for i in range(4)]
    settle(*(path for path, _ in files))
    assert verify_file_digest(*files[1]) is True  # now recorded
    assert verify_files(files, max_workers=2) == [True, False, True, True]
    assert verify_files(files) == [False, False, False, False]
    assert verify_files(files, trust_records=False, max_workers=1) == [True] * 4
    assert verify_files([]) == []


def test_verify_files_reports_every_failure_after_checking_all(tmp_path: Path) -> None:
    good, good_digest = make(tmp_path / "good")
    bad, _ = make(tmp_path / "bad")
    settle(good, bad)
    items = [(bad, sha(b"nope")), (good, good_digest), (tmp_path / "missing", good_digest)]
    with pytest.raises(TransferIntegrityError) as caught:
        verify_files(items)
    message = str(caught.value)
    assert message.startswith("2 of 3 files failed verification: ")
    assert repr(str(bad)) in message
    assert f"{str(tmp_path / 'missing')!r} does not exist" in message
    assert has_verification_record(good, good_digest)  # the good one was still checked


def test_verify_files_rejects_a_malformed_digest_before_reading(tmp_path: Path, read_watch) -> None:
    path, expected = make(tmp_path / "f")
    watch = read_watch(path)
    with pytest.raises(ValueError, match="expected sha256"):
        verify_files([(path, expected), (path, "sha256:nope")])
    assert watch.events() == 0
    with pytest.raises(ValueError, match="max_workers"):
        verify_files([(path, expected)], max_workers=0)


def test_verify_files_runs_concurrently(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = [make(tmp_path / f"f{i}") for i in range(2)]
    barrier = threading.Barrier(2, timeout=10)
    real_hash = digest._hash_fd

    def meeting_hash(fd: int) -> str:
        barrier.wait()  # raises BrokenBarrierError unless both hashes run at once
        return real_hash(fd)

    monkeypatch.setattr(digest, "_hash_fd", meeting_hash)
    assert verify_files(files, max_workers=2, record=False) == [True, True]


def test_a_file_that_cannot_be_opened_is_named_as_such_not_as_a_directory(tmp_path, monkeypatch):
    from altar.execution.digests import digest as digest_module

    path = tmp_path / "w.bin"
    path.write_bytes(b"weights")
    real_open = os.open

    def refuse(target, *args, **kwargs):
        if os.fspath(target) == str(path):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(target))
        return real_open(target, *args, **kwargs)

    monkeypatch.setattr(digest_module.os, "open", refuse)
    with pytest.raises(TransferIntegrityError) as caught:
        verify_file_digest(path, "sha256:" + "0" * 64)
    assert str(caught.value) == f"file at {str(path)!r} cannot be read: Permission denied"
