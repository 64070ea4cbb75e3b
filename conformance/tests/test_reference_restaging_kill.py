"""SIGKILL during re-staging (issue 23): the resumed run stages again, runs once, leaves nothing.

Real ``altar run`` processes on the in-process backend. The kill lands as soon as the run says
it stages the changed inputs, wherever in the copies that is.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

SIZE = 32 * 1024 * 1024


def write_plan(tmp_path: Path) -> Path:
    ledger = tmp_path / "ledger"
    inputs = ", ".join(f'{{ uri = "in{i}.bin", logical_path = "in/{i}.bin" }}' for i in range(3))
    plan = tmp_path / "plan.toml"
    plan.write_text(
        '[backend]\ntype = "in-process"\noptions = { data_root = "data" }\n\n'
        '[[tasks]]\nid = "t"\nkind = "k"\nimage = "busybox:latest"\n'
        f'command = ["sh", "-c", "head -c1 in/2.bin | grep -q b && echo ran >> {ledger}"]\n'
        f"inputs = [{inputs}]\n"
    )
    return plan


def fill(tmp_path: Path, byte: bytes) -> None:
    for i in range(3):
        (tmp_path / f"in{i}.bin").write_bytes(byte * SIZE)


def altar(plan: Path, *extra: str) -> list[str]:
    exe = Path(sys.executable).with_name("altar")
    run_dir = plan.parent / "run"
    return [str(exe), "run", str(plan), "--run-dir", str(run_dir), "--max-retries", "0", *extra]


@pytest.mark.parametrize("after_lines", [0, 1])
def test_a_run_killed_while_staging_again_resumes_on_the_new_bytes(
    tmp_path: Path, after_lines: int
) -> None:
    fill(tmp_path, b"a")
    plan = write_plan(tmp_path)
    first = subprocess.run(altar(plan), capture_output=True, text=True)
    assert first.returncode == 1, first.stderr  # ran on "a": failed
    fill(tmp_path, b"b")
    with subprocess.Popen(altar(plan, "--retry-failed"), stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stderr is not None
        lines = 0
        for line in proc.stderr:
            if lines or "changed since they were staged" in line:
                if lines == after_lines:
                    proc.send_signal(signal.SIGKILL)
                    break
                lines += 1
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    if after_lines == 0:  # killed as staging began: nothing was submitted yet
        assert not (tmp_path / "ledger").exists()
    done = subprocess.run(altar(plan), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "ledger").read_text() == "ran\n"  # once, on the new bytes
    staged = tmp_path / "data" / "in"
    assert sorted(p.name for p in staged.iterdir()) == ["0.bin", "1.bin", "2.bin"]
    assert all((staged / f"{i}.bin").read_bytes() == b"b" * SIZE for i in range(3))
