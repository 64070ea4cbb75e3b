"""The built wheel: templates keep their exec bit, and the installed CLI works on its own."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

DISTRIBUTION = Path(__file__).resolve().parents[1]
WORKSPACE_ROOT = DISTRIBUTION.parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not installed")
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [uv, "build", "--package", "httk-workflow-adapters", "--wheel", "--out-dir", str(out)],
        cwd=WORKSPACE_ROOT,
        check=True,
        capture_output=True,
        env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"},
    )
    (wheel,) = out.glob("*.whl")
    venv = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run(
        [uv, "venv", "--python", sys.executable, str(venv)], check=True, capture_output=True
    )
    subprocess.run(
        [uv, "pip", "install", "--offline", "--python", str(venv / "bin" / "python"), str(wheel)],
        check=True,
        capture_output=True,
    )
    return wheel, venv


@pytest.mark.slow
def test_wheel_layout(installed: tuple[Path, Path]) -> None:
    wheel, _ = installed
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        modes = {i.filename: i.external_attr >> 16 for i in archive.infolist()}
    assert "httk/__init__.py" not in names
    assert "httk/workflow/__init__.py" not in names
    for kind in ("local", "local-slurm", "ssh-slurm"):
        assert stat.S_IMODE(modes[f"httk/workflow/adapters/templates/{kind}/adapter"]) == 0o755
        assert f"httk/workflow/adapters/templates/{kind}/remote.json" in names


@pytest.mark.slow
def test_installed_cli_adds_and_runs_a_remote(installed: tuple[Path, Path], tmp_path: Path) -> None:
    _, venv = installed
    (site,) = venv.glob("lib/python*/site-packages")
    for kind in ("local", "local-slurm", "ssh-slurm"):
        adapter = site / "httk" / "workflow" / "adapters" / "templates" / kind / "adapter"
        assert stat.S_IMODE(adapter.stat().st_mode) == 0o755
    project = tmp_path / "project"
    (project / ".httk-project").mkdir(parents=True)
    (project / ".httk-project" / "project.json").write_text("{}")
    # Neither the venv nor this test's interpreter is on PATH: the CLI must find itself.
    environment = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "HTTK_CONFIG_HOME": str(tmp_path / "config"),
    }
    cli = str(venv / "bin" / "httk-workflow")

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [cli, *argv], cwd=project, env=environment, capture_output=True, text=True, check=False
        )

    added = run("remote", "add", "here", "--template", "local")
    assert added.returncode == 0, added.stderr
    assert stat.S_IMODE(Path(added.stdout.strip(), "adapter").stat().st_mode) == 0o755
    invoked = run("transfer", "invoke", "here", "--json", "--", "echo", "a b", "$(id)")
    assert invoked.returncode == 0, invoked.stderr
    assert json.loads(invoked.stdout)["stdout"] == "a b $(id)\n"
