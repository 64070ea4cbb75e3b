"""scripts/services: its command line, and the providers it leaves running actually work.

The provider tests use the shared fixtures of the root conftest.py (they read the env file
``scripts/services up`` writes) and exercise each provider the way the backends will.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SERVICES = ROOT / "scripts" / "services"


def _services(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SERVICES), *args], capture_output=True, text=True, timeout=60)


def test_usage_errors_exit_2_and_unknown_services_name_the_choices() -> None:
    assert _services().returncode == 2
    assert _services("sideways").returncode == 2
    unknown = _services("status", "--only", "docker,kubernetes")
    assert unknown.returncode == 1
    assert (
        "unknown service 'kubernetes' (choose from: docker slurm ssh chromium podman)"
        in unknown.stderr
    )


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("runuser") is None, reason="needs root")
def test_non_root_gets_one_message_naming_the_packages() -> None:
    # a copy another user can reach wherever the checkout lives
    with tempfile.TemporaryDirectory(dir="/tmp") as scratch:
        copy = Path(scratch) / "services"
        shutil.copy(SERVICES, copy)
        copy.chmod(0o755)
        Path(scratch).chmod(0o755)
        result = subprocess.run(
            ["runuser", "-u", "nobody", "--", str(copy), "up", "--only", "ssh"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert result.returncode == 1
    assert "needs root on Debian 12" in result.stderr
    assert "openssh-server openssh-client rsync" in result.stderr
    assert "docker.io" not in result.stderr  # only what --only asked for


@pytest.mark.docker
def test_docker_runs_the_offline_busybox_image(
    docker_host: str, service_env: dict[str, str]
) -> None:
    assert service_env["ALTAR_TEST_IMAGE"] == "busybox:latest"
    result = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "busybox:latest",
         "sh", "-c", "echo $((6*7))"],
        env={**os.environ, "DOCKER_HOST": docker_host}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "42"


@pytest.mark.ssh
def test_ssh_alias_wrapper_and_rsync_with_hostile_names(ssh_target, tmp_path: Path) -> None:
    env = {**os.environ, "PATH": f"{ssh_target.wrapper_dir}{os.pathsep}{os.environ['PATH']}"}
    # the way httk's transport calls it: only -p and -o, the wrapper adds -F
    by_address = subprocess.run(
        ["ssh", "-p", str(ssh_target.port), "-o", "ConnectTimeout=10",
         f"{ssh_target.user}@127.0.0.1", "echo", "reached"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert by_address.returncode == 0, by_address.stderr
    assert by_address.stdout.strip() == "reached"

    source = tmp_path / "src dir"
    source.mkdir()
    hostile = "a $(touch pwned) 'q' *.txt"
    (source / hostile).write_text("payload\n")
    dest = tmp_path / "dest $dir"
    push = subprocess.run(
        ["rsync", "-a", "--protect-args", "-e", "ssh", f"{source}/", f"{ssh_target.host}:{dest}/"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert push.returncode == 0, push.stderr
    assert (dest / hostile).read_text() == "payload\n"
    assert not (Path.home() / "pwned").exists()
    assert not list(tmp_path.rglob("pwned"))


def _sacct(job: str) -> str:
    """State|ExitCode of a job once slurmdbd has recorded its end (recording is asynchronous)."""
    deadline = time.monotonic() + 60
    while True:
        out = subprocess.run(
            ["sacct", "-n", "-X", "-P", "-j", job, "-o", "State,ExitCode"],
            capture_output=True, text=True, timeout=30,
        ).stdout.strip()  # fmt: skip
        if out and not out.startswith(("PENDING", "RUNNING")):
            return out
        if time.monotonic() > deadline:
            raise AssertionError(f"sacct never showed job {job} finished (last: {out!r})")
        time.sleep(0.5)


@pytest.mark.slurm
def test_slurm_runs_jobs_and_accounts_for_them(slurm_cluster: dict[str, str]) -> None:
    job = subprocess.run(
        ["sbatch", "--parsable", "--wait", "--time=2", "-p", slurm_cluster["partition"],
         "-o", "/dev/null", "--wrap", "exit 3"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    job_id = job.stdout.strip().split(";")[0]
    assert job_id.isdigit(), (job.stdout, job.stderr)
    assert _sacct(job_id) == "FAILED|3:0"


@pytest.mark.slurm
@pytest.mark.skipif(
    not (
        Path("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists()
        and os.access("/sys/fs/cgroup/memory", os.W_OK)
    ),
    reason="OUT_OF_MEMORY needs Slurm's cgroup v1 plugins (no writable v1 memory cgroup here)",
)
def test_slurm_reports_memory_overrun_as_out_of_memory(slurm_cluster: dict[str, str]) -> None:
    job = subprocess.run(
        ["sbatch", "--parsable", "--wait", "--time=2", "--mem=50M", "-o", "/dev/null",
         # one 300 MiB buffer in anonymous memory (tmpfs pages would outlive the kill)
         "--wrap", "dd if=/dev/zero of=/dev/null bs=300M count=1"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    job_id = job.stdout.strip().split(";")[0]
    assert job_id.isdigit(), (job.stdout, job.stderr)
    assert _sacct(job_id).split("|")[0] == "OUT_OF_MEMORY"


def _config(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout


@pytest.mark.slurm
def test_slurm_is_a_small_site_with_preemption_and_a_limited_qos(
    slurm_cluster: dict[str, str],
) -> None:
    config = dict(
        (key.strip(), value.strip())
        for key, _, value in (
            line.partition("=") for line in _config("scontrol", "show", "config").splitlines()
        )
    )
    assert config["PreemptType"] == "preempt/partition_prio"
    assert config["PreemptMode"] == "CANCEL"
    assert {"limits", "qos"} <= set(config["AccountingStorageEnforce"].split(","))
    assert config["MaxArraySize"] == "501"
    tiers = {}
    for line in _config("scontrol", "--oneliner", "show", "partition").splitlines():
        fields = dict(word.partition("=")[::2] for word in line.split())
        tiers[fields["PartitionName"]] = (int(fields["PriorityTier"]), fields["Default"])
    assert tiers[slurm_cluster["partition"]][1] == "YES"
    assert tiers["high"][0] > tiers[slurm_cluster["partition"]][0]
    qos = dict(
        line.split("|", 1)
        for line in _config(
            "sacctmgr", "-n", "-P", "show", "qos", "format=name,maxsubmitjobsperuser"
        ).split()
    )
    assert (qos["normal"], qos["limited"]) == ("", "20")  # the default QOS stays unlimited
