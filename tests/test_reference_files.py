"""The saved-reference helper compares exactly and tells how to refresh."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


def test_matching_text_passes_and_differing_text_fails(
    tmp_path: Path, reference_files: Any
) -> None:
    files = type(reference_files)
    ref = tmp_path / "references" / "a.txt"
    files(update=True).check(ref, "line\n")
    assert ref.read_text() == "line\n"
    files(update=False).check(ref, "line\n")
    with pytest.raises(AssertionError, match="--update-references"):
        files(update=False).check(ref, "line \n")


def test_a_missing_reference_fails(tmp_path: Path, reference_files: Any) -> None:
    with pytest.raises(pytest.fail.Exception, match="no reference file"):
        type(reference_files)(update=False).check(tmp_path / "missing.txt", "x")
