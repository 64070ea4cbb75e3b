"""The demo plan is portable: the same file on the local Docker backend and in-process (issue 15).

Its commands name the volume ``{altar:mount_root}``, so ``altar compare`` finds no difference in
commands, outputs or outcomes between two backends mounted at different roots.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DEMO = Path(__file__).resolve().parents[1] / "examples" / "demo"


@pytest.mark.docker
def test_the_demo_compares_equal_on_local_and_in_process(docker_host: str, tmp_path: Path) -> None:
    demo = tmp_path / "demo"
    shutil.copytree(DEMO, demo, ignore=shutil.ignore_patterns("results"))
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "altar"), "compare", str(demo / "plan.toml"),
            "--backend", "in-process", "--reference", "local",
            "--option", "runtime=altar.conformance.reference:run_command_locally",
            "--workdir", str(tmp_path / "work"), "--json",
        ],
        capture_output=True, text=True, timeout=600, check=False,
        cwd=tmp_path,  # the in-process backend keeps its volume under the current directory
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is True
    assert report["differences"] == []
