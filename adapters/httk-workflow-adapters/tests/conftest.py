"""Isolated config homes, a project, and fake ssh/sbatch/httk on PATH for the unit tests."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

FAKES = Path(__file__).parent / "fakes"
FAKE_HOST = "fake.example.test"


@dataclass
class Env:
    root: Path
    project: Path
    bin: Path
    spool: Path
    ssh_log: Path

    def install(self, name: str, body: str) -> Path:
        path = self.bin / name
        path.write_text(body)
        path.chmod(0o755)
        return path

    def ssh_commands(self) -> list[dict[str, object]]:
        if not self.ssh_log.exists():
            return []
        return [json.loads(line) for line in self.ssh_log.read_text().splitlines()]

    def spooled(self) -> list[dict[str, object]]:
        return [json.loads(p.read_text()) for p in sorted(self.spool.glob("*.json"))]


def _install_fake(bin_dir: Path, name: str) -> None:
    text = (FAKES / name).read_text()
    if text.startswith("#!/usr/bin/env python3"):
        text = f"#!{sys.executable}" + text[len("#!/usr/bin/env python3") :]
    target = bin_dir / name
    target.write_text(text)
    target.chmod(0o755)


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Env]:
    """A project as cwd, private config homes, and ``python3`` being this interpreter."""
    project = tmp_path / "project"
    (project / ".httk-project").mkdir(parents=True)
    (project / ".httk-project" / "project.json").write_text("{}")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # The templates run the ``python3`` on PATH: make it this environment's interpreter.
    (bin_dir / "python3").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    (bin_dir / "python3").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("HTTK_CONFIG_HOME", str(tmp_path / "config"))
    # Short, like /run/user/UID: ssh control socket paths must fit in 108 bytes.
    runtime = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.chdir(project)
    yield Env(tmp_path, project, bin_dir, tmp_path / "spool", tmp_path / "ssh.log")
    shutil.rmtree(runtime, ignore_errors=True)


@pytest.fixture
def fake_cluster(env: Env, monkeypatch: pytest.MonkeyPatch) -> Env:
    """Fake ssh (runs commands here), sbatch and httk; the ssh log records every command."""
    if shutil.which("rsync") is None:
        pytest.skip("rsync is not installed")
    for name in ("ssh", "sbatch", "httk"):
        _install_fake(env.bin, name)
    remote_root = env.root / "remote"
    remote_root.mkdir()
    monkeypatch.setenv("HTTK_FAKE_SSH_ROOT", str(remote_root))
    monkeypatch.setenv("HTTK_FAKE_SSH_LOG", str(env.ssh_log))
    monkeypatch.setenv("HTTK_FAKE_SBATCH_SPOOL", str(env.spool))
    return env


def set_queue(bundle: Path, queue: str = "default", **settings: object) -> None:
    """Rewrite remote.json non-compactly, as an operator's editor would."""
    metadata = json.loads((bundle / "remote.json").read_text())
    metadata.setdefault("queues", {}).setdefault(queue, {}).update(settings)
    (bundle / "remote.json").write_text(json.dumps(metadata, indent=4, sort_keys=True))


def make_bundle(
    root: Path, adapter: str, *, name: str = "custom", kind: str | None = None, **members: object
) -> Path:
    """A hand-made bundle whose adapter is the given script."""
    bundle = root / name
    bundle.mkdir(parents=True)
    metadata: dict[str, object] = {
        "adapter_version": 1,
        "format": "httk-computer-adapter",
        "format_version": 1,
        "queues": {"default": {}},
    }
    if kind is not None:
        metadata["kind"] = kind
    metadata.update(members)
    (bundle / "remote.json").write_text(json.dumps(metadata))
    script = bundle / "adapter"
    script.write_text(adapter.replace("#!python", f"#!{sys.executable}", 1))
    script.chmod(0o755)
    return bundle


@pytest.fixture(name="make_bundle")
def _make_bundle_fixture():  # type: ignore[no-untyped-def]
    return make_bundle


@pytest.fixture(name="set_queue")
def _set_queue_fixture():  # type: ignore[no-untyped-def]
    return set_queue
