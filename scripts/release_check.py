#!/usr/bin/env python3
"""Check a release tag against the workspace: ``<dist>-v<version>`` must name a distribution
whose version file says ``<version>``, and whose home is the repository the release runs in.

The home is one value, ``[tool.altar] home`` in the workspace's pyproject.toml. A distribution's
``[project.urls]`` Source must be exactly that home, its other URLs must lie under it, and the
home must be ``https://github.com/$GITHUB_REPOSITORY`` (Actions sets ``GITHUB_REPOSITORY`` to the
``owner/name`` the workflow runs in): a fork or a copy cannot publish pointing at another home.

    GITHUB_REPOSITORY=altar-dev/altar scripts/release_check.py altar-backend-k8s-v0.2.0
    dist=altar-backend-k8s
    folder=packages/altar-backend-k8s
    version=0.2.0

Prints ``key=value`` lines (append them to ``$GITHUB_OUTPUT``); exits 1 with one line naming what
is wrong otherwise. Standard library only, so it runs before anything is installed.
"""

from __future__ import annotations

import os
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_TAG = re.compile(r"^(?P<dist>[a-z0-9][a-z0-9-]*?)-v(?P<version>\d[0-9A-Za-z.+!-]*)$")
_VERSION = re.compile(r"""^__version__\s*=\s*["']([^"']+)["']""", re.MULTILINE)
_REPOSITORY = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")


class ReleaseError(ValueError):
    """The tag does not match a distribution and its version file."""


@dataclass(frozen=True)
class Release:
    dist: str
    folder: str
    version: str


def workspace_distributions(root: Path = ROOT) -> dict[str, Path]:
    """Distribution name -> folder, for every workspace member with a pyproject.toml."""
    config = tomllib.loads((root / "pyproject.toml").read_text())
    members = config["tool"]["uv"]["workspace"]["members"]
    found: dict[str, Path] = {}
    for pattern in members:
        for folder in sorted(root.glob(pattern)):
            pyproject = folder / "pyproject.toml"
            if pyproject.is_file():
                found[tomllib.loads(pyproject.read_text())["project"]["name"]] = folder
    return found


def declared_version(folder: Path) -> str:
    """The version hatchling reads (``[tool.hatch.version] path``)."""
    config = tomllib.loads((folder / "pyproject.toml").read_text())
    try:
        path = folder / config["tool"]["hatch"]["version"]["path"]
    except KeyError as missing:
        raise ReleaseError(f"{folder.name}: no [tool.hatch.version] path in pyproject.toml") from (
            missing
        )
    match = _VERSION.search(path.read_text())
    if match is None:
        raise ReleaseError(f"{path}: no __version__ = '...' line")
    return match.group(1)


def workspace_home(root: Path = ROOT) -> str:
    """The project's home: ``[tool.altar] home`` in the workspace's pyproject.toml."""
    config = tomllib.loads((root / "pyproject.toml").read_text())
    try:
        return str(config["tool"]["altar"]["home"])
    except KeyError:
        raise ReleaseError("pyproject.toml: no [tool.altar] home") from None


def url_problems(folder: Path, home: str) -> list[str]:
    """What in ``folder``'s ``[project.urls]`` is not under ``home`` (empty: all is)."""
    config = tomllib.loads((folder / "pyproject.toml").read_text())
    urls: dict[str, str] = config["project"].get("urls", {})
    name = config["project"]["name"]
    problems = []
    if urls.get("Source") != home:
        problems.append(f"{name}: [project.urls] Source is {urls.get('Source')!r}, not {home!r}")
    for label, url in urls.items():
        if label != "Source" and not url.startswith(home + "/"):
            problems.append(f"{name}: [project.urls] {label} {url!r} is not under {home}")
    return problems


def check_home(dist: str, folder: Path, repository: str | None, root: Path = ROOT) -> None:
    """Refuse unless ``folder``'s URLs are under the home and the home is ``repository``."""
    if not repository or not _REPOSITORY.match(repository):
        raise ReleaseError(
            f"GITHUB_REPOSITORY is {repository!r}, not owner/name: the release workflow sets it "
            "to the repository it runs in (set it by hand to check a release here)"
        )
    expected = f"https://github.com/{repository}"
    problems = url_problems(folder, expected)
    if problems:
        raise ReleaseError(f"{problems[0]}, the repository this release runs in: not published")
    home = workspace_home(root)
    if home != expected:
        raise ReleaseError(
            f"pyproject.toml: [tool.altar] home is {home!r}, not {expected!r}, the repository "
            "this release runs in: not published"
        )


def check_tag(tag: str, root: Path = ROOT, *, repository: str | None) -> Release:
    match = _TAG.match(tag.removeprefix("refs/tags/"))
    if match is None:
        raise ReleaseError(f"tag {tag!r} is not of the form <distribution>-v<version>")
    dists = workspace_distributions(root)
    dist, version = match["dist"], match["version"]
    if dist not in dists:
        raise ReleaseError(f"tag {tag!r} names {dist!r}, which is not one of: {', '.join(dists)}")
    declared = declared_version(dists[dist])
    if declared != version:
        raise ReleaseError(
            f"tag {tag!r} says version {version} but {dist} declares {declared}: "
            "bump the version file or fix the tag"
        )
    check_home(dist, dists[dist], repository, root)
    return Release(dist=dist, folder=str(dists[dist].relative_to(root)), version=version)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: scripts/release_check.py <dist>-v<version>", file=sys.stderr)
        return 2
    try:
        release = check_tag(argv[0], repository=os.environ.get("GITHUB_REPOSITORY"))
    except ReleaseError as error:
        print(f"release_check: {error}", file=sys.stderr)
        return 1
    print(f"dist={release.dist}\nfolder={release.folder}\nversion={release.version}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
