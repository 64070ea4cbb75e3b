"""verify_files_script(): the same tests under BusyBox sh and under dash with GNU coreutils."""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from altar.execution.digests.digest import (
    has_verification_record,
    record_path,
    verification_record_line,
    verify_file_digest,
    verify_files_script,
)

HOSTILE_NAMES = [
    "with space.bin",
    "quote'single.bin",
    'quote"double.bin',
    "$(touch pwned).bin",
    "`touch pwned`.bin",
    "back\\slash.bin",
    "back\\nslash-n.bin",
    "new\nline.bin",
    "trailing-newline\n",
    "-leading-dash.bin",
    "--",
    "-",
    "two  spaces.bin",
    "semi;colon&amp|pipe>gt<lt.bin",
    "%s%Y%n percent.bin",
    "ünïcødé.bin",
    "*glob?[x].bin",
]


@dataclass(frozen=True)
class Shell:
    name: str
    argv: tuple[str, ...]
    path: str

    def run(self, *lines: str, trust: bool = True, cwd: Path | None = None):
        argv = [*self.argv, verify_files_script(trust_records=trust), "verify-inputs", *lines]
        return subprocess.run(
            argv,
            capture_output=True,
            env={"PATH": self.path, "HOSTNAME": "testhost", "LC_ALL": "C"},
            cwd=cwd,
            timeout=60,
        )


@pytest.fixture(scope="session")
def busybox_bin(tmp_path_factory: pytest.TempPathFactory) -> str:
    busybox = shutil.which("busybox")
    if busybox is None:
        pytest.skip("busybox is not installed (apt-get install busybox-static)")
    folder = tmp_path_factory.mktemp("busybox-bin")
    subprocess.run([busybox, "--install", "-s", str(folder)], check=True)
    return str(folder)


@pytest.fixture(params=["busybox", "dash"])
def shell(request: pytest.FixtureRequest) -> Shell:
    if request.param == "busybox":
        folder = request.getfixturevalue("busybox_bin")
        # Only applets on PATH: nothing from GNU coreutils can leak in.
        return Shell("busybox", (f"{folder}/sh", "-c"), folder)
    dash = shutil.which("dash")
    if dash is None:
        pytest.skip("dash is not installed")
    return Shell("dash", (dash, "-c"), "/usr/bin:/bin")


_IN_ACCESS = 0x1
_IN_OPEN = 0x20


class ReadWatch:
    """Counts opens and reads of one file by any process (inotify), without touching it."""

    def __init__(self, path: Path) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if (
            self.fd < 0
            or libc.inotify_add_watch(self.fd, os.fsencode(path), _IN_ACCESS | _IN_OPEN) < 0
        ):
            pytest.skip("inotify is not available")

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
                if mask & (_IN_ACCESS | _IN_OPEN):
                    count += 1
                offset += 16 + int.from_bytes(data[offset + 12 : offset + 16], "little")


@pytest.fixture
def read_watch():
    fds: list[int] = []

    def watch(path: Path) -> ReadWatch:
        item = ReadWatch(path)
        fds.append(item.fd)
        return item

    yield watch
    for fd in fds:
        os.close(fd)


def hexdigest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make(path: Path, data: bytes = b"genome\n") -> tuple[Path, str]:
    path.write_bytes(data)
    return path, hexdigest(data)


def line(path: Path, hexd: str) -> str:
    return f"{hexd}  {path}"


def settle(*paths: Path) -> None:
    latest = max(os.stat(path).st_ctime_ns // 1_000_000_000 for path in paths)
    delay = latest + 1.05 - time.time()
    if delay > 0:
        time.sleep(delay)


def start_of_second() -> None:
    time.sleep(1.02 - time.time() % 1)


def out(result) -> list[bytes]:
    return result.stdout.split(b"\n")[:-1] if result.stdout else []


# ------------------------------------------------------------------------------------------


def test_fresh_files_are_hashed_and_not_recorded(shell: Shell, tmp_path: Path) -> None:
    start_of_second()
    a, ha = make(tmp_path / "a", b"alpha\n")
    b, hb = make(tmp_path / "b", b"beta\n")
    result = shell.run(line(a, ha), line(b, hb))
    assert result.returncode == 0, result.stderr
    assert out(result) == [f"{a}: OK".encode(), f"{b}: OK".encode()]
    assert sorted(os.listdir(tmp_path)) == ["a", "b"]  # same second: no record, no temp


def test_records_written_later_match_python_and_skip_reading(
    shell: Shell, tmp_path: Path, read_watch
) -> None:
    a, ha = make(tmp_path / "a", os.urandom(1 << 20))
    settle(a)
    first = shell.run(line(a, ha))
    assert first.returncode == 0, first.stderr
    assert out(first) == [f"{a}: OK".encode()]
    expected_line = verification_record_line("sha256:" + ha, os.stat(a))
    assert Path(record_path(a)).read_bytes() == (expected_line + "\n").encode()
    assert oct(os.stat(record_path(a)).st_mode & 0o777) == oct(0o644)
    assert sorted(os.listdir(tmp_path)) == ["a", "a.sha256-verified"]

    watch = read_watch(a)
    second = shell.run(line(a, ha))
    assert second.returncode == 0, second.stderr
    assert out(second) == [f"{a}: OK (verification record)".encode()]
    assert verify_file_digest(a, "sha256:" + ha) is False  # Python accepts the shell's record
    assert watch.events() == 0, "a file with a current record was read"
    third = shell.run(line(a, ha), trust=False)  # the control: hashing is visible
    assert out(third) == [f"{a}: OK".encode()]
    assert watch.events() > 0


def test_python_records_are_accepted_by_the_script(
    shell: Shell, tmp_path: Path, read_watch
) -> None:
    a, ha = make(tmp_path / "a")
    settle(a)
    assert verify_file_digest(a, "sha256:" + ha) is True
    assert has_verification_record(a, "sha256:" + ha)
    watch = read_watch(a)
    result = shell.run(line(a, ha))
    assert out(result) == [f"{a}: OK (verification record)".encode()]
    assert watch.events() == 0


def test_every_line_is_checked_and_failure_exits_non_zero(shell: Shell, tmp_path: Path) -> None:
    good, hgood = make(tmp_path / "good")
    bad, _ = make(tmp_path / "bad")
    (tmp_path / "dir").mkdir()
    settle(good, bad)
    wrong = hexdigest(b"other")
    result = shell.run(
        line(bad, wrong),
        line(tmp_path / "missing", hgood),
        line(tmp_path / "dir", hgood),
        line(good, hgood),
    )
    assert result.returncode == 1
    assert out(result) == [
        f"{bad}: FAILED".encode(),
        f"{tmp_path / 'missing'}: FAILED".encode(),
        f"{tmp_path / 'dir'}: FAILED".encode(),
        f"{good}: OK".encode(),
    ]
    errors = result.stderr.decode()
    assert f"{bad}: sha256 is {hexdigest(b'genome' + bytes([10]))}; expected {wrong}" in errors
    assert errors.count("not a regular file") == 2
    assert sorted(os.listdir(tmp_path)) == ["bad", "dir", "good", "good.sha256-verified"]


@pytest.mark.parametrize(
    "template",
    [
        "{upper}  {path}",
        "{short}  {path}",
        "{hex}0  {path}",
        "{hex} {path}",  # one space: not the sha256sum -c form
        "{hex}",
        "{hex}  ",
        "sha256:{hex}  {path}",
        "%s%Y{short}  {path}",
        "",
    ],
)
def test_malformed_lines_fail(shell: Shell, tmp_path: Path, template: str) -> None:
    a, ha = make(tmp_path / "a")
    bad_line = template.format(upper=ha.upper(), short=ha[:-1], hex=ha, path=a)
    result = shell.run(bad_line, line(a, ha))
    assert result.returncode == 1
    assert out(result)[0].endswith(b": FAILED")
    assert out(result)[-1] == f"{a}: OK".encode()
    assert b"malformed" in result.stderr or b"not a regular file" in result.stderr


def test_trust_records_false_hashes_and_still_writes_records(
    shell: Shell, tmp_path: Path, read_watch
) -> None:
    a, ha = make(tmp_path / "a")
    settle(a)
    Path(record_path(a)).write_text("stale\n")
    watch = read_watch(a)
    result = shell.run(line(a, ha), trust=False)
    assert out(result) == [f"{a}: OK".encode()]
    assert watch.events() > 0
    assert has_verification_record(a, "sha256:" + ha)
    again = shell.run(line(a, ha), trust=False)
    assert out(again) == [f"{a}: OK".encode()]  # trusts nothing, even its own record


def test_stale_record_is_rejected(shell: Shell, tmp_path: Path) -> None:
    a, ha = make(tmp_path / "a", b"version-1\n")
    settle(a)
    assert shell.run(line(a, ha)).returncode == 0
    assert has_verification_record(a, "sha256:" + ha)
    time.sleep(1.05)
    a.write_bytes(b"version-2\n")  # same size, later second
    result = shell.run(line(a, ha))
    assert result.returncode == 1
    assert out(result) == [f"{a}: FAILED".encode()]


def test_file_modified_in_the_same_second_as_its_check_gets_no_record(
    shell: Shell, tmp_path: Path
) -> None:
    start_of_second()
    a, ha = make(tmp_path / "a", b"version-1\n")
    assert shell.run(line(a, ha)).returncode == 0
    a.write_bytes(b"version-2\n")
    settle(a)
    assert not os.path.exists(record_path(a))
    assert shell.run(line(a, ha)).returncode == 1


BAD_RECORDS = [
    "{line}\n\n",
    "{line}\r\n",
    "{line} \n",
    " {line}\n",
    "{line}\nextra\n",
    "{line}\nextra",
    "{v2}\n",
    "{upper}\n",
    "",
]


@pytest.mark.parametrize("template", BAD_RECORDS)
def test_record_format_mismatch_is_rejected_like_python(
    shell: Shell, tmp_path: Path, template: str
) -> None:
    a, ha = make(tmp_path / "a")
    good = verification_record_line("sha256:" + ha, os.stat(a))
    content = template.format(
        line=good,
        v2=good.replace("verified-file/1", "verified-file/2"),
        upper=good.replace(ha, ha.upper()),
    )
    Path(record_path(a)).write_text(content)
    assert not has_verification_record(a, "sha256:" + ha)
    result = shell.run(line(a, ha))
    assert out(result) == [f"{a}: OK".encode()]  # hashed, not taken from the record


@pytest.mark.parametrize("content", ["{line}", "{line}\n"])
def test_record_without_trailing_newline_accepted_like_python(
    shell: Shell, tmp_path: Path, content: str
) -> None:
    a, ha = make(tmp_path / "a")
    good = verification_record_line("sha256:" + ha, os.stat(a))
    Path(record_path(a)).write_text(content.format(line=good))
    assert has_verification_record(a, "sha256:" + ha)
    assert out(shell.run(line(a, ha))) == [f"{a}: OK (verification record)".encode()]


def test_hostile_names(shell: Shell, tmp_path: Path) -> None:
    files = [make(tmp_path / name, name.encode() * 3) for name in HOSTILE_NAMES]
    settle(*(path for path, _ in files))
    lines = [line(path, hexd) for path, hexd in files]
    first = shell.run(*lines, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert first.stdout == b"".join(f"{path}: OK\n".encode() for path, _ in files)
    for path, hexd in files:
        assert has_verification_record(path, "sha256:" + hexd), path
    second = shell.run(*lines, cwd=tmp_path)
    assert second.stdout == b"".join(
        f"{path}: OK (verification record)\n".encode() for path, _ in files
    )
    assert not (tmp_path / "pwned").exists()
    expected = sorted(
        [name for name in HOSTILE_NAMES] + [n + ".sha256-verified" for n in HOSTILE_NAMES]
    )
    assert sorted(os.listdir(tmp_path)) == expected


@pytest.mark.parametrize("name", ["-n", "-", "--", "-c x"])
def test_relative_paths_with_a_leading_dash(shell: Shell, tmp_path: Path, name: str) -> None:
    a, ha = make(tmp_path / name, b"dash\n")
    settle(a)
    with open(__file__, "rb") as stdin:  # a regular file: `stat -` must not describe it
        result = subprocess.run(
            [*shell.argv, verify_files_script(), "verify-inputs", f"{ha}  {name}"],
            stdin=stdin,
            capture_output=True,
            env={"PATH": shell.path, "LC_ALL": "C"},
            cwd=tmp_path,
            timeout=60,
        )
    assert result.returncode == 0, result.stderr
    assert out(result) == [f"{name}: OK".encode()]
    assert has_verification_record(a, "sha256:" + ha)
    again = shell.run(f"{ha}  {name}", cwd=tmp_path)
    assert out(again) == [f"{name}: OK (verification record)".encode()]


def test_read_only_volume_checks_without_recording(shell: Shell, tmp_path: Path) -> None:
    mount = tmp_path / "ro"
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
        a, ha = make(mount / "a")
        settle(a)
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        result = shell.run(line(a, ha))
        assert result.returncode == 0, result.stderr
        assert out(result) == [f"{a}: OK".encode()]
        assert os.listdir(mount) == ["a"]
        assert verify_file_digest(a, "sha256:" + ha) is True  # Python: same behaviour
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_no_arguments_is_success(shell: Shell) -> None:
    result = shell.run()
    assert (result.returncode, result.stdout) == (0, b"")


@pytest.mark.docker
def test_in_the_real_busybox_container(docker_host: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "x y").write_bytes(b"payload\n")
    hexd = hexdigest(b"payload\n")
    settle(data / "x y")

    def run(trust: bool = True) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [
                "docker",
                "run",
                "--rm",
                "--network",
                "none",
                "-v",
                f"{data}:/data",
                "busybox:latest",
                "sh",
                "-c",
                verify_files_script(trust_records=trust),
                "verify-inputs",
                f"{hexd}  /data/x y",
                f"{hexdigest(b'no')}  /data/x y",
            ],
            capture_output=True,
            timeout=120,
        )

    first = run()
    assert first.returncode == 1, first.stderr
    assert first.stdout == b"/data/x y: OK\n/data/x y: FAILED\n"
    assert has_verification_record(data / "x y", "sha256:" + hexd)  # host accepts it
    second = run()
    assert second.stdout == b"/data/x y: OK (verification record)\n/data/x y: FAILED\n"


def test_fifos_never_hang_the_script(shell: Shell, tmp_path: Path) -> None:
    a, ha = make(tmp_path / "a")
    os.mkfifo(record_path(a))  # reading a FIFO record would block forever
    os.mkfifo(tmp_path / "pipe")
    result = shell.run(line(a, ha), line(tmp_path / "pipe", ha))
    assert result.returncode == 1
    assert out(result) == [f"{a}: OK".encode(), f"{tmp_path / 'pipe'}: FAILED".encode()]
