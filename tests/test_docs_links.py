"""Every relative link in docs/**/*.md points at a file that exists.

Covers Markdown links ``[text](path.md#anchor)`` and MyST ``{doc}`` roles; links to the web and
in-page anchors are left to ``sphinx-build -W`` and linkcheck.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.relative_to(DOCS).parts)

_FENCE = re.compile(r"^(```|~~~|:::).*?^\1", re.MULTILINE | re.DOTALL)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_MD_LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_DOC_ROLE = re.compile(r"\{doc\}`(?:[^`<]*<)?([^`>]+)>?`")


def _prose(text: str) -> str:
    """The page without code: links inside code blocks and inline code are not links."""
    return _FENCE.sub(lambda m: _keep_directives(m.group(0)), text)


def _keep_directives(block: str) -> str:
    # MyST directives ({toctree}, {note}, ...) hold prose whose links count; code blocks do not.
    first = block.split("\n", 1)[0]
    return block if "{" in first and "{code" not in first else ""


def relative_links(page: Path) -> list[tuple[str, Path]]:
    """(link as written, file it must resolve to) for every relative link on ``page``."""
    text = _prose(page.read_text(encoding="utf-8"))
    found: list[tuple[str, Path]] = []
    for match in _DOC_ROLE.finditer(text):
        target = match.group(1).strip()
        base = DOCS if target.startswith("/") else page.parent
        found.append((f"{{doc}}`{target}`", (base / (target.lstrip("/") + ".md")).resolve()))
    text = _INLINE_CODE.sub("", _DOC_ROLE.sub("", text))
    for match in _MD_LINK.finditer(text):
        target = match.group(1)
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL (https:, mailto:, ...) or an anchor on this page
        path = target.split("#", 1)[0]
        found.append((target, (page.parent / path).resolve()))
    return found


def test_link_finder_sees_links_and_skips_code(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "See [a](a.md#x), ![img](img/p.png), {doc}`Title <sub/b>`, [web](https://x.org),\n"
        "[here](#anchor) and `[not](code.md)`.\n\n```python\n# [not](either.md)\n```\n"
    )
    links = dict(relative_links(page))
    assert list(links) == ["{doc}`sub/b`", "a.md#x", "img/p.png"]
    assert links["{doc}`sub/b`"] == tmp_path / "sub" / "b.md"


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(DOCS)) for p in PAGES])
def test_relative_links_resolve(page: Path) -> None:
    broken = [link for link, target in relative_links(page) if not target.exists()]
    assert not broken, f"{page.relative_to(DOCS)}: links to missing files: {broken}"
