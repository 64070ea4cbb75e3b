"""ssh-slurm against a fake ssh that runs commands here through /bin/sh, and a fake sbatch."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest
from httk.workflow.adapter_runtime import targets, transfer
from httk.workflow.adapter_runtime.targets import SshTarget
from httk.workflow.adapters import add_remote, run_adapter

FAKE_HOST = "fake.example.test"


@pytest.fixture
def cluster(fake_cluster, set_queue) -> Path:
    bundle = add_remote("cluster", template="ssh-slurm")
    set_queue(bundle, host=FAKE_HOST, username="someone")
    return bundle


def test_invoke_quotes_every_word_for_the_remote_shell(fake_cluster, cluster: Path) -> None:
    hostile = ["a b", "$HOME", "`id`", "'q'", '"d"', "x;touch SENTINEL", "*", "new\nline", "$(id)"]
    argv = ["python3", "-c", "import json, sys; print(json.dumps(sys.argv[1:]))", *hostile]
    result = run_adapter(cluster, "invoke", {"queue": "default", "argv": argv})
    assert json.loads(result["stdout"]) == hostile
    assert not list(fake_cluster.root.rglob("SENTINEL"))
    (command,) = fake_cluster.ssh_commands()
    assert command["destination"] == "someone@fake.example.test"
    assert command["options"] == ["-o", "BatchMode=yes", "-o", "ConnectTimeout=20"]


def test_cwd_is_quoted_and_status_ignores_it(fake_cluster, cluster: Path) -> None:
    spaced = fake_cluster.root / "remote" / "a directory"
    spaced.mkdir()
    result = run_adapter(
        cluster, "invoke", {"queue": "default", "argv": ["pwd"], "cwd": str(spaced)}
    )
    assert result["stdout"].strip() == str(spaced)
    # The command runs under the guard that kills it when the caller goes away.
    command = fake_cluster.ssh_commands()[-1]["command"]
    assert command.startswith(f"cd '{spaced}' && sh -c ")
    assert command.endswith(" sh pwd")
    run_adapter(cluster, "status", {"queue": "default", "argv": ["pwd"], "cwd": str(spaced)})
    command = fake_cluster.ssh_commands()[-1]["command"]
    assert command.startswith("sh -c ")
    assert command.endswith(" sh pwd")
    failed = run_adapter(cluster, "invoke", {"queue": "default", "argv": ["false"]})
    assert failed["returncode"] == 1


def test_configure_connectivity(fake_cluster, cluster: Path, monkeypatch, set_queue) -> None:
    assert (
        run_adapter(cluster, "configure", {"queue": "default", "settings": {}})["connectivity"]
        == "ok"
    )
    skipped = {"check_connectivity": "NO"}
    assert (
        run_adapter(cluster, "configure", {"queue": "default", "settings": skipped})["connectivity"]
        == "skipped"
    )
    monkeypatch.setenv("HTTK_FAKE_SSH_REFUSE", "1")
    with pytest.raises(
        RuntimeError,
        match=re.escape(
            "cannot reach someone@fake.example.test: fake ssh: "
            "connect to host fake.example.test port 22: Connection refused; "
            "set check_connectivity=no"
        ),
    ):
        run_adapter(cluster, "configure", {"queue": "default", "settings": {}})
    with pytest.raises(RuntimeError, match=r"cannot reach someone@fake\.example\.test"):
        run_adapter(cluster, "install", {"queue": "default"})
    fresh = add_remote("fresh", template="ssh-slurm")
    assert (
        run_adapter(fresh, "configure", {"queue": "default", "settings": {}})["connectivity"]
        == "skipped"
    )


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"port": "22x"}, "port must be numeric: '22x'"),
        ({"port": "70000"}, "port must be numeric"),
        ({"host": "bad host"}, "host must not contain whitespace: 'bad host'"),
        ({"host": "-oProxyCommand=x"}, "host is not a valid name"),
        ({"username": "me you"}, "username must not contain whitespace"),
        ({"workers": "0"}, "workers must be a positive integer: '0'"),
        ({"workers": "four"}, "workers must be a positive integer"),
        ({"account": "p1\n#SBATCH --wrap=id"}, "account must not contain control characters"),
        ({"partition": "a\\b"}, "partition must not contain backslashes"),
        ({"ssh_multiplex": "sometimes"}, "ssh_multiplex must be yes, no or seconds"),
    ],
)
def test_settings_are_validated(fake_cluster, cluster: Path, settings, message) -> None:
    with pytest.raises(RuntimeError, match=message):
        run_adapter(cluster, "configure", {"queue": "default", "settings": settings})


def test_missing_host_is_a_crash(fake_cluster) -> None:
    bundle = add_remote("nohost", template="ssh-slurm")
    with pytest.raises(RuntimeError, match=r"failed \(2\).*needs a queue setting host=HOSTNAME"):
        run_adapter(bundle, "invoke", {"queue": "default", "argv": ["true"]})


def test_install_probes_and_creates_the_workspace(fake_cluster, cluster: Path, set_queue) -> None:
    workspace = fake_cluster.root / "remote" / "runs" / "fresh"
    set_queue(cluster, workspace=str(workspace))
    first = run_adapter(cluster, "install", {"queue": "default"})
    assert first["installed"] is True
    assert first["bootstrapped"] is False
    assert first["httk_command"] == ["httk"]
    assert first["httk_version"] == "httk 2.0.0"
    assert first["workspace_created"] is True
    assert workspace.is_dir()
    assert run_adapter(cluster, "install", {"queue": "default"})["workspace_created"] is False
    set_queue(cluster, httk_command="/nonexistent/httk")
    with pytest.raises(RuntimeError, match="pipx install httk-workflow"):
        run_adapter(cluster, "install", {"queue": "default"})


def _tree(root: Path) -> Path:
    (root / "files").mkdir(parents=True)
    (root / "files" / "runner").write_text("#!/bin/sh\n")
    (root / "files" / "runner").chmod(0o750)
    (root / "files" / "data with spaces.txt").write_text("payload")
    (root / "link").symlink_to("files/runner")
    return root


def test_push_pull_round_trip_over_rsync(fake_cluster, cluster: Path) -> None:
    source = _tree(fake_cluster.root / "src")
    remote = fake_cluster.root / "remote" / "in coming" / "job"
    request = {"queue": "default", "source": str(source), "destination": str(remote)}
    assert run_adapter(cluster, "push", request)["path"] == str(remote)
    assert (remote / "files" / "data with spaces.txt").read_text() == "payload"
    assert (remote / "files" / "runner").stat().st_mode & 0o777 == 0o750
    assert os.readlink(remote / "link") == "files/runner"
    assert run_adapter(cluster, "push", request)["ok"] is True  # resuming is repeating
    back = fake_cluster.root / "back"
    pulled = run_adapter(
        cluster, "pull", {"queue": "default", "source": str(remote), "destination": str(back)}
    )
    assert pulled["path"] == str(back)
    assert os.readlink(back / "link") == "files/runner"
    assert (back / "files" / "runner").stat().st_mode & 0o777 == 0o750
    rsyncs = [c["command"] for c in fake_cluster.ssh_commands() if "rsync" in str(c["command"])]
    assert rsyncs
    assert all("--server" in str(c) for c in rsyncs)


def test_file_batch_uses_files_from(fake_cluster, cluster: Path) -> None:
    source = _tree(fake_cluster.root / "src")
    remote = fake_cluster.root / "remote" / "batch"
    request = {
        "queue": "default",
        "source": str(source),
        "destination": str(remote),
        "files": ["files/data with spaces.txt"],
    }
    run_adapter(cluster, "push", request)
    assert sorted(p.relative_to(remote).as_posix() for p in remote.rglob("*")) == [
        "files",
        "files/data with spaces.txt",
    ]
    with pytest.raises(RuntimeError, match=r"not workspace relative: \.\./secret"):
        run_adapter(cluster, "push", {**request, "files": ["../secret"]})
    assert not list(Path("/tmp").glob("httk-adapter-files-*.txt"))


def test_rsync_without_mkpath_creates_the_parent(fake_cluster, monkeypatch) -> None:
    monkeypatch.setattr(transfer, "rsync_has_mkpath", lambda: False)
    source = _tree(fake_cluster.root / "src")
    target = SshTarget({"host": FAKE_HOST})
    destination = fake_cluster.root / "remote" / "deep" / "nested" / "target"
    transfer.rsync(
        target,
        source=str(source),
        destination=str(destination),
        directory=True,
        files=None,
        push=True,
    )
    assert (destination / "files" / "data with spaces.txt").is_file()
    assert any("mkdir -p --" in str(c["command"]) for c in fake_cluster.ssh_commands())


def test_rsync_failure_is_a_crash(fake_cluster, cluster: Path) -> None:
    request = {
        "queue": "default",
        "source": str(fake_cluster.root / "absent"),
        "destination": str(fake_cluster.root / "here"),
        "directory": True,
    }
    with pytest.raises(RuntimeError, match=r"adapter pull: rsync failed \(\d+\)"):
        run_adapter(cluster, "pull", request)


@pytest.mark.parametrize("directory", [True, False, None])
def test_a_push_of_a_missing_source_is_one_clear_line(
    fake_cluster, cluster: Path, directory: bool | None
) -> None:
    """Issue 23: not rsync's change_dir and error-code lines; nothing is asked of the target."""
    source = fake_cluster.root / "no such dir"
    request: dict[str, object] = {"queue": "default", "source": str(source), "destination": "/x"}
    if directory is not None:
        request["directory"] = directory
    with pytest.raises(RuntimeError) as crashed:
        run_adapter(cluster, "push", request)
    assert str(crashed.value).splitlines() == [
        f"adapter push failed (2): adapter push: source does not exist: {source}"
    ]
    assert "rsync" not in str(crashed.value)
    assert fake_cluster.ssh_commands() == []


def test_start_manager_submits_the_batch_script(fake_cluster, cluster: Path, set_queue) -> None:
    workspace = fake_cluster.root / "remote" / "ws"
    set_queue(
        cluster,
        workspace=str(workspace),
        account="p2026-1",
        partition="main",
        time_limit="04:00:00",
        nodes="2",
        cpus_per_task="16",
        workers="4",
    )
    result = run_adapter(
        cluster,
        "start-manager",
        {
            "queue": "default",
            "count": 3,
            "argv": ["httk", "workflow", "manager", "run", str(workspace)],
        },
    )
    assert result["count"] == 3
    assert result["job_ids"] == ["4201", "4202", "4203"]
    script = Path(result["script"])
    assert script.parent == workspace / ".httk-workflow" / "batch"
    text = script.read_text()
    assert text.startswith("#!/bin/bash\n# Generated by the httk workflow start-manager")
    for line in (
        "--account=p2026-1",
        "--partition=main",
        "--time=04:00:00",
        "--nodes=2",
        "--cpus-per-task=16",
        f"--chdir={workspace}",
    ):
        assert f"#SBATCH {line}\n" in text
    assert text.endswith(f"set -eu\nexec httk workflow manager run {workspace} --workers 4\n")
    spooled = fake_cluster.spooled()
    assert [s["argv"] for s in spooled] == [[str(script)]] * 3
    assert {s["cwd"] for s in spooled} == {str(workspace)}
    assert all(s["script"] == text for s in spooled)


def test_explicit_workers_and_workspace_precedence(fake_cluster, cluster: Path, set_queue) -> None:
    queue_ws = fake_cluster.root / "remote" / "queue-ws"
    argv_ws = fake_cluster.root / "remote" / "argv-ws"
    stated = fake_cluster.root / "remote" / "stated"
    set_queue(cluster, workspace=str(queue_ws), workers="4")
    argv = ["httk", "workflow", "manager", "run", str(argv_ws), "--workers", "1"]
    result = run_adapter(cluster, "start-manager", {"queue": "default", "argv": argv})
    assert Path(result["script"]).parent.parent.parent == argv_ws
    text = Path(result["script"]).read_text()
    assert "--workers 1" in text
    assert "--workers 4" not in text
    result = run_adapter(
        cluster, "start-manager", {"queue": "default", "argv": argv, "workspace": str(stated)}
    )
    assert Path(result["script"]).is_relative_to(stated)
    result = run_adapter(cluster, "start-manager", {"queue": "default", "argv": ["true"]})
    assert Path(result["script"]).is_relative_to(queue_ws)


def test_explicit_workers_in_equals_form_also_wins(fake_cluster, cluster: Path, set_queue) -> None:
    workspace = fake_cluster.root / "remote" / "ws"
    set_queue(cluster, workspace=str(workspace), workers="4")
    argv = ["httk", "workflow", "manager", "run", str(workspace), "--workers=1"]
    result = run_adapter(cluster, "start-manager", {"queue": "default", "argv": argv})
    text = Path(result["script"]).read_text()
    assert text.endswith(f"exec httk workflow manager run {workspace} --workers=1\n")


def test_sbatch_failure_is_a_crash_naming_the_submission(
    fake_cluster, cluster, set_queue, monkeypatch
) -> None:
    set_queue(cluster, workspace=str(fake_cluster.root / "remote" / "ws"))
    monkeypatch.setenv("HTTK_FAKE_SBATCH_FAIL", "1")
    with pytest.raises(
        RuntimeError, match=r"sbatch submission 1 of 1 failed \(1\): .*Invalid account"
    ):
        run_adapter(cluster, "start-manager", {"queue": "default", "argv": ["true"]})


def test_multiplexing_starts_one_master_and_joins_it(
    fake_cluster, cluster: Path, set_queue
) -> None:
    set_queue(cluster, ssh_multiplex="yes")
    run_adapter(cluster, "invoke", {"queue": "default", "argv": ["true"]})
    master, command = fake_cluster.ssh_commands()
    control = Path(os.environ["XDG_RUNTIME_DIR"]) / f"httk-ssh-{os.getuid()}"
    socket = targets.control_path(str(control), "someone@fake.example.test", None)
    assert "ControlMaster=yes" in master["options"]
    assert "-N" in master["options"]
    assert "ControlPersist=60" in master["options"]
    assert "ControlMaster=no" in command["options"]
    assert f"ControlPath={socket}" in command["options"]
    assert control.stat().st_mode & 0o777 == 0o700


def test_a_live_master_is_joined_without_starting_another(fake_cluster, cluster, set_queue) -> None:
    set_queue(cluster, ssh_multiplex="yes")
    control = Path(os.environ["XDG_RUNTIME_DIR"]) / f"httk-ssh-{os.getuid()}"
    control.mkdir(mode=0o700)
    path = targets.control_path(str(control), "someone@fake.example.test", None)
    import socket

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(4)
    try:
        run_adapter(cluster, "invoke", {"queue": "default", "argv": ["true"]})
    finally:
        listener.close()
    (command,) = fake_cluster.ssh_commands()
    assert "ControlMaster=no" in command["options"]
    # A socket nobody answers on is stale: it is removed and a new master started.
    run_adapter(cluster, "invoke", {"queue": "default", "argv": ["true"]})
    assert "ControlMaster=yes" in fake_cluster.ssh_commands()[1]["options"]


def test_multiplexing_refuses_a_shared_socket_directory(fake_cluster, cluster, set_queue) -> None:
    control = Path(os.environ["XDG_RUNTIME_DIR"]) / f"httk-ssh-{os.getuid()}"
    control.mkdir(mode=0o755)
    control.chmod(0o755)
    set_queue(cluster, ssh_multiplex="300")
    with pytest.raises(RuntimeError, match="must be a directory owned by you with mode 0700"):
        run_adapter(cluster, "invoke", {"queue": "default", "argv": ["true"]})


def test_a_long_runtime_directory_falls_back_to_a_short_one(env, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / ("x" * 80)))
    short = Path(tempfile.mkdtemp(prefix="t", dir="/tmp"))
    monkeypatch.setattr(tempfile, "tempdir", str(short))
    try:
        directory = targets.control_directory()
        assert directory == f"{short}/httk-ssh-{os.getuid()}"
        assert len(directory) + 41 < 104
    finally:
        shutil.rmtree(short)


def test_multiplexing_names_the_port(fake_cluster, cluster: Path, set_queue) -> None:
    set_queue(cluster, ssh_multiplex="yes", port="2222")
    run_adapter(cluster, "invoke", {"queue": "default", "argv": ["true"]})
    master, command = fake_cluster.ssh_commands()
    for entry in (master, command):
        assert entry["options"][:2] == ["-p", "2222"]
    control = Path(os.environ["XDG_RUNTIME_DIR"]) / f"httk-ssh-{os.getuid()}"
    assert targets.control_path(str(control), "h", "2222") != targets.control_path(
        str(control), "h", None
    )


def test_rsync_transport_refuses_words_rsync_would_reparse(env, monkeypatch) -> None:
    runtime = Path(tempfile.mkdtemp(prefix="q'", dir="/tmp"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    try:
        target = SshTarget({"host": "h", "ssh_multiplex": "yes"})
        with pytest.raises(ValueError, match="must not contain quotes or backslashes"):
            target.rsync_shell()
        assert SshTarget({"host": "h", "port": "22"}).rsync_shell() == (
            "ssh -p 22 -o BatchMode=yes -o ConnectTimeout=20"
        )
    finally:
        shutil.rmtree(runtime)
