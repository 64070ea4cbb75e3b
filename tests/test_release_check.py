"""scripts/release_check.py: a release tag must match a distribution and its version file, and
the distribution's home must be the repository the release workflow runs in."""

from __future__ import annotations

import importlib.util
import os
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


HOME = "https://github.com/lab/altar"
REPOSITORY = "lab/altar"  # what Actions sets GITHUB_REPOSITORY to when the workflow runs there


def _workspace(tmp_path: Path, version: str = "1.2.3", home: str = HOME) -> Path:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.uv.workspace]\nmembers = ["packages/*", "conformance"]\n'
        f'[tool.altar]\nhome = "{HOME}"\n'
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
            f'[project.urls]\nSource = "{home}"\nIssues = "{home}/issues"\n'
        )
        (pkg / "src/x/__about__.py").write_text(f'__version__ = "{version}"\n')
    return tmp_path


def test_matching_tag_names_the_distribution(tmp_path: Path) -> None:
    root = _workspace(tmp_path)
    release = release_check.check_tag("altar-backend-k8s-v1.2.3", root, repository=REPOSITORY)
    assert (release.dist, release.folder, release.version) == (
        "altar-backend-k8s",
        "packages/altar-backend-k8s",
        "1.2.3",
    )
    assert (
        release_check.check_tag(
            "refs/tags/altar-conformance-v1.2.3", root, repository=REPOSITORY
        ).folder
        == "conformance"
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
        release_check.check_tag(tag, _workspace(tmp_path), repository=REPOSITORY)


def test_a_release_is_refused_unless_the_source_url_is_the_workflows_repository(
    tmp_path: Path,
) -> None:
    root = _workspace(tmp_path)
    # a fork (or a copy) runs the same workflow: its metadata would point at another home
    with pytest.raises(
        release_check.ReleaseError,
        match=re.escape(
            f"altar-backend-k8s: [project.urls] Source is '{HOME}', not "
            "'https://github.com/someone/fork', the repository this release runs in"
        ),
    ):
        release_check.check_tag("altar-backend-k8s-v1.2.3", root, repository="someone/fork")
    assert release_check.check_tag("altar-backend-k8s-v1.2.3", root, repository=REPOSITORY)


@pytest.mark.parametrize("repository", [None, "", "lab", "lab/altar/extra", "lab/altar; rm -rf /"])
def test_a_release_without_the_workflows_repository_is_refused(
    tmp_path: Path, repository: str | None
) -> None:
    with pytest.raises(release_check.ReleaseError, match=r"GITHUB_REPOSITORY is .*not owner/name"):
        release_check.check_tag(
            "altar-backend-k8s-v1.2.3", _workspace(tmp_path), repository=repository
        )


def test_every_url_of_the_released_distribution_lies_under_its_home(tmp_path: Path) -> None:
    root = _workspace(tmp_path)
    pyproject = root / "packages/altar-backend-k8s/pyproject.toml"
    pyproject.write_text(pyproject.read_text() + 'Documentation = "https://elsewhere.io/docs"\n')
    with pytest.raises(
        release_check.ReleaseError, match=re.escape("Documentation 'https://elsewhere.io/docs'")
    ):
        release_check.check_tag("altar-backend-k8s-v1.2.3", root, repository=REPOSITORY)


def test_a_workspace_home_other_than_the_repository_is_refused(tmp_path: Path) -> None:
    """The distribution agrees with the repository but the one place the home lives does not."""
    root = _workspace(tmp_path, home="https://github.com/someone/fork")
    with pytest.raises(release_check.ReleaseError, match=r"\[tool.altar\] home is '" + HOME):
        release_check.check_tag("altar-backend-k8s-v1.2.3", root, repository="someone/fork")


def test_every_distribution_names_the_one_home() -> None:
    """[tool.altar] home is the one place: each Source is it, each other URL under it."""
    home = release_check.workspace_home()
    assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", home), home
    problems = [
        problem
        for folder in release_check.workspace_distributions().values()
        for problem in release_check.url_problems(folder, home)
    ]
    assert not problems, "\n".join(problems)


_PROJECT_LINK = re.compile(r"https://(?:github\.com/[\w.-]+/altar|[\w-]+\.github\.io/altar)\b")


def test_links_to_the_project_use_the_one_home() -> None:
    """READMEs (what PyPI shows) and docs link the project under its one home, nowhere else."""
    home = release_check.workspace_home()
    pages = [*ROOT.glob("**/README.md"), *ROOT.glob("docs/**/*.md")]
    elsewhere = [
        f"{page.relative_to(ROOT)}: {link}"
        for page in pages
        if ".venv" not in page.parts and "_build" not in page.parts
        for link in _PROJECT_LINK.findall(page.read_text(encoding="utf-8"))
        if link != home
    ]
    assert not elsewhere, "\n".join(elsewhere)


def _home_repository() -> str:
    return release_check.workspace_home().removeprefix("https://github.com/")


def test_every_real_distribution_has_a_checkable_version() -> None:
    dists = release_check.workspace_distributions()
    assert len(dists) == 7  # six, and altar-backend-slurm
    for name, folder in dists.items():
        version = release_check.declared_version(folder)
        release = release_check.check_tag(f"{name}-v{version}", repository=_home_repository())
        assert release.dist == name


def test_cli_prints_github_output_lines_and_fails_cleanly() -> None:
    dists = release_check.workspace_distributions()
    version = release_check.declared_version(dists["altar-core"])
    env = {**os.environ, "GITHUB_REPOSITORY": _home_repository()}
    ok = subprocess.run(
        [sys.executable, str(SCRIPT), f"altar-core-v{version}"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert ok.returncode == 0
    assert ok.stdout.splitlines() == [
        "dist=altar-core",
        "folder=packages/altar-core",
        f"version={version}",
    ]
    bad = subprocess.run(
        [sys.executable, str(SCRIPT), "altar-core-v999"], capture_output=True, text=True, env=env
    )
    assert bad.returncode == 1
    assert bad.stdout == ""
    assert bad.stderr.count("\n") == 1
    assert "declares" in bad.stderr
