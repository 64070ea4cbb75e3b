"""scripts/release_check.py: a release tag must match a distribution and its version file."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "release_check.py"
_spec = importlib.util.spec_from_file_location("release_check", SCRIPT)
assert _spec
assert _spec.loader
release_check = importlib.util.module_from_spec(_spec)
sys.modules["release_check"] = release_check  # dataclasses look their module up there
_spec.loader.exec_module(release_check)


def _workspace(tmp_path: Path, version: str = "1.2.3") -> Path:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.uv.workspace]\nmembers = ["packages/*", "conformance"]\n'
    )
    for folder, name in (
        ("packages/altar-backend-k8s", "altar-backend-k8s"),
        ("conformance", "altar-conformance"),
    ):
        pkg = tmp_path / folder
        (pkg / "src/x").mkdir(parents=True)
        (pkg / "pyproject.toml").write_text(
            f'[project]\nname = "{name}"\ndynamic = ["version"]\n'
            '[tool.hatch.version]\npath = "src/x/__about__.py"\n'
        )
        (pkg / "src/x/__about__.py").write_text(f'__version__ = "{version}"\n')
    return tmp_path


def test_matching_tag_names_the_distribution(tmp_path: Path) -> None:
    root = _workspace(tmp_path)
    release = release_check.check_tag("altar-backend-k8s-v1.2.3", root)
    assert (release.dist, release.folder, release.version) == (
        "altar-backend-k8s",
        "packages/altar-backend-k8s",
        "1.2.3",
    )
    assert (
        release_check.check_tag("refs/tags/altar-conformance-v1.2.3", root).folder == "conformance"
    )


@pytest.mark.parametrize(
    ("tag", "message"),
    [
        ("altar-backend-k8s-v1.2.4", "says version 1.2.4 but altar-backend-k8s declares 1.2.3"),
        ("altar-backend-k9s-v1.2.3", "'altar-backend-k9s', which is not one of"),
        ("v1.2.3", "not of the form"),
        ("altar-backend-k8s-1.2.3", "not of the form"),
        ("altar-backend-k8s-v1.2.3; rm -rf /", "not of the form"),
    ],
)
def test_bad_tags_are_refused_with_one_clear_message(
    tmp_path: Path, tag: str, message: str
) -> None:
    with pytest.raises(release_check.ReleaseError, match=re.escape(message)):
        release_check.check_tag(tag, _workspace(tmp_path))


def test_every_real_distribution_has_a_checkable_version() -> None:
    dists = release_check.workspace_distributions()
    assert len(dists) == 7  # six, and altar-backend-slurm
    for name, folder in dists.items():
        version = release_check.declared_version(folder)
        assert release_check.check_tag(f"{name}-v{version}").dist == name


def test_cli_prints_github_output_lines_and_fails_cleanly() -> None:
    dists = release_check.workspace_distributions()
    version = release_check.declared_version(dists["altar-core"])
    ok = subprocess.run(
        [sys.executable, str(SCRIPT), f"altar-core-v{version}"], capture_output=True, text=True
    )
    assert ok.returncode == 0
    assert ok.stdout.splitlines() == [
        "dist=altar-core",
        "folder=packages/altar-core",
        f"version={version}",
    ]
    bad = subprocess.run(
        [sys.executable, str(SCRIPT), "altar-core-v999"], capture_output=True, text=True
    )
    assert bad.returncode == 1
    assert bad.stdout == ""
    assert bad.stderr.count("\n") == 1
    assert "declares" in bad.stderr
