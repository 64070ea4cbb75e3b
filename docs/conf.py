"""Sphinx configuration for the Altar execution backends and httk remote adapters site."""

from __future__ import annotations

import logging
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_about = (ROOT / "packages/altar-core/src/altar/execution/__about__.py").read_text()
_version = re.search(r"""__version__\s*=\s*["']([^"']+)["']""", _about)

project = "Altar execution backends and httk remote adapters"
author = "The Altar and httk adapter developers"
copyright = "the Altar and httk adapter developers"
release = _version.group(1) if _version else "0"
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "conftest.py", "Thumbs.db", ".DS_Store"]

myst_enable_extensions = ["colon_fence", "deflist", "fieldlist", "substitution"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}


class _EmptyGlobFilter(logging.Filter):
    """A section whose pages are not written yet must still build under -W.

    Sphinx logs "toctree glob pattern '*' didn't match any documents" without a warning type,
    so ``suppress_warnings`` cannot silence it; drop just that record.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return "didn't match any documents" not in str(record.msg)


logging.getLogger("sphinx.sphinx.directives.other").addFilter(_EmptyGlobFilter())

html_theme = "furo"
html_title = "Altar & httk adapters"
