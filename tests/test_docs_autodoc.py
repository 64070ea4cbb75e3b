"""autodoc directives on MyST pages sit inside ``{eval-rst}`` blocks.

autodoc writes reStructuredText; used as a MyST fence (```` ```{automodule} ````), its output is
re-read as Markdown and the API pages show ``.. py:class::`` as plain text, with no warning under
``sphinx-build -W``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.relative_to(DOCS).parts)

_AUTODOC_FENCE = re.compile(r"^\s*(```+|~~~+|:::+)\s*\{auto\w+\}", re.MULTILINE)


def test_api_pages_use_autodoc() -> None:
    texts = "".join(p.read_text(encoding="utf-8") for p in PAGES)
    assert ".. automodule:: altar.execution\n" in texts
    assert ".. automodule:: httk.workflow.adapters\n" in texts


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(DOCS)) for p in PAGES])
def test_autodoc_only_inside_eval_rst(page: Path) -> None:
    fences = _AUTODOC_FENCE.findall(page.read_text(encoding="utf-8"))
    assert not fences, (
        f"{page.relative_to(DOCS)}: wrap autodoc directives in a ```{{eval-rst}} block; "
        "as MyST fences their output renders as literal text"
    )
