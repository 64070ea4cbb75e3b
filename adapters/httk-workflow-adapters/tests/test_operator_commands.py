"""The operator commands of issue 17, through the CLI (real sshd, rsync and Slurm where used)."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import time
from pathlib import Path

import pytest
from httk.workflow.adapters import __version__, add_remote, queue_settings, read_metadata


def _cli(
    env, *argv: str, stdin: str | None = None, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "httk.workflow.adapters", *argv],
        capture_output=True,
        text=True,
        input=stdin,
        cwd=env.project,
        env={**os.environ, **(extra_env or {})},
        check=False,
    )


@pytest.fixture
def over_ssh(env, ssh_target, set_queue, monkeypatch) -> Path:
    monkeypatch.setenv("PATH", f"{ssh_target.wrapper_dir}{os.pathsep}{os.environ['PATH']}")
    bundle = add_remote("hpc", template="ssh-slurm")
    set_queue(bundle, host=ssh_target.host)
    return bundle


def test_version(env) -> None:
    done = _cli(env, "--version")
    assert (done.returncode, done.stdout) == (0, f"httk-workflow {__version__}\n")


def test_list_shows_kind_and_validity(env) -> None:
    good = add_remote("good", template="local")
    bad = add_remote("bad", template="local")
    (bad / "adapter").chmod(0o644)
    done = _cli(env, "remote", "list", "--json")
    rows = {row["name"]: row for row in json.loads(done.stdout)}
    assert rows["good"] == {
        "name": "good",
        "scope": "project",
        "path": str(good),
        "kind": "local",
        "valid": True,
        "problem": None,
    }
    assert rows["bad"]["valid"] is False
    assert "adapter executable is not runnable" in rows["bad"]["problem"]
    text = _cli(env, "remote", "list").stdout.splitlines()
    assert text[0].split()[:4] == ["bad", "project", "local", "INVALID:"]
    assert text[1].split()[:4] == ["good", "project", "local", "valid"]


def test_unset_a_setting_and_a_credential(env) -> None:
    bundle = add_remote("here", template="local")
    assert (
        _cli(
            env,
            "remote",
            "configure",
            "here",
            "--set",
            "workspace=/w",
            "--set",
            "token=abc",
            "--set",
            "password=pw",
        ).returncode
        == 0
    )
    done = _cli(
        env, "remote", "configure", "here", "--unset", "workspace", "--unset", "token", "--json"
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["unset"] == {
        "remote.json": ["workspace"],
        "credentials.json": ["token"],
    }
    assert queue_settings(bundle, "default") == {"password": "pw"}
    missing = _cli(env, "remote", "configure", "here", "--unset", "nothing")
    assert missing.returncode == 2
    assert "has no setting or credential nothing" in missing.stderr


def test_secrets_from_stdin_and_the_environment_never_on_argv(env) -> None:
    bundle = add_remote("here", template="local")
    done = _cli(env, "remote", "configure", "here", "--set-stdin", "token", stdin="s3cr3t v\n")
    assert done.returncode == 0, done.stderr
    done = _cli(
        env,
        "remote",
        "configure",
        "here",
        "--set-from-env",
        "password=MY_PW",
        extra_env={"MY_PW": "from env"},
    )
    assert done.returncode == 0, done.stderr
    assert queue_settings(bundle, "default") == {"token": "s3cr3t v", "password": "from env"}
    assert "s3cr3t" not in done.stderr + done.stdout
    unset = _cli(env, "remote", "configure", "here", "--set-from-env", "x=NOT_SET_ANYWHERE")
    assert unset.returncode == 2
    assert "NOT_SET_ANYWHERE is not set" in unset.stderr
    empty = _cli(env, "remote", "configure", "here", "--set-stdin", "token", stdin="")
    assert empty.returncode == 2


def test_queues_are_added_and_removed_by_command(env) -> None:
    bundle = add_remote("here", template="local")
    assert _cli(env, "remote", "queue", "add", "here", "big", "--set", "nodes=4").returncode == 0
    assert read_metadata(bundle)["queues"]["big"] == {"nodes": "4"}
    assert _cli(env, "remote", "configure", "here:big", "--set", "token=t").returncode == 0
    again = _cli(env, "remote", "queue", "add", "here", "big")
    assert (again.returncode, "already exists" in again.stderr) == (2, True)
    secret = _cli(env, "remote", "queue", "add", "here", "other", "--set", "token=x")
    assert secret.returncode == 2
    assert "credentials are stored with remote configure" in secret.stderr
    assert _cli(env, "remote", "queue", "remove", "here", "big").returncode == 0
    assert "big" not in read_metadata(bundle)["queues"]
    assert "big" not in json.loads((bundle / "credentials.json").read_text())
    last = _cli(env, "remote", "queue", "remove", "here", "default")
    assert (last.returncode, "at least one queue" in last.stderr) == (2, True)


@pytest.mark.ssh
@pytest.mark.slurm
def test_doctor_passes_and_names_each_failure(env, over_ssh, set_queue, slurm_cluster) -> None:
    fake = env.root / "bin-httk"
    fake.write_text('#!/bin/sh\necho "httk 2.0.0"\n')
    fake.chmod(0o755)
    set_queue(
        over_ssh,
        workspace=str(env.root / "ws"),
        partition=slurm_cluster["partition"],
        httk_command=str(fake),
    )
    done = _cli(env, "remote", "doctor", "hpc", "--json")
    report = json.loads(done.stdout)
    assert done.returncode == 0, report
    checks = {row["check"]: row for row in report["checks"]}
    assert set(checks) == {
        "bundle",
        "credentials",
        "rsync (here)",
        "ssh",
        "host key",
        "rsync (target)",
        "sbatch (target)",
        "partition",
        "httk (target)",
        "workspace",
    }
    assert checks["httk (target)"]["detail"] == "httk 2.0.0"
    assert checks["credentials"]["ok"] is None
    set_queue(over_ssh, partition="no-such-partition", httk_command="/nonexistent/httk")
    done = _cli(env, "remote", "doctor", "hpc")
    assert done.returncode == 1
    lines = {line.split()[1]: line.split()[0] for line in done.stdout.splitlines()}
    assert (lines["partition"], lines["httk"], lines["ssh"]) == ("FAIL", "FAIL", "ok")
    set_queue(over_ssh, host="127.0.0.1", port="1")
    done = _cli(env, "remote", "doctor", "hpc")
    assert done.returncode == 1
    assert [line.split()[0] for line in done.stdout.splitlines() if " ssh " in f" {line} "] == [
        "FAIL"
    ]
    # the checks beyond the connection are listed as skipped, not left out (issue 23)
    report = json.loads(_cli(env, "remote", "doctor", "hpc", "--json").stdout)
    skipped = {row["check"]: row for row in report["checks"] if row["ok"] is None}
    for name in ("rsync (target)", "sbatch (target)", "partition", "httk (target)", "workspace"):
        assert "the target cannot be reached" in skipped[name]["detail"], (name, report)
    text = _cli(env, "remote", "doctor", "hpc").stdout
    assert "skip httk (target)" in " ".join(text.split()), text


def _fake_manager(env) -> Path:
    script = env.root / "httk-sleeps"
    script.write_text(
        '#!/bin/sh\n[ "$1" = --version ] && { echo httk 2; exit 0; }\nexec sleep 300\n'
    )
    script.chmod(0o755)
    return script


@pytest.mark.slurm
def test_manager_jobs_are_listed_and_cancelled(env, set_queue, slurm_cluster) -> None:
    bundle = add_remote("batch", template="local-slurm")
    set_queue(
        bundle,
        workspace=str(env.root / "ws"),
        partition=slurm_cluster["partition"],
        time_limit="5",
        httk_command=str(_fake_manager(env)),
    )
    started = _cli(env, "transfer", "start-manager", "batch", "--count", "2", "--json")
    assert started.returncode == 0, started.stderr
    ids = json.loads(started.stdout)["job_ids"]
    # A job of the same user that is not a manager: a fixed id such as 1 could be another test's
    # manager on a fresh cluster, so the stranger is made here.
    other = (
        subprocess.run(
            [
                "sbatch",
                "--parsable",
                "--job-name=not-a-manager",
                f"--partition={slurm_cluster['partition']}",
                f"--chdir={env.root}",
                "--output=/dev/null",
                "--wrap=sleep 300",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        .stdout.strip()
        .split(";")[0]
    )
    try:
        listed = json.loads(_cli(env, "manager", "list", "batch", "--json").stdout)
        mine = [job for job in listed if job["job_id"] in ids]
        assert len(mine) == 2
        assert {job["workdir"] for job in mine} == {str(env.root / "ws")}
        assert other not in {job["job_id"] for job in listed}
        stranger = _cli(env, "manager", "cancel", "batch", other, ids[1])
        assert (stranger.returncode, f"manager job of yours: {other}" in stranger.stderr) == (
            2,
            True,
        )
        still = subprocess.run(
            ["squeue", "--noheader", "--format=%i", f"--jobs={other},{ids[1]}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert sorted(still) == sorted([other, ids[1]]), "a refused cancel cancelled something"
        done = _cli(env, "manager", "cancel", "batch", ids[0], "--json")
        assert json.loads(done.stdout) == {"cancelled": [ids[0]]}
        deadline = time.monotonic() + 30
        left = ids
        while time.monotonic() < deadline:
            listed = json.loads(_cli(env, "manager", "list", "batch", "--json").stdout)
            left = [job["job_id"] for job in listed if job["job_id"] in ids]
            if ids[0] not in left:
                break
            time.sleep(0.5)
        assert left == [ids[1]]
    finally:
        subprocess.run(["scancel", *ids, other], check=False)


@pytest.mark.ssh
def test_disconnect_closes_the_master_by_remote_name(env, over_ssh, set_queue) -> None:
    set_queue(over_ssh, ssh_multiplex="60")
    assert _cli(env, "transfer", "invoke", "hpc", "--", "true").returncode == 0
    control = Path(os.environ["XDG_RUNTIME_DIR"]) / f"httk-ssh-{os.getuid()}"
    sockets = [p for p in control.iterdir() if not p.name.endswith(".lock")]
    assert len(sockets) == 1
    done = _cli(env, "remote", "disconnect", "hpc", "--json")
    assert json.loads(done.stdout) == {"name": "hpc", "closed": [str(sockets[0])]}
    deadline = time.monotonic() + 10
    while sockets[0].exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not sockets[0].exists()
    again = _cli(env, "remote", "disconnect", "hpc", "--json")
    assert json.loads(again.stdout)["closed"] == []


@pytest.mark.ssh
def test_progress_is_shown_when_asked(env, over_ssh) -> None:
    source = env.root / "big"
    source.mkdir()
    (source / "blob").write_bytes(os.urandom(1 << 20))
    done = _cli(env, "transfer", "push", "hpc", str(source), str(env.root / "there"), "--progress")
    assert done.returncode == 0, done.stderr
    assert "100%" in done.stderr
    assert done.stdout == f"{env.root / 'there'}\n"
    quiet = _cli(env, "transfer", "push", "hpc", str(source), str(env.root / "again"))
    assert "100%" not in quiet.stderr


def _big_tree(root: Path) -> Path:
    source = root / "big"
    (source / "sub").mkdir(parents=True)
    (source / "blob").write_bytes(os.urandom(3 << 20))
    (source / "sub" / "small").write_bytes(b"s" * 1000)
    (source / "link").symlink_to("blob")
    return source


TOTAL = f"{(3 << 20) + 1000:,}"


@pytest.mark.parametrize("kind", ["local", "local-slurm"])
def test_local_kinds_show_progress_when_asked(env, kind: str) -> None:
    add_remote("here", template=kind)
    source = _big_tree(env.root)
    done = _cli(env, "transfer", "push", "here", str(source), str(env.root / "there"), "--progress")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{env.root / 'there'}\n"
    # Lines are redrawn after "\r"; text mode reads each "\r" as a line end.
    last = done.stderr.splitlines()[-1]
    assert last.split() == [TOTAL, "100%", "2/2", "files"], done.stderr
    assert (env.root / "there" / "blob").read_bytes() == (source / "blob").read_bytes()
    assert (env.root / "there" / "link").readlink() == Path("blob")
    # --file: each listed name counts, a symlink as a link; pull of one file counts its bytes.
    picked = _cli(
        env, "transfer", "push", "here", str(source), str(env.root / "picked"),
        "--file", "sub/small", "--file", "link", "--progress",
    )  # fmt: skip
    assert picked.stderr.splitlines()[-1].split() == ["1,000", "100%", "2/2", "files"]
    pulled = _cli(
        env, "transfer", "pull", "here", str(source / "blob"), str(env.root / "one"), "--progress"
    )
    assert pulled.stderr.splitlines()[-1].split() == [f"{3 << 20:,}", "100%", "1/1", "files"]
    quiet = _cli(env, "transfer", "push", "here", str(source), str(env.root / "quiet"))
    assert quiet.returncode == 0, quiet.stderr
    assert "100%" not in quiet.stderr
    asked_not = _cli(
        env, "transfer", "push", "here", str(source), str(env.root / "no"), "--no-progress"
    )
    assert "100%" not in asked_not.stderr


def test_local_progress_is_on_by_default_on_a_terminal(env) -> None:
    add_remote("here", template="local")
    source = _big_tree(env.root)
    leader, follower = pty.openpty()
    argv = ["transfer", "push", "here", str(source), str(env.root / "there")]
    try:
        with subprocess.Popen(
            [sys.executable, "-m", "httk.workflow.adapters", *argv],
            cwd=env.project,
            stdout=subprocess.PIPE,
            stderr=follower,
            stdin=subprocess.DEVNULL,
        ) as process:
            os.close(follower)
            follower = -1
            seen = b""
            while True:
                try:
                    data = os.read(leader, 65536)
                except OSError:  # EIO: the last holder of the terminal's other side is gone
                    break
                if not data:
                    break
                seen += data
            assert process.stdout is not None
            out = process.stdout.read()
            assert process.wait() == 0, seen
        assert out == f"{env.root / 'there'}\n".encode()
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)
    # The terminal turns "\n" into "\r\n".
    assert seen.split(b"\r")[-2].split() == [TOTAL.encode(), b"100%", b"2/2", b"files"], seen


def test_doctor_tells_a_creatable_workspace_from_one_it_cannot_create(env, set_queue) -> None:
    """Issue 23: `ok workspace` only for a path that exists or can be created; nothing is made."""
    bundle = add_remote("here", template="local")
    root = env.root / "spaced dir"
    root.mkdir()
    (root / "a file").write_text("x")
    (root / "broken link").symlink_to(root / "nowhere")
    cases = {
        str(root): ("ok", f"{root}: exists, a directory this user may write"),
        str(root / "new" / "ws"): (
            "ok",
            f"{root / 'new' / 'ws'}: does not exist yet; it can be created, as {root} is a "
            "directory this user may write (nothing was created)",
        ),
        str(root / "a file" / "ws"): (
            "FAIL",
            f"{root / 'a file' / 'ws'}: cannot be created: {root / 'a file'} is not a directory",
        ),
        str(root / "a file"): ("FAIL", f"{root / 'a file'}: exists and is not a directory"),
        str(root / "broken link" / "ws"): (
            "FAIL",
            f"{root / 'broken link' / 'ws'}: cannot be created: {root / 'broken link'} is a "
            "broken symbolic link",
        ),
    }
    for workspace, (word, detail) in cases.items():
        set_queue(bundle, workspace=workspace)
        report = json.loads(_cli(env, "remote", "doctor", "here", "--json").stdout)
        row = next(row for row in report["checks"] if row["check"] == "workspace")
        assert ({True: "ok", False: "FAIL"}[row["ok"]], row["detail"]) == (word, detail)
    assert sorted(p.name for p in root.iterdir()) == ["a file", "broken link"]  # nothing made


def test_the_workspace_check_refuses_a_parent_this_user_may_not_write() -> None:
    import shutil
    import tempfile

    from httk.workflow.adapters.doctor import _WORKSPACE

    top = Path(tempfile.mkdtemp(prefix="ws-check", dir="/tmp"))  # a user may enter /tmp
    try:
        top.chmod(0o755)
        parent = top / "read only"
        parent.mkdir(mode=0o555)
        argv = ["sh", "-c", _WORKSPACE, "sh", str(parent / "new" / "ws")]
        if os.geteuid() == 0:  # root may write anywhere: ask as nobody
            argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        assert (done.returncode, done.stdout) == (1, f"unwritable {parent}\n"), done.stderr
        assert not (parent / "new").exists()
    finally:
        (top / "read only").chmod(0o755)
        shutil.rmtree(top)
