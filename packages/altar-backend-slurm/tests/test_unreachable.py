"""``altar run`` against a login node it cannot reach stops, bounded, with the reason and the
resume command (issue 23): a name that does not resolve at once, a closed port after
``unreachable_after_s``; Ctrl-C meanwhile says that nothing was submitted. Real ssh client;
no Slurm or sshd is reached."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from altar.backends.slurm import LoginNodeLostError, SlurmExecutionBackend
from altar.backends.slurm.fake import FakeLoginNode
from altar.execution import BackendUnavailableError, ContainerTaskSpec

HOSTS = {
    "closed-port": 'ssh_host = "127.0.0.1"\nssh_port = 1',
    "dns-failure": 'ssh_host = "altar-no-such-host.invalid"',
}


def _altar() -> str:
    return shutil.which("altar", path=os.path.dirname(sys.executable)) or "altar"


def _plan(tmp_path: Path, host: str, extra: str = "") -> Path:
    plan = tmp_path / "plan.toml"
    plan.write_text(
        f'[backend]\ntype = "slurm"\n\n[backend.options]\n{host}\ndata_root = "/srv/altar"\n'
        f"{extra}\n"
        '[[tasks]]\nid = "t"\nkind = "k"\nimage = "busybox:latest"\ncommand = ["true"]\n'
    )
    return plan


@pytest.mark.parametrize("case", sorted(HOSTS))
def test_run_against_an_unreachable_login_node_stops_with_the_reason_and_the_resume_command(
    tmp_path: Path, case: str
) -> None:
    # A closed port is given up after unreachable_after_s (here 2 s); a name that does not
    # resolve at once, whatever the bound.
    plan = _plan(tmp_path, HOSTS[case], "unreachable_after_s = 2" if case == "closed-port" else "")
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [_altar(), "run", str(plan), "--run-dir", str(run_dir), "--max-retries", "1"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    stop = [line for line in lines if "LoginNodeLostError" in line]
    assert len(stop) == 1, lines
    if case == "dns-failure":
        assert "the login node's name does not resolve" in stop[0]
    else:
        assert "the login node has not answered for " in stop[0]
        assert "raise unreachable_after_s" in stop[0]
    assert "no task of it is running" in stop[0]
    assert "keep running" not in done.stderr
    assert lines[-1] == (
        f"altar: resume with: altar run {plan} --max-retries 1 --run-dir {run_dir}"
    ), lines
    status = subprocess.run(
        [_altar(), "status", str(run_dir)], capture_output=True, text=True, check=False
    )
    assert "1 queued" in status.stdout  # nothing submitted, nothing used up


def test_ctrl_c_while_the_login_node_is_unreachable_says_nothing_was_submitted(
    tmp_path: Path,
) -> None:
    plan = _plan(tmp_path, HOSTS["closed-port"])  # default bound: 300 s, Ctrl-C comes first
    run_dir = tmp_path / "run"
    child = subprocess.Popen(
        [_altar(), "run", str(plan), "--run-dir", str(run_dir), "--max-parallel", "3"],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert child.stderr is not None
    deadline = time.monotonic() + 60
    for line in child.stderr:  # wait until a submit met the closed port
        if "Connection refused" in line or time.monotonic() > deadline:
            break
    child.send_signal(signal.SIGINT)
    err = child.communicate(timeout=60)[1]
    assert child.returncode == 130, err
    assert (
        f"altar: interrupted; no submitted task is running. Resume with: altar run {plan} "
        f"--max-parallel 3 --run-dir {run_dir}"
    ) in err
    assert "submitted tasks keep running" not in err


@pytest.mark.asyncio
async def test_the_login_node_is_lost_after_unreachable_after_s_and_found_again(
    tmp_path: Path,
) -> None:
    node = FakeLoginNode()
    backend = SlurmExecutionBackend(
        data_root=tmp_path / "data", container_runtime="docker", runtime=node,
        unreachable_after_s=0.5,
    )  # fmt: skip
    spec = ContainerTaskSpec(kind="k", image="busybox", command=["true"])
    node.unreachable = True
    with pytest.raises(BackendUnavailableError):
        await backend.submit(spec)
    with pytest.raises(BackendUnavailableError):
        await backend.capacity()  # it reads the site's limits: not yet lost, transient
    await asyncio.sleep(0.6)
    with pytest.raises(BackendUnavailableError):
        await backend.submit(spec)  # a submit never says lost: it would use an attempt
    with pytest.raises(LoginNodeLostError, match="has not answered for"):
        await backend.capacity()
    node.unreachable = False  # back: one answer clears it
    handle = await backend.submit(spec)
    await backend.capacity()
    node.unreachable = True
    with pytest.raises(BackendUnavailableError):
        await backend.poll([handle])
    await asyncio.sleep(0.6)
    with pytest.raises(LoginNodeLostError):
        await backend.poll([handle])  # submitted tasks: the poll stops the run


def test_unreachable_after_s_is_validated(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unreachable_after_s"):
        SlurmExecutionBackend(data_root=tmp_path, runtime=FakeLoginNode(), unreachable_after_s=-1)
    SlurmExecutionBackend(data_root=tmp_path, runtime=FakeLoginNode(), unreachable_after_s=None)
