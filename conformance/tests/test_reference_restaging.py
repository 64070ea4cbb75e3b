"""The stale-bytes case on the in-process backend: real files, real processes (issue 23)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from altar.execution.cli import command as cli

PLAN = """\
[backend]
type = "in-process"
options = {{ data_root = "data" }}

[[tasks]]
id = "t"
kind = "k"
image = "busybox:latest"
command = ["sh", "-c", "grep -q good in/data.txt && cp in/data.txt out.txt"]
inputs = [{{ uri = "{uri}", logical_path = "in/data.txt"{digest} }}]
outputs = [{{ uri = "out.txt", logical_path = "out.txt" }}]
"""


def write_plan(tmp_path: Path, uri: str, data: bytes | None) -> Path:
    digest = "" if data is None else f', digest = "sha256:{hashlib.sha256(data).hexdigest()}"'
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN.format(uri=uri, digest=digest))
    return plan


def run(plan: Path, *extra: str) -> int:
    return cli.main(
        ["run", str(plan), "--run-dir", str(plan.parent / "run"), "--max-retries", "0", *extra]
    )


def test_a_fixed_input_file_reaches_the_retried_task(tmp_path: Path) -> None:
    (tmp_path / "data.txt").write_bytes(b"bad\n")
    plan = write_plan(tmp_path, "data.txt", None)
    assert run(plan) == 1
    (tmp_path / "data.txt").write_bytes(b"good\n")
    assert run(plan, "--retry-failed") == 0
    assert (tmp_path / "out.txt").read_bytes() == b"good\n"


def test_an_edited_uri_and_digest_reach_the_retried_task(tmp_path: Path) -> None:
    (tmp_path / "old.txt").write_bytes(b"bad\n")
    (tmp_path / "new.txt").write_bytes(b"good\n")
    assert run(write_plan(tmp_path, "old.txt", b"bad\n")) == 1
    assert run(write_plan(tmp_path, "new.txt", b"good\n"), "--retry-failed") == 0
    assert (tmp_path / "out.txt").read_bytes() == b"good\n"


def test_a_fixed_file_under_its_old_digest_is_refused(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "data.txt").write_bytes(b"bad\n")
    plan = write_plan(tmp_path, "data.txt", b"bad\n")
    assert run(plan) == 1
    (tmp_path / "data.txt").write_bytes(b"good\n")  # the digest in the plan still says "bad"
    capsys.readouterr()
    assert run(plan, "--retry-failed") == 1
    assert "changed since it was staged" in capsys.readouterr().err
    assert not (tmp_path / "out.txt").exists()
    assert (tmp_path / "data" / "in" / "data.txt").read_bytes() == b"bad\n"
