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


def _preflight_plan(tmp_path: Path, options: str) -> Path:
    plan = tmp_path / "plan.toml"
    plan.write_text(
        f'[backend]\ntype = "slurm"\n\n[backend.options]\n{options}\n\n'
        '[[tasks]]\nid = "long"\nkind = "k"\nimage = "busybox:latest"\ncommand = ["true"]\n'
        "timeout_s = 1000000000000\n\n"
        '[[tasks]]\nid = "fine"\nkind = "k"\nimage = "busybox:latest"\ncommand = ["true"]\n'
    )
    return plan


def test_check_reports_every_slurm_problem_at_once(tmp_path: Path) -> None:
    plan = _preflight_plan(
        tmp_path,
        f'partition = "nope"\ncontainer_runtime = "apptainer"\ndata_root = "{tmp_path}/d"',
    )
    done = _altar("check", str(plan))
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert any("backend.options.partition" in line and "'nope'" in line for line in lines), lines
    assert any("tasks[0].timeout" in line and "timeout_s=1000000000000" in line for line in lines)
    if shutil.which("apptainer") is None:
        assert any("backend.options.container_runtime" in line for line in lines), lines
    assert not any("tasks[1]" in line for line in lines), lines
    assert not list(tmp_path.glob("d/.altar-slurm/jobs/*")), "check created a job directory"


def test_check_names_an_unreachable_login_node_and_still_checks_the_tasks(tmp_path: Path) -> None:
    plan = _preflight_plan(
        tmp_path,
        'ssh_host = "127.0.0.1"\nssh_port = 1\ndata_root = "/srv/altar"',
    )
    done = _altar("check", str(plan))
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert any("backend.options.ssh_host" in line for line in lines), lines
    assert any("tasks[0].timeout" in line for line in lines), lines


@pytest.mark.parametrize(
    "host",
    ['ssh_host = "127.0.0.1"\nssh_port = 1', 'ssh_host = "altar-no-such-host.invalid"'],
    ids=["closed-port", "dns-failure"],
)
def test_check_reports_a_wrong_partition_an_unreachable_host_and_a_huge_timeout_at_once(
    tmp_path: Path, host: str
) -> None:
    plan = _preflight_plan(tmp_path, f'{host}\npartition = "nope"\ndata_root = "/srv/altar"')
    done = _altar("check", str(plan))
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 3, lines  # one line each, nothing else
    ssh, partition, timeout = lines
    assert ssh.startswith(f"altar: error: {plan}: backend.options.ssh_host: ssh to "), lines
    assert "check ssh_host, ssh_port and ssh_user" in ssh
    assert partition.startswith(f"altar: error: {plan}: backend.options.partition: 'nope' "), lines
    assert "not checked" in partition
    assert timeout.startswith(f"altar: error: {plan}: tasks[0].timeout_s: "), lines
    assert "timeout_s=1000000000000" in timeout


def test_check_refuses_a_gpu_task_on_a_partition_without_gres(
    tmp_path: Path, docker_host: str, slurm_cluster: dict[str, str]
) -> None:
    gres = subprocess.run(
        ["sinfo", "--noheader", f"--partition={slurm_cluster['partition']}", "--format=%G"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    if "gpu" in gres:
        pytest.skip(f"this cluster's partition has GPUs: {gres.strip()}")
    options = "\n".join(
        [
            'container_runtime = "docker"',
            f"runtime_options = {json.dumps(['-H', docker_host])}",
            f"partition = {json.dumps(slurm_cluster['partition'])}",
            f"data_root = {json.dumps(str(tmp_path / 'd'))}",
        ]
    )
    plan = tmp_path / "plan.toml"
    plan.write_text(
        f'[backend]\ntype = "slurm"\n\n[backend.options]\n{options}\n\n'
        '[[tasks]]\nid = "cpu"\nkind = "k"\nimage = "busybox:latest"\ncommand = ["true"]\n\n'
        '[[tasks]]\nid = "train"\nkind = "k"\nimage = "busybox:latest"\ncommand = ["true"]\n'
        'resources = { gpu = "gpu", count = 2 }\n'
    )
    done = _altar("check", str(plan))
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"altar: error: {plan}: tasks[1].resources.gpu: "), lines
    assert f"partition {slurm_cluster['partition']!r} has no node with GRES gpu:2" in lines[0]
    assert "(its nodes have: no GRES)" in lines[0]
    assert not list(tmp_path.glob("d/.altar-slurm/jobs/*")), "check created a job directory"
