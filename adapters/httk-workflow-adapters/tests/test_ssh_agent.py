"""ssh_agent=yes against the real sshd: the same results as a session, without a login shell."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from httk.workflow.adapter_runtime import agent
from httk.workflow.adapter_runtime.targets import close_masters
from httk.workflow.adapters import add_remote, queue_settings, run_adapter

pytestmark = [pytest.mark.integration, pytest.mark.ssh]

HOSTILE = ["a b", "$HOME", "`id`", "'q'", '"d"', "semi;colon", "new\nline", "", "~", "-n"]


@pytest.fixture
def with_agent(env, ssh_target, set_queue, monkeypatch):
    monkeypatch.setenv("PATH", f"{ssh_target.wrapper_dir}{os.pathsep}{os.environ['PATH']}")
    bundle = add_remote("hpc", template="ssh-slurm")
    set_queue(bundle, host=ssh_target.host, ssh_multiplex="30", ssh_agent="yes")
    yield bundle
    close_masters(queue_settings(bundle, "default"))


def _agent_sockets() -> list[Path]:
    control = Path(os.environ["XDG_RUNTIME_DIR"]) / f"httk-ssh-{os.getuid()}"
    return sorted(control.glob("*.agent"))


def test_commands_go_through_the_agent_unchanged(env, with_agent) -> None:
    scratch = env.root / "a dir; $(x)"
    scratch.mkdir()
    result = run_adapter(
        with_agent,
        "invoke",
        {"queue": "default", "argv": ["/usr/bin/printf", "%s\\0", *HOSTILE], "cwd": str(scratch)},
    )
    assert result["stdout"].split("\0")[:-1] == HOSTILE
    (socket,) = _agent_sockets()
    assert agent.ping(str(socket))
    pwd = run_adapter(
        with_agent, "invoke", {"queue": "default", "argv": ["pwd"], "cwd": str(scratch)}
    )
    assert pwd["stdout"] == f"{scratch}\n"
    failed = run_adapter(
        with_agent, "invoke", {"queue": "default", "argv": ["sh", "-c", "echo e >&2; exit 7"]}
    )
    assert (failed["returncode"], failed["stderr"]) == (7, "e\n")
    missing = run_adapter(with_agent, "invoke", {"queue": "default", "argv": ["no-such-cmd-x"]})
    assert missing["returncode"] == 127
    raw = run_adapter(
        with_agent, "invoke", {"queue": "default", "argv": ["printf", "\\211a\\r\\n"]}
    )
    assert raw["stdout"].encode("utf-8", "surrogateescape") == b"\x89a\r\n"


def test_a_timeout_kills_the_command_through_the_agent(env, with_agent) -> None:
    run_adapter(with_agent, "invoke", {"queue": "default", "argv": ["true"]})
    marker = str(3000 + uuid.uuid4().int % 5000)
    argv = ["sh", "-c", f"sleep {marker}1 & sleep {marker}2"]
    try:
        with pytest.raises(TimeoutError):
            run_adapter(with_agent, "invoke", {"queue": "default", "argv": argv}, timeout=3)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            found = subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True)
            if found.returncode != 0:
                break
            time.sleep(0.2)
        assert subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True).returncode
    finally:
        subprocess.run(["pkill", "-f", f"sleep {marker}"], check=False)
