"""Every ```python block in docs/**/*.md runs, so examples cannot rot.

Blocks of one page share a namespace and run in order, as a reader would run them. A block that
cannot run here (it needs a cloud account, say) is preceded by ``<!-- skip: next -->``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sybil import Sybil
from sybil.parsers.myst import PythonCodeBlockParser, SkipParser

DOCS = Path(__file__).resolve().parent.parent / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.relative_to(DOCS).parts)
_SYBIL = Sybil(parsers=[PythonCodeBlockParser(), SkipParser()], path=str(DOCS))


def _examples(page: Path) -> list[object]:
    return list(_SYBIL.parse(page))


def test_docs_have_pages() -> None:
    assert (DOCS / "index.md") in PAGES
    assert (DOCS / "guide" / "quickstart.md") in PAGES


def test_quickstart_has_runnable_examples() -> None:
    assert _examples(DOCS / "guide" / "quickstart.md"), "the quickstart must show runnable Python"


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(DOCS)) for p in PAGES])
def test_python_examples_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    document = _SYBIL.parse(page)
    for example in document:
        try:
            example.evaluate()
        except Exception as error:
            pytest.fail(f"{page.relative_to(DOCS)}:{example.line}: example failed: {error!r}")
