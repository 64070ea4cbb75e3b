"""A staging error names the task and the plan field of the input (issue 15)."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

from altar.execution.cli import command as cli
from altar.execution.digests.digest import copy_and_verify, input_label


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def write_plan(tmp_path: Path, inputs: list[dict[str, str]]) -> Path:
    lines = ['[backend]\ntype = "fake"\n']
    for index in range(3):
        lines.append(
            f'[[tasks]]\nid = "t{index}"\nkind = "k"\nimage = "busybox"\ncommand = ["true"]\n'
            f'labels = {{ task = "t{index}" }}\n'
        )
    lines.append(
        "inputs = [" + ", ".join(json.dumps(i).replace('": ', '" = ') for i in inputs) + "]\n"
    )
    path = tmp_path / "plan.toml"
    path.write_text("\n".join(lines))
    return path


def copying(fake_registry, tmp_path, monkeypatch):
    """The fake backend stages for real, with the helpers every backend uses."""
    volume = tmp_path / "volume"

    async def stage_inputs(self, transfers):
        for transfer in transfers:
            dest = volume / transfer.logical_path
            dest.parent.mkdir(parents=True, exist_ok=True)
            await asyncio.to_thread(
                copy_and_verify, transfer.uri, dest, transfer.digest, label=input_label(transfer)
            )

    backend_class = cli.default_registry.get("fake")
    monkeypatch.setattr(backend_class, "stage_inputs", stage_inputs)


def test_a_missing_input_names_task_and_field(fake_registry, tmp_path, monkeypatch, capsys):
    copying(fake_registry, tmp_path, monkeypatch)
    (tmp_path / "a.bin").write_bytes(b"a")
    plan = write_plan(
        tmp_path,
        [
            {"uri": "a.bin", "logical_path": "in/a", "digest": sha(b"a")},
            {"uri": "missing.bin", "logical_path": "in/b", "digest": sha(b"b")},
        ],
    )
    code = cli.main(["run", str(plan), "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 1
    last = err.splitlines()[-1]
    assert last.startswith(f"altar: {plan}: tasks[2].inputs[1] (task t2): staging failed: ")
    assert f"at {str(tmp_path / 'missing.bin')!r} does not exist; fix it, then run" in last
    assert "regular file" not in last
    assert fake_registry.submits == {}


def test_a_digest_mismatch_names_task_and_field(fake_registry, tmp_path, monkeypatch, capsys):
    copying(fake_registry, tmp_path, monkeypatch)
    (tmp_path / "a.bin").write_bytes(b"not a")
    plan = write_plan(tmp_path, [{"uri": "a.bin", "logical_path": "in/a", "digest": sha(b"a")}])
    code = cli.main(["run", str(plan), "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 1
    last = err.splitlines()[-1]
    assert last.startswith(f"altar: {plan}: tasks[2].inputs[0] (task t2): staging failed: ")
    assert f"has digest {sha(b'not a')}; expected {sha(b'a')}" in last
