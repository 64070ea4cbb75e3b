"""Issue 17's defects, each against the real component: sshd, rsync, Slurm, git."""

from __future__ import annotations

import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from httk.workflow.adapters import (
    AdapterRefused,
    InsecureCredentialsWarning,
    RemoteUnreachable,
    add_remote,
    run_adapter,
)


def _finished(job_id: str, timeout: float = 90) -> dict[str, str]:
    """sacct's record of a finished job (waits for slurmdbd to have all of it)."""
    fields = ["JobID", "State", "WorkDir", "Partition"]
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 600))
    deadline = time.monotonic() + timeout
    row: dict[str, str] = {}
    while time.monotonic() < deadline:
        completed = subprocess.run(
            ["sacct", "-j", job_id, "-S", since, "-X", "-n", "-P", "-o", ",".join(fields)],
            capture_output=True,
            text=True,
            check=True,
        )
        rows = [line.split("|") for line in completed.stdout.splitlines() if line]
        row = dict(zip(fields, rows[-1], strict=True)) if rows else {}
        if row.get("State", "").split(" ")[0] in {"COMPLETED", "FAILED", "CANCELLED"} and row.get(
            "Partition"
        ):
            return row
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} did not finish: {row}")


pytestmark = [pytest.mark.integration]
HOME = Path("~").expanduser()


@pytest.fixture
def over_ssh(env, ssh_target, set_queue, monkeypatch) -> Path:
    monkeypatch.setenv("PATH", f"{ssh_target.wrapper_dir}{os.pathsep}{os.environ['PATH']}")
    bundle = add_remote("hpc", template="ssh-slurm")
    set_queue(bundle, host=ssh_target.host)
    return bundle


@pytest.fixture
def in_home():
    """A fresh directory name below the (shared) home directory, removed afterwards."""
    name = f"httk-test-{uuid.uuid4().hex[:12]}"
    yield name
    shutil.rmtree(HOME / name, ignore_errors=True)


def _cli(env, *argv: str, check: bool = False) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "httk.workflow.adapters", *argv],
        capture_output=True,
        cwd=env.project,
        check=check,
    )


# 1 -----------------------------------------------------------------------------------------


@pytest.mark.ssh
def test_push_of_names_rsync_reads_as_comments(env, over_ssh: Path) -> None:
    source = env.root / "src"
    source.mkdir()
    for name, text in (("#hash", "a"), (";semi", "b"), ("ok", "c"), ("#dir", None)):
        if text is None:
            (source / name).mkdir()
            (source / name / ";inner").write_text("d")
        else:
            (source / name).write_text(text)
    destination = env.root / "dest"
    files = ["#hash", ";semi", "ok", "#dir/;inner"]
    done = _cli(
        env,
        "transfer",
        "push",
        "hpc",
        str(source),
        str(destination),
        *[f"--file={name}" for name in files],
    )
    assert done.returncode == 0, done.stderr
    arrived = sorted(p.relative_to(destination).as_posix() for p in destination.rglob("*"))
    assert arrived == sorted(["#hash", ";semi", "ok", "#dir", "#dir/;inner"])
    back = env.root / "back"
    run_adapter(
        over_ssh,
        "pull",
        {"queue": "default", "source": str(destination), "destination": str(back), "files": files},
    )
    assert (back / "#dir" / ";inner").read_text() == "d"
    assert (back / "#hash").read_text() == "a"


# 2 -----------------------------------------------------------------------------------------


@pytest.mark.ssh
def test_tilde_workspace_over_ssh_is_the_home_directory(
    env, over_ssh: Path, set_queue, in_home: str
) -> None:
    set_queue(over_ssh, workspace=f"~/{in_home}/ws", httk_command="/usr/bin/printf %s")
    result = run_adapter(over_ssh, "install", {"queue": "default"})
    assert result["workspace_created"] is True
    assert (HOME / in_home / "ws").is_dir()
    assert result["workspace_path"] == str(HOME / in_home / "ws")
    assert not list(HOME.glob("~")), "a directory literally named ~ was created"
    source = env.root / "payload"
    source.mkdir()
    (source / "f").write_text("x")
    pushed = {"queue": "default", "source": str(source), "destination": f"~/{in_home}/in"}
    assert run_adapter(over_ssh, "push", pushed)["path"] == f"~/{in_home}/in"
    assert (HOME / in_home / "in" / "f").read_text() == "x"
    ran = run_adapter(
        over_ssh, "invoke", {"queue": "default", "argv": ["pwd"], "cwd": f"~/{in_home}/ws"}
    )
    assert ran["stdout"] == f"{HOME / in_home / 'ws'}\n"


def test_tilde_workspace_on_the_local_kinds_is_expanded_everywhere(
    env, set_queue, in_home: str
) -> None:
    bundle = add_remote("here", template="local")
    set_queue(bundle, workspace=f"~/{in_home}/ws", httk_command="/usr/bin/printf %s")
    run_adapter(bundle, "install", {"queue": "default"})
    assert (HOME / in_home / "ws").is_dir()
    assert not (env.project / "~").exists()
    ran = run_adapter(
        bundle, "invoke", {"queue": "default", "argv": ["pwd"], "cwd": f"~/{in_home}/ws"}
    )
    assert ran["stdout"] == f"{HOME / in_home / 'ws'}\n"


@pytest.mark.slurm
def test_tilde_workspace_on_local_slurm_runs_the_job_there(
    env, set_queue, slurm_cluster, in_home: str
) -> None:
    bundle = add_remote("batch", template="local-slurm")
    set_queue(
        bundle,
        workspace=f"~/{in_home}",
        partition=slurm_cluster["partition"],
        time_limit="5",
        httk_command="/usr/bin/printf %s\\\\0",
    )
    argv = ["httk", "workflow", "manager", "run", f"~/{in_home}"]
    result = run_adapter(bundle, "start-manager", {"queue": "default", "argv": argv})
    (job_id,) = result["job_ids"]
    row = _finished(job_id)
    assert (row["State"], row["WorkDir"]) == ("COMPLETED", str(HOME / in_home))
    assert Path(result["script"]).parent == HOME / in_home / ".httk-workflow" / "batch"


# 3 -----------------------------------------------------------------------------------------


@pytest.mark.slurm
@pytest.mark.ssh
def test_relative_workspace_over_ssh_slurm(
    env, over_ssh, set_queue, slurm_cluster, in_home: str
) -> None:
    set_queue(
        over_ssh,
        workspace=f"{in_home}/ws",
        partition=slurm_cluster["partition"],
        time_limit="5",
        httk_command="/usr/bin/printf %s\\\\0",
    )
    argv = ["httk", "workflow", "manager", "run", f"{in_home}/ws"]
    result = run_adapter(over_ssh, "start-manager", {"queue": "default", "argv": argv})
    (job_id,) = result["job_ids"]
    assert result["script"].startswith(f"{HOME / in_home / 'ws'}/.httk-workflow/batch/")
    row = _finished(job_id)
    assert (row["State"], row["WorkDir"]) == ("COMPLETED", str(HOME / in_home / "ws"))
    log = HOME / in_home / "ws" / ".httk-workflow" / "batch" / f"manager-{job_id}.out"
    deadline = time.monotonic() + 10
    while not log.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert log.read_text().split("\0")[:-1] == [
        "workflow",
        "manager",
        "run",
        str(HOME / in_home / "ws"),
    ]


@pytest.mark.slurm
def test_relative_workspace_locally_is_the_projects_from_any_directory(
    env, set_queue, slurm_cluster, monkeypatch
) -> None:
    bundle = add_remote("batch", template="local-slurm")
    set_queue(
        bundle,
        workspace="runs/ws",
        partition=slurm_cluster["partition"],
        time_limit="5",
        httk_command="/usr/bin/printf %s\\\\0",
    )
    deeper = env.project / "sub" / "dir"
    deeper.mkdir(parents=True)
    monkeypatch.chdir(deeper)
    argv = ["httk", "workflow", "manager", "run", "runs/ws"]
    result = run_adapter(bundle, "start-manager", {"queue": "default", "argv": argv})
    (job_id,) = result["job_ids"]
    row = _finished(job_id)
    assert (row["State"], row["WorkDir"]) == ("COMPLETED", str(env.project / "runs" / "ws"))
    assert not (deeper / "runs").exists()


@pytest.mark.slurm
def test_a_refused_submission_leaves_no_script(env, set_queue, slurm_cluster) -> None:
    bundle = add_remote("batch", template="local-slurm")
    workspace = env.root / "ws"
    set_queue(
        bundle,
        workspace=str(workspace),
        partition="no-such-partition",
        httk_command="/usr/bin/printf %s",
    )
    argv = ["httk", "workflow", "manager", "run", str(workspace)]
    with pytest.raises(RuntimeError, match="sbatch submission 1 of 1 failed") as failed:
        run_adapter(bundle, "start-manager", {"queue": "default", "argv": argv})
    assert list((workspace / ".httk-workflow" / "batch").glob("*.sbatch")) == []
    # sbatch's own message appears once, not once forwarded and once in the error.
    message = str(failed.value)
    assert message.count("invalid partition") == 1, message


# 4 -----------------------------------------------------------------------------------------


@pytest.mark.ssh
def test_unreachable_host_is_a_refusal_for_invoke_and_status(env, over_ssh, set_queue) -> None:
    set_queue(over_ssh, host="127.0.0.1", port="1")
    for operation in ("invoke", "status"):
        with pytest.raises(RemoteUnreachable, match=r"cannot reach 127\.0\.0\.1: .*refused"):
            run_adapter(over_ssh, operation, {"queue": "default", "argv": ["true"]})
    done = _cli(env, "transfer", "invoke", "hpc", "--json", "--", "true")
    assert done.returncode == 2
    assert b"cannot reach 127.0.0.1" in done.stderr
    assert done.stdout == b""


@pytest.mark.ssh
def test_a_wrong_host_key_is_a_refusal_shown_on_several_lines(
    env, over_ssh, ssh_target, monkeypatch
) -> None:
    wrong = env.root / "wrong"
    wrong.mkdir()
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong / "k")], check=True
    )
    public = (wrong / "k.pub").read_text().split()[:2]
    (wrong / "known_hosts").write_text(
        f"[127.0.0.1]:2222,[localhost]:2222,[{ssh_target.host}]:2222 {' '.join(public)}\n"
    )
    # The services state dir differs between machines (CI uses a fresh one), so rewrite whatever
    # file the config names rather than a fixed path.
    config, rewritten = re.subn(
        r"(?m)^(\s*UserKnownHostsFile\s+).*$",
        lambda m: m.group(1) + str(wrong / "known_hosts"),
        Path(ssh_target.config).read_text(),
    )
    assert rewritten, "the test ssh config names no UserKnownHostsFile"
    (wrong / "config").write_text(config)
    (wrong / "ssh").write_text(f'#!/bin/sh\nexec /usr/bin/ssh -F {wrong / "config"} "$@"\n')
    (wrong / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{wrong}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(RemoteUnreachable, match="Host key verification failed"):
        run_adapter(over_ssh, "invoke", {"queue": "default", "argv": ["true"]})
    done = _cli(env, "transfer", "invoke", "hpc", "--", "true")
    assert done.returncode == 2
    lines = done.stderr.decode().splitlines()
    assert lines[0].startswith("httk-workflow: cannot reach")
    assert any("REMOTE HOST IDENTIFICATION HAS CHANGED" in line for line in lines[1:])
    assert lines[-1].strip() == "Host key verification failed."


@pytest.mark.ssh
def test_a_remote_exit_255_is_still_a_result(env, over_ssh) -> None:
    result = run_adapter(over_ssh, "invoke", {"queue": "default", "argv": ["sh", "-c", "exit 255"]})
    assert (result["ok"], result["returncode"]) == (True, 255)


# 5 -----------------------------------------------------------------------------------------


def _remote_sleeps(marker: str) -> list[str]:
    found = subprocess.run(["pgrep", "-af", f"sleep {marker}"], capture_output=True, text=True)
    return [line for line in found.stdout.splitlines() if "pgrep" not in line]


@pytest.mark.ssh
@pytest.mark.parametrize("multiplex", ["no", "20"])
def test_a_timeout_kills_the_remote_command_and_what_it_started(
    env, over_ssh, set_queue, multiplex: str
) -> None:
    set_queue(over_ssh, ssh_multiplex=multiplex)
    marker = str(3000 + uuid.uuid4().int % 5000)
    argv = ["sh", "-c", f"sleep {marker}1 & sleep {marker}2"]
    try:
        with pytest.raises(TimeoutError, match="exceeded 3 seconds"):
            run_adapter(over_ssh, "invoke", {"queue": "default", "argv": argv}, timeout=3)
        deadline = time.monotonic() + 20  # the remote side learns of it asynchronously
        while _remote_sleeps(marker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _remote_sleeps(marker) == []
    finally:
        subprocess.run(["pkill", "-f", f"sleep {marker}"], check=False)
        run_adapter(over_ssh, "invoke", {"queue": "default", "argv": ["true"]})


# 6 -----------------------------------------------------------------------------------------

RAW = b"\x89PNG\r\n\x1a\nline\r\nlast\rx\xff"


@pytest.mark.ssh
def test_output_bytes_survive_over_ssh_and_locally(env, over_ssh) -> None:
    argv = ["printf", "\\211PNG\\r\\n\\032\\nline\\r\\nlast\\rx\\377"]
    result = run_adapter(over_ssh, "invoke", {"queue": "default", "argv": argv})
    assert result["stdout"].encode("utf-8", "surrogateescape") == RAW
    local = add_remote("here", template="local")
    result = run_adapter(local, "invoke", {"queue": "default", "argv": argv})
    assert result["stdout"].encode("utf-8", "surrogateescape") == RAW
    done = _cli(env, "transfer", "invoke", "hpc", "--", *argv)
    assert (done.returncode, done.stdout) == (0, RAW)


# 7 -----------------------------------------------------------------------------------------


def test_a_name_with_a_colon_is_refused(env) -> None:
    done = _cli(env, "remote", "add", "bad name:x", "--template", "local")
    assert done.returncode == 2
    assert b"invalid remote name" in done.stderr
    assert not (env.project / ".httk-project" / "remotes").exists() or not list(
        (env.project / ".httk-project" / "remotes").iterdir()
    )


# 8 -----------------------------------------------------------------------------------------


def test_git_does_not_stage_credentials_and_an_open_file_is_warned(env) -> None:
    subprocess.run(["git", "init", "-q", str(env.project)], check=True)
    _cli(env, "remote", "add", "here", "--template", "local", check=True)
    _cli(env, "remote", "configure", "here", "--set", "password=hunter2", check=True)
    subprocess.run(["git", "-C", str(env.project), "add", "-A"], check=True)
    staged = subprocess.run(
        ["git", "-C", str(env.project), "diff", "--cached", "--name-only"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert ".httk-project/remotes/here/remote.json" in staged
    assert not [name for name in staged if "credentials" in name]
    credentials = env.project / ".httk-project" / "remotes" / "here" / "credentials.json"
    assert credentials.stat().st_mode & 0o777 == 0o600
    credentials.chmod(0o644)
    done = _cli(env, "transfer", "invoke", "here", "--", "true")
    assert done.returncode == 0
    assert b"warning:" in done.stderr
    assert b"0644" in done.stderr
    assert b"hunter2" not in done.stderr
    with pytest.warns(InsecureCredentialsWarning, match="chmod 600"):
        run_adapter(credentials.parent, "invoke", {"queue": "default", "argv": ["true"]})


# 9 -----------------------------------------------------------------------------------------


@pytest.mark.slurm
@pytest.mark.ssh
def test_start_manager_refuses_when_httk_is_missing_on_the_target(
    env, over_ssh, set_queue, slurm_cluster
) -> None:
    workspace = env.root / "ws"
    set_queue(
        over_ssh,
        workspace=str(workspace),
        partition=slurm_cluster["partition"],
        httk_command="/nonexistent/httk",
    )
    argv = ["httk", "workflow", "manager", "run", str(workspace)]
    with pytest.raises(AdapterRefused, match="pipx install httk-workflow"):
        run_adapter(over_ssh, "start-manager", {"queue": "default", "argv": argv})
    assert not list(workspace.rglob("*.sbatch"))


@pytest.mark.slurm
@pytest.mark.parametrize("httk_command", [None, "/nonexistent/httk", "/bin/false"])
def test_local_slurm_start_manager_refuses_when_httk_is_missing(
    env, set_queue, slurm_cluster, monkeypatch, httk_command: str | None
) -> None:
    # No httk on PATH and none importable: the adapter must not fall back to a job that exits 127.
    monkeypatch.setenv("PATH", _path_without_httk())
    bundle = add_remote("batch", template="local-slurm")
    workspace = env.root / "ws"
    settings: dict[str, object] = {
        "workspace": str(workspace),
        "partition": slurm_cluster["partition"],
    }
    if httk_command is not None:
        settings["httk_command"] = httk_command
    set_queue(bundle, **settings)
    argv = ["httk", "workflow", "manager", "run", str(workspace)]
    before = _my_jobs()
    with pytest.raises(AdapterRefused, match="pipx install httk-workflow"):
        run_adapter(bundle, "start-manager", {"queue": "default", "argv": argv})
    assert not list(workspace.rglob("*.sbatch"))
    assert _my_jobs() == before


@pytest.mark.parametrize("httk_command", [None, "/nonexistent/httk", "/bin/false"])
def test_local_start_manager_refuses_when_httk_is_missing(
    env, set_queue, monkeypatch, httk_command: str | None
) -> None:
    monkeypatch.setenv("PATH", _path_without_httk())
    bundle = add_remote("here", template="local")
    if httk_command is not None:
        set_queue(bundle, httk_command=httk_command)
    argv = ["httk", "workflow", "manager", "run", str(env.root / "ws")]
    with pytest.raises(AdapterRefused, match="pipx install httk-workflow"):
        run_adapter(bundle, "start-manager", {"queue": "default", "argv": argv})


def _path_without_httk() -> str:
    kept = [
        part
        for part in os.environ["PATH"].split(os.pathsep)
        if part and not os.path.exists(os.path.join(part, "httk"))
    ]
    return os.pathsep.join(kept)


def _my_jobs() -> str:
    return subprocess.run(
        ["squeue", "--me", "-h", "-o", "%i"], capture_output=True, text=True, check=True
    ).stdout


@pytest.mark.ssh
def test_a_single_file_is_pulled_as_a_file(env, over_ssh) -> None:
    remote = env.root / "far" / "result.txt"
    remote.parent.mkdir()
    remote.write_text("r")
    local = env.root / "near" / "result.txt"
    done = _cli(env, "transfer", "pull", "hpc", str(remote), str(local))
    assert done.returncode == 0, done.stderr
    assert local.read_text() == "r"


@pytest.mark.ssh
def test_an_rsync_failure_is_reported_once(env, over_ssh) -> None:
    done = _cli(env, "transfer", "pull", "hpc", str(env.root / "missing"), str(env.root / "x"))
    assert done.returncode == 2
    err = done.stderr.decode()
    assert "rsync failed" in err
    assert err.count("No such file or directory") == 1, err


# 10 ----------------------------------------------------------------------------------------


@pytest.mark.ssh
def test_twelve_parallel_invokes_on_one_master_draw_no_refusals(env, over_ssh, set_queue) -> None:
    set_queue(over_ssh, ssh_multiplex="30")

    def once(_: int) -> dict[str, object]:
        return run_adapter(over_ssh, "invoke", {"queue": "default", "argv": ["sleep", "2"]})

    try:
        with concurrent.futures.ThreadPoolExecutor(12) as pool:
            results = list(pool.map(once, range(12)))
        assert [r["returncode"] for r in results] == [0] * 12
        noise = [
            r
            for r in results
            if "mux_client" in str(r.get("stderr", ""))
            or "mux_client" in str(r.get("diagnostics", ""))
        ]
        assert noise == []
    finally:
        _cli(env, "remote", "disconnect", "hpc")


@pytest.mark.ssh
def test_an_unreachable_host_while_resolving_a_relative_workspace_is_a_refusal(
    env, over_ssh, set_queue
) -> None:
    set_queue(over_ssh, host="127.0.0.1", port="1", workspace="relative/ws")
    argv = ["httk", "workflow", "manager", "run", "relative/ws"]
    with pytest.raises(RemoteUnreachable, match=r"cannot reach 127\.0\.0\.1"):
        run_adapter(over_ssh, "start-manager", {"queue": "default", "argv": argv})
