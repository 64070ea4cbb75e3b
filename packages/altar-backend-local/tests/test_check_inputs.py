"""``altar check`` on local refuses the inputs staging refuses: a directory, a FIFO (issue 23).

Each input also goes through the backend's own ``stage_inputs``, so the test shows the check
and staging agree, for hostile file names too.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from altar.backends.local import LocalDockerExecutionBackend
from altar.backends.local.fake import FakeDockerRuntime
from altar.execution import Transfer
from altar.execution.cli import command as cli

NAMES = ["plain", "with space", "-leading-dash", "quote'\"s", "new\nline", "ünï $(x)"]


def _plan(tmp_path: Path, inputs: list[Path]) -> Path:
    plan = tmp_path / "plan.toml"
    listed = ", ".join(
        "{ uri = " + json.dumps(str(path)) + f', logical_path = "in/{number}" }}'
        for number, path in enumerate(inputs)
    )
    plan.write_text(
        '[backend]\ntype = "local"\n\n[backend.options]\n'
        f"data_root = {json.dumps(str(tmp_path / 'data'))}\n\n"
        '[[tasks]]\nid = "t"\nkind = "k"\nimage = "busybox:latest"\ncommand = ["true"]\n'
        f"inputs = [{listed}]\n"
    )
    return plan


@pytest.mark.parametrize("name", NAMES)
def test_check_on_local_refuses_a_directory_or_fifo_input_that_staging_refuses(
    tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / f"dir {name}"
    directory.mkdir()
    fifo = tmp_path / f"fifo {name}"
    os.mkfifo(fifo)
    good = tmp_path / f"file {name}"
    good.write_bytes(b"bytes")
    plan = _plan(tmp_path, [directory, fifo, good])

    code = cli.main(["check", str(plan)])
    err = capsys.readouterr().err
    assert code == 2, err
    problems = [line for line in err.splitlines() if "tasks[0].inputs" in line]
    assert len(problems) == 2, err
    assert problems[0].startswith(f"altar: error: {plan}: tasks[0].inputs[0]: input ")
    assert "is a directory" in problems[0]
    assert problems[1].startswith(f"altar: error: {plan}: tasks[0].inputs[1]: input ")
    assert "a FIFO" in problems[1]
    assert "inputs[2]" not in err
    assert not (tmp_path / "data").exists(), "check staged something"

    # staging refuses the same two and takes the file
    backend = LocalDockerExecutionBackend(
        data_root=tmp_path / "data", runtime=FakeDockerRuntime(), watchdog=False
    )
    try:
        for number, source in enumerate([directory, fifo]):
            with pytest.raises(OSError, match="not a regular file"):
                backend._stager.stage(Transfer(str(source), f"in/{number}"))
        backend._stager.stage(Transfer(str(good), "in/2"))
    finally:
        backend.close()
    assert (tmp_path / "data" / "in" / "2").read_bytes() == b"bytes"
