"""``--dist loadgroup`` keeps each ``xdist_group`` on one worker (what ``scripts/test`` relies on),
and the modules holding a ``slow`` test are handed out first (the root ``conftest.py``).

A generated suite runs under ``pytest -n 2 --dist loadgroup`` in a subprocess, with the repo's
root ``conftest.py`` loaded as a plugin (``-p conftest``), as it is for every test in the repo.
Each dummy test writes the xdist worker that ran it to a file of its own.

The suite is laid out so that broken grouping cannot pass by luck: the first two tests
collected share group ``g``. The loadgroup scheduler hands each worker one work unit to start
with, in collection order; when grouping is lost, every test is its own unit, so those two
tests go to gw0 and gw1.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_RECORD = """\
import os
from pathlib import Path

import pytest

def record(name):
    out = Path(os.environ["GROUPING_OUT"]) / name
    out.write_text(os.environ["PYTEST_XDIST_WORKER"])
"""

# module name -> body; collection order is alphabetical by file, then by definition.
SUITE = {
    "test_a_grouped.py": """
        pytestmark = pytest.mark.xdist_group("g")

        def test_g1(): record("g1")
        def test_g2(): record("g2")

        @pytest.mark.parametrize("n", [1, 2])
        def test_g_param(n): record(f"g_param{n}")
    """,
    "test_b_mixed.py": """
        @pytest.mark.xdist_group("g")
        def test_g3(): record("g3")

        @pytest.mark.xdist_group(name="h")
        def test_h1(): record("h1")

        def test_free1(): record("free1")
    """,
    "test_c_other.py": """
        @pytest.mark.xdist_group(name="h")
        def test_h2(): record("h2")

        def test_free2(): record("free2")
    """,
}
GROUPS = {
    "g": {"g1", "g2", "g_param1", "g_param2", "g3"},
    "h": {"h1", "h2"},
}
ALL = set().union(*GROUPS.values()) | {"free1", "free2"}


def _run_suite(
    tmp_path: Path, suite_files: dict[str, str] = SUITE, workers: int = 2, record: str = _RECORD
) -> dict[str, str]:
    """Run the generated suite with loadgroup workers; return test name -> worker id."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "pytest.ini").write_text("[pytest]\nmarkers = slow: takes long\n")
    for name, body in suite_files.items():
        (suite / name).write_text(record + textwrap.dedent(body))
    out = tmp_path / "out"
    out.mkdir()
    # The outer run may itself be an xdist worker: none of its pytest variables may leak in.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["GROUPING_OUT"] = str(out)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    argv = [sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider"]
    argv += ["-n", str(workers), "--dist", "loadgroup", "-q", "--rootdir", str(suite), str(suite)]
    proc = subprocess.run(
        argv, cwd=suite, env=env, capture_output=True, text=True, check=False, timeout=600
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {p.name: p.read_text() for p in out.iterdir()}


def test_loadgroup_runs_each_group_on_one_worker(tmp_path: Path) -> None:
    ran = _run_suite(tmp_path)

    assert set(ran) == ALL
    # Two workers really ran tests, so "one worker per group" is not true by default.
    assert set(ran.values()) == {"gw0", "gw1"}
    for group, names in GROUPS.items():
        workers = {ran[name] for name in names}
        assert len(workers) == 1, f"group {group!r} spread over {sorted(workers)}: {ran}"


# Each test appends its name to one file: with one worker, the order the tests ran in.
ORDERED = {
    "test_a_fast.py": """
        def test_fast1(): record("fast1")
        def test_fast2(): record("fast2")
    """,
    "test_b_slow.py": """
        def test_beside_slow(): record("beside_slow")

        @pytest.mark.slow
        def test_slow(): record("slow")
    """,
    "test_c_grouped.py": """
        @pytest.mark.xdist_group("g")
        def test_g1(): record("g1")

        @pytest.mark.xdist_group("g")
        def test_g2(): record("g2")

        def test_last(): record("last")
    """,
}
_APPEND = """\
import os
from pathlib import Path

import pytest

def record(name):
    with (Path(os.environ["GROUPING_OUT"]) / "order").open("a") as out:
        out.write(name + "\\n")
"""


def test_groups_then_slow_modules_then_the_rest(tmp_path: Path) -> None:
    ran = _run_suite(tmp_path, ORDERED, workers=1, record=_APPEND)

    assert ran["order"].split() == ["g1", "g2", "beside_slow", "slow", "fast1", "fast2", "last"]
