"""``altar run`` of the demo plan (examples/demo/plan.toml) on ``--backend slurm``, with no
change to its tasks: on this login node and over ssh; and ``altar compare`` against ``local``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.slurm, pytest.mark.docker, pytest.mark.slow]

DEMO = Path(__file__).resolve().parents[3] / "examples" / "demo"


def _altar(*args: str) -> subprocess.CompletedProcess[str]:
    altar = shutil.which("altar", path=os.path.dirname(sys.executable)) or "altar"
    return subprocess.run([altar, *args], capture_output=True, text=True, check=False, timeout=900)


def _demo(tmp_path: Path) -> Path:
    shutil.copytree(DEMO, tmp_path / "demo", ignore=shutil.ignore_patterns("results"))
    return tmp_path / "demo" / "plan.toml"


def _options(docker_host: str, slurm_cluster: dict[str, str], data_root: Path) -> list[str]:
    return [
        "--option", 'container_runtime="docker"',
        "--option", f"runtime_options={json.dumps(['-H', docker_host])}",
        "--option", f"partition={json.dumps(slurm_cluster['partition'])}",
        "--option", f"data_root={json.dumps(str(data_root))}",
    ]  # fmt: skip


def _check_results(plan: Path) -> None:
    summary = (plan.parent / "results" / "summary.tsv").read_text()
    assert summary.strip(), "the summarize task wrote nothing"
    for fold in range(3):
        assert (plan.parent / "results" / f"fold{fold}.tsv").read_text().strip()


def test_altar_run_demo_on_slurm_here(
    tmp_path: Path, docker_host: str, slurm_cluster: dict[str, str]
) -> None:
    plan = _demo(tmp_path)
    done = _altar(
        "run", str(plan), "--backend", "slurm", "--json", "--run-dir", str(tmp_path / "run"),
        *_options(docker_host, slurm_cluster, tmp_path / "cluster data"),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    _check_results(plan)


@pytest.mark.ssh
def test_altar_run_demo_on_slurm_over_ssh(
    tmp_path: Path, docker_host: str, slurm_cluster: dict[str, str], ssh_target: Any
) -> None:
    plan = _demo(tmp_path)
    done = _altar(
        "run", str(plan), "--backend", "slurm", "--run-dir", str(tmp_path / "run"),
        *_options(docker_host, slurm_cluster, tmp_path / "remote data"),
        "--option", f"ssh_host={json.dumps(ssh_target.host)}",
        "--option", f"ssh_config={json.dumps(ssh_target.config)}",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    _check_results(plan)


def test_altar_compare_slurm_with_local(
    tmp_path: Path, docker_host: str, slurm_cluster: dict[str, str]
) -> None:
    plan = _demo(tmp_path)
    done = _altar(
        "compare", str(plan), "--backend", "slurm", "--reference", "local", "--json",
        "--workdir", str(tmp_path / "compare"),
        *_options(docker_host, slurm_cluster, tmp_path / "cluster data"),
        "--reference-option", f"data_root={json.dumps(str(tmp_path / 'local data'))}",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert (report["backend"], report["reference"]) == ("slurm", "local")
    assert report["ok"] is True
    assert report["differences"] == []
