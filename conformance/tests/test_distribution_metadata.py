"""Every distribution says where its docs, source, changelog and issues are, with absolute links.

A README and the project links are what PyPI shows; repository-relative paths mean nothing there.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# the one home ([tool.altar] home); the release check holds it to the workflow's repository
REPO = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["altar"]["home"]
DOCS = f"{REPO}/blob/main/docs/"  # the pages as GitHub shows them: no site is published
DISTRIBUTIONS = sorted(
    p.parent for pattern in ("packages/*", "adapters/*", "conformance") for p in
    ROOT.glob(f"{pattern}/pyproject.toml")
)  # fmt: skip
IDS = [str(d.relative_to(ROOT)) for d in DISTRIBUTIONS]
MARKDOWN_LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_every_distribution_is_found() -> None:
    names = {d.name for d in DISTRIBUTIONS}
    assert {"altar-core", "conformance", "httk-workflow-adapters"} <= names


@pytest.mark.parametrize("distribution", DISTRIBUTIONS, ids=IDS)
def test_project_urls_name_docs_source_changelog_and_issues(distribution: Path) -> None:
    project = tomllib.loads((distribution / "pyproject.toml").read_text())["project"]
    urls = project.get("urls", {})
    assert set(urls) >= {"Documentation", "Source", "Changelog", "Issues"}, urls
    here = distribution.relative_to(ROOT).as_posix()
    assert urls["Source"] == REPO  # what the release check compares with github.repository
    assert urls["Changelog"] == f"{REPO}/blob/main/{here}/CHANGELOG.md"
    assert (distribution / "CHANGELOG.md").is_file()
    assert urls["Issues"] == f"{REPO}/issues"
    assert _docs_page(urls["Documentation"]).is_file(), urls["Documentation"]


@pytest.mark.parametrize("distribution", DISTRIBUTIONS, ids=IDS)
def test_readme_links_are_absolute_and_resolve(distribution: Path) -> None:
    readme = (distribution / "README.md").read_text()
    for target in MARKDOWN_LINK.findall(readme):
        assert target.startswith("https://"), f"{distribution.name}/README.md links {target!r}"
        if target.startswith(DOCS):
            assert _docs_page(target).is_file(), target
    bare = re.findall(r"(?<!\[)`docs/[^`]+\.md`(?!\])", readme)
    assert not bare, f"{distribution.name}/README.md names docs pages without a link: {bare}"


def _docs_page(url: str) -> Path:
    assert url.startswith(DOCS), url
    page = url.removeprefix(DOCS).split("#")[0]
    return ROOT / "docs" / page
