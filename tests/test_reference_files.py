"""The saved-reference helper compares exactly and tells how to refresh."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import ReferenceFiles


def test_matching_text_passes_and_differing_text_fails(tmp_path: Path) -> None:
    ref = tmp_path / "references" / "a.txt"
    ReferenceFiles(update=True).check(ref, "line\n")
    assert ref.read_text() == "line\n"
    ReferenceFiles(update=False).check(ref, "line\n")
    with pytest.raises(AssertionError, match="--update-references"):
        ReferenceFiles(update=False).check(ref, "line \n")


def test_a_missing_reference_fails(tmp_path: Path) -> None:
    with pytest.raises(pytest.fail.Exception, match="no reference file"):
        ReferenceFiles(update=False).check(tmp_path / "missing.txt", "x")
