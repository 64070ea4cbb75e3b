"""The maintained kinds against a real sshd on 127.0.0.1, real rsync, and a real Slurm with sacct.

Providers come from the root conftest fixtures (``scripts/services up``); without them these
tests skip, or fail under ALTAR_REQUIRE_SERVICES=1.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from httk.workflow.adapters import add_remote, run_adapter

pytestmark = [pytest.mark.integration]

HOSTILE = [
    "a b",
    "$HOME",
    "`touch SENTINEL`",
    "'single'",
    '"double"',
    "semi;colon",
    "star*",
    "?",
    "new\nline",
    "back\\slash",
    "$(touch SENTINEL)",
    "value; touch SENTINEL",
    "",
    "~",
    "-n",
]


@pytest.fixture
def over_ssh(env, ssh_target, set_queue, monkeypatch) -> Path:
    """An ssh-slurm remote reaching the test sshd through its alias."""
    # The transport passes only -p/-o; the wrapper adds -F with the alias's key and known_hosts.
    monkeypatch.setenv("PATH", f"{ssh_target.wrapper_dir}{os.pathsep}{os.environ['PATH']}")
    bundle = add_remote("cluster", template="ssh-slurm")
    set_queue(bundle, host=ssh_target.host)
    return bundle


def _printf_words(result: dict[str, object]) -> list[str]:
    return str(result["stdout"]).split("\0")[:-1]


@pytest.mark.ssh
def test_hostile_argv_arrives_intact_with_no_side_effect(env, over_ssh: Path) -> None:
    scratch = env.root / "remote scratch"
    scratch.mkdir()
    result = run_adapter(
        over_ssh,
        "invoke",
        {
            "queue": "default",
            "argv": ["/usr/bin/printf", "%s\\0", *HOSTILE],
            "cwd": str(scratch),
        },
    )
    assert result["returncode"] == 0, result
    assert _printf_words(result) == HOSTILE
    assert list(scratch.iterdir()) == []
    assert not list(env.root.rglob("SENTINEL"))
    assert not Path.home().joinpath("SENTINEL").exists()


@pytest.mark.ssh
def test_cwd_with_spaces_and_nonzero_returncode(env, over_ssh: Path) -> None:
    spaced = env.root / "a dir; $(x)"
    spaced.mkdir()
    request = {"queue": "default", "argv": ["pwd"], "cwd": str(spaced)}
    result = run_adapter(over_ssh, "invoke", request)
    assert result["stdout"] == f"{spaced}\n"
    failed = run_adapter(over_ssh, "status", {"queue": "default", "argv": ["sh", "-c", "exit 7"]})
    assert (failed["ok"], failed["returncode"]) == (True, 7)


def _tree(root: Path) -> Path:
    (root / "files" / "sub dir").mkdir(parents=True)
    (root / "files" / "runner").write_text("#!/bin/sh\necho run\n")
    (root / "files" / "runner").chmod(0o750)
    (root / "files" / "data with spaces.txt").write_text("payload")
    (root / "files" / "sub dir" / "it's $(odd).txt").write_text("odd")
    (root / "files" / "private").write_text("secret")
    (root / "files" / "private").chmod(0o600)
    (root / "link").symlink_to("files/runner")
    return root


def _snapshot(root: Path) -> dict[str, tuple[int, str]]:
    snapshot = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        content = (
            os.readlink(path)
            if path.is_symlink()
            else (path.read_text() if path.is_file() else "<dir>")
        )
        snapshot[path.relative_to(root).as_posix()] = (info.st_mode, content)
    return snapshot


@pytest.mark.ssh
def test_tree_round_trip_keeps_spaces_modes_and_symlinks(env, over_ssh: Path) -> None:
    source = _tree(env.root / "source tree")
    remote = env.root / "remote side" / "incoming" / "job 1"
    push = {"queue": "default", "source": str(source), "destination": str(remote)}
    assert run_adapter(over_ssh, "push", push)["path"] == str(remote)
    assert _snapshot(remote) == _snapshot(source)
    assert run_adapter(over_ssh, "push", push)["ok"] is True
    back = env.root / "back here"
    pull = {"queue": "default", "source": str(remote), "destination": str(back)}
    assert run_adapter(over_ssh, "pull", pull)["path"] == str(back)
    assert _snapshot(back) == _snapshot(source)


@pytest.mark.ssh
def test_file_batch_moves_only_the_listed_files(env, over_ssh: Path) -> None:
    source = _tree(env.root / "source")
    remote = env.root / "remote" / "batch"
    files = ["files/data with spaces.txt", "files/sub dir/it's $(odd).txt"]
    run_adapter(
        over_ssh,
        "push",
        {
            "queue": "default",
            "source": str(source),
            "destination": str(remote),
            "files": files,
        },
    )
    moved = sorted(p.relative_to(remote).as_posix() for p in remote.rglob("*") if p.is_file())
    assert moved == sorted(files)
    back = env.root / "back"
    run_adapter(
        over_ssh,
        "pull",
        {
            "queue": "default",
            "source": str(remote),
            "destination": str(back),
            "files": files[:1],
        },
    )
    assert [p.relative_to(back).as_posix() for p in back.rglob("*") if p.is_file()] == files[:1]


@pytest.mark.ssh
def test_configure_and_install_against_the_real_sshd(env, over_ssh: Path, ssh_target) -> None:
    configured = run_adapter(over_ssh, "configure", {"queue": "default", "settings": {}})
    assert configured["connectivity"] == "ok"
    with pytest.raises(RuntimeError, match="pipx install httk-workflow"):
        run_adapter(over_ssh, "install", {"queue": "default"})


@pytest.mark.ssh
def test_install_finds_httk_and_creates_the_workspace(env, over_ssh: Path, set_queue) -> None:
    fake = env.root / "remote bin" / "httk"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\n[ "$1" = --version ] && echo "httk 2.0.0"\nexit 0\n')
    fake.chmod(0o755)
    workspace = env.root / "runs" / "fresh ws"
    set_queue(over_ssh, httk_command=f"'{fake}'", workspace=str(workspace))
    first = run_adapter(over_ssh, "install", {"queue": "default"})
    assert first["installed"] is True
    assert first["httk_command"] == [str(fake)]
    assert first["httk_version"] == "httk 2.0.0"
    assert first["workspace_created"] is True
    assert workspace.is_dir()
    assert run_adapter(over_ssh, "install", {"queue": "default"})["workspace_created"] is False


@pytest.mark.ssh
def test_unreachable_host_is_the_documented_refusal(env, over_ssh: Path) -> None:
    settings = {"host": "127.0.0.1", "port": "1", "username": "nobody"}
    with pytest.raises(RuntimeError) as refused:
        run_adapter(over_ssh, "configure", {"queue": "default", "settings": settings})
    message = str(refused.value)
    assert message.startswith("cannot reach nobody@127.0.0.1: ")
    assert "Connection refused" in message
    assert message.endswith("; set check_connectivity=no to configure the queue anyway")


@pytest.mark.ssh
def test_an_operation_timing_out_is_killed(env, over_ssh: Path) -> None:
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"adapter invoke exceeded 1\.5 seconds"):
        run_adapter(over_ssh, "invoke", {"queue": "default", "argv": ["sleep", "30"]}, timeout=1.5)
    assert time.monotonic() - started < 15


@pytest.mark.ssh
def test_multiplexing_shares_one_master(
    env, over_ssh: Path, set_queue, ssh_target, monkeypatch
) -> None:
    set_queue(over_ssh, ssh_multiplex="20")
    # A runtime directory as short as /run/user/UID, so the socket path fits in 108 bytes.
    runtime = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    control = runtime / f"httk-ssh-{os.getuid()}"
    try:
        for _ in range(3):
            result = run_adapter(over_ssh, "invoke", {"queue": "default", "argv": ["true"]})
            assert result["returncode"] == 0, result["stderr"]
        sockets = [p for p in control.iterdir() if not p.name.endswith(".lock")]
        assert len(sockets) == 1
        assert control.stat().st_mode & 0o777 == 0o700
        check = subprocess.run(
            ["ssh", "-o", f"ControlPath={sockets[0]}", "-O", "check", ssh_target.host],
            capture_output=True,
            text=True,
            check=False,
        )
        assert check.returncode == 0, check.stderr
        source = _tree(env.root / "mux source")
        remote = env.root / "mux remote"
        run_adapter(
            over_ssh,
            "push",
            {"queue": "default", "source": str(source), "destination": str(remote)},
        )
        assert _snapshot(remote) == _snapshot(source)
    finally:
        for socket in control.glob("*"):
            if not socket.name.endswith(".lock"):
                subprocess.run(
                    ["ssh", "-o", f"ControlPath={socket}", "-O", "exit", ssh_target.host],
                    capture_output=True,
                    check=False,
                )
        shutil.rmtree(runtime, ignore_errors=True)


SINCE = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 5))


def _sacct(job_id: str) -> dict[str, str]:
    fields = [
        "JobID",
        "JobName",
        "Partition",
        "Account",
        "Timelimit",
        "State",
        "WorkDir",
        "NNodes",
        "ReqCPUS",
    ]
    completed = subprocess.run(
        # Ids restart when the controller's state is reset: only look at this run's jobs.
        ["sacct", "-j", job_id, "-S", SINCE, "-X", "-n", "-P", "-o", ",".join(fields)],
        capture_output=True,
        text=True,
        check=True,
    )
    rows = [line.split("|") for line in completed.stdout.splitlines() if line]
    return dict(zip(fields, rows[-1], strict=True)) if rows else {}


def _finished(job_id: str, timeout: float = 90) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = _sacct(job_id)
        # slurmdbd learns a job's details asynchronously; wait for the complete record.
        terminal = row.get("State", "").split(" ")[0] in {"COMPLETED", "FAILED", "CANCELLED"}
        if terminal and row.get("Partition"):
            return row
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} did not finish: {_sacct(job_id)}")


def _check_jobs(
    result: dict[str, object], workspace: Path, partition: str, cpus: str = "1"
) -> None:
    job_ids = result["job_ids"]
    assert isinstance(job_ids, list)
    assert len(job_ids) == result["count"] == 2
    for job_id in job_ids:
        row = _finished(job_id)
        assert row["JobID"] == job_id
        assert row["JobName"] == "httk-manager"
        assert row["State"] == "COMPLETED"
        assert row["Partition"] == partition
        assert row["Account"] == "root"
        assert row["Timelimit"] == "00:05:00"
        assert row["WorkDir"] == str(workspace)
        assert row["NNodes"] == "1"
        assert row["ReqCPUS"] == cpus
        log = workspace / ".httk-workflow" / "batch" / f"manager-{job_id}.out"
        deadline = time.monotonic() + 10
        while not log.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        words = log.read_text().split("\0")[:-1]
        assert words == ["workflow", "manager", "run", str(workspace), "a b;$(x)", "--workers", "2"]


@pytest.mark.slurm
@pytest.mark.ssh
def test_ssh_slurm_start_manager_submits_real_jobs(env, over_ssh, set_queue, slurm_cluster) -> None:
    workspace = env.root / "slurm ws"
    set_queue(
        over_ssh,
        workspace=str(workspace),
        partition=slurm_cluster["partition"],
        account="root",
        time_limit="00:05:00",
        nodes="1",
        cpus_per_task="2",
        workers="2",
        httk_command="/usr/bin/printf %s\\\\0",
    )
    result = run_adapter(
        over_ssh,
        "start-manager",
        {
            "queue": "default",
            "count": 2,
            "argv": ["httk", "workflow", "manager", "run", str(workspace), "a b;$(x)"],
        },
    )
    script = Path(str(result["script"]))
    assert script.parent == workspace / ".httk-workflow" / "batch"
    assert '#SBATCH --chdir="' in script.read_text()
    _check_jobs(result, workspace, slurm_cluster["partition"], cpus="2")


@pytest.mark.slurm
def test_local_slurm_start_manager_submits_real_jobs(env, set_queue, slurm_cluster) -> None:
    bundle = add_remote("batch", template="local-slurm")
    workspace = env.root / "local-ws"
    set_queue(
        bundle,
        workspace=str(workspace),
        partition=slurm_cluster["partition"],
        account="root",
        time_limit="5",
        workers="2",
        httk_command="/usr/bin/printf %s\\\\0",
    )
    result = run_adapter(
        bundle,
        "start-manager",
        {
            "queue": "default",
            "count": 2,
            "argv": ["httk", "workflow", "manager", "run", str(workspace), "a b;$(x)"],
        },
    )
    _check_jobs(result, workspace, slurm_cluster["partition"])
    assert json.loads(json.dumps(result))["script"].endswith(".sbatch")


@pytest.mark.slurm
@pytest.mark.parametrize("name", ["run#1", "it's here", 'say "hi" #2'])
def test_sbatch_reads_a_workspace_holding_its_own_syntax(
    env, set_queue, slurm_cluster, name: str
) -> None:
    # sbatch splits #SBATCH lines itself: '#' starts a comment, quotes group words.
    bundle = add_remote("batch", template="local-slurm")
    workspace = env.root / name
    set_queue(
        bundle,
        workspace=str(workspace),
        partition=slurm_cluster["partition"],
        time_limit="5",
        httk_command="/usr/bin/printf %s\\\\0",
    )
    result = run_adapter(
        bundle,
        "start-manager",
        {"queue": "default", "argv": ["httk", "workflow", "manager", "run", str(workspace)]},
    )
    (job_id,) = result["job_ids"]
    row = _finished(job_id)
    # slurmdbd stores a double quote as a backquote; the job itself ran in the workspace.
    assert (row["State"], row["WorkDir"]) == ("COMPLETED", str(workspace).replace('"', "`"))
    log = workspace / ".httk-workflow" / "batch" / f"manager-{job_id}.out"
    deadline = time.monotonic() + 10
    while not log.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert log.read_text().split("\0")[:-1] == ["workflow", "manager", "run", str(workspace)]
