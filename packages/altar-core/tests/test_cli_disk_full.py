"""A run directory on a full filesystem: one line and exit status 2 (issue 15).

The filesystem is real: a 64 KiB tmpfs, filled. Mounting needs root (or CAP_SYS_ADMIN), so the
tests skip where that is not allowed.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from altar.execution.cli import command as cli


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "full"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        with contextlib.suppress(OSError), (mount / "filler").open("wb") as filler:
            while True:
                filler.write(b"\0" * 4096)
                filler.flush()
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_at_start_is_one_line_and_exit_2(fake_registry, plan_file, full_disk, capsys):
    run_dir = full_disk / "run"
    run_dir.mkdir()  # a directory costs no data block on tmpfs: the lock's pid write fails
    code = cli.main(["run", str(plan_file), "--run-dir", str(run_dir)])
    out, err = capsys.readouterr()
    assert code == 2, err
    assert out == ""
    assert "Traceback" not in err
    last = err.splitlines()[-1]
    assert last.startswith(f"altar: error: cannot use {run_dir} as a run directory: ")
    assert "No space left on device" in last
    assert fake_registry.submits == {}


def test_a_full_disk_for_a_new_run_directory_is_one_line_and_exit_2(
    fake_registry, plan_file, full_disk, capsys
):
    code = cli.main(["run", str(plan_file), "--run-dir", str(full_disk / "a" / "run")])
    _, err = capsys.readouterr()
    assert code == 2, err
    assert "Traceback" not in err
    assert err.splitlines()[-1].startswith("altar: error: ")
    assert fake_registry.submits == {}
