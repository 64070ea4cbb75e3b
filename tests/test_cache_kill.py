"""A runner SIGKILLed while it serves a cache hit (issue 25): at each step (an output's link
made, outputs in place, outputs staged, the hit journaled) the resumed run serves every task
once from the cache, its outputs whole and nothing else beside them, and the store stays valid;
killed while writing the store's index, the next runs are served through a whole index.

The in-process backend runs the demo plan's tasks as real local processes; the kill is a real
SIGKILL of a real ``altar run`` (tests/cache_kill_driver.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "tests" / "cache_kill_driver.py"
ALTAR = str(Path(sys.executable).parent / "altar")
IN_PROCESS = [
    "--backend", "in-process",
    "--option", "runtime=altar.conformance.reference:run_command_locally",
    "--json", "--quiet",
]  # fmt: skip
RESULTS = ["fold0.tsv", "fold1.tsv", "fold2.tsv", "summary.tsv"]


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False, cwd=cwd)


@pytest.mark.parametrize(
    ("step", "nth"),
    # a tick serves the three folds together, then summarize: the kill is mid-batch (the
    # second fold) or, for "journaled", after the first tick's hits were journaled
    # "indexed": the first shard of the store's index written by that tick, torn
    [("linked", 2), ("materialized", 2), ("staged", 2), ("journaled", 1), ("indexed", 1)],
)
def test_a_runner_killed_while_serving_a_hit_resumes_serving_each_task_once(
    tmp_path: Path, step: str, nth: int
) -> None:
    shutil.copytree(ROOT / "examples" / "demo", tmp_path / "demo",
                    ignore=shutil.ignore_patterns("results"))  # fmt: skip
    plan = tmp_path / "demo" / "plan.toml"
    plan.write_text(plan.read_text() + '\n[cache]\ndir = "../store"\ntrust_tags = true\n')
    results = plan.parent / "results"
    first = _run([ALTAR, "run", str(plan), "--run-dir", "r1", *IN_PROCESS], tmp_path)
    assert first.returncode == 0, first.stderr
    expected = {name: (results / name).read_bytes() for name in RESULTS}
    shutil.rmtree(results)
    if step == "indexed":
        time.sleep(1.1)  # the objects' ctime second is over: their records, then rows, are written
        # a store without an index (r1 may have indexed what it stored): r2 writes every row
        shutil.rmtree(tmp_path / "store" / "index", ignore_errors=True)

    killed = _run(
        [
            sys.executable,
            str(DRIVER),
            step,
            str(nth),
            "run",
            str(plan),
            "--run-dir",
            "r2",
            *IN_PROCESS,
        ],
        tmp_path,
    )
    assert killed.returncode == -9, (killed.returncode, killed.stderr)
    resumed = _run([ALTAR, "run", str(plan), "--run-dir", "r2", *IN_PROCESS], tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    tasks = json.loads(resumed.stdout)["tasks"]
    assert [(t["id"], t["status"], t["attempts"]) for t in tasks] == [
        (name, "cached", 0) for name in ("fold-0", "fold-1", "fold-2", "summarize")
    ]
    journal = json.loads((tmp_path / "r2" / "journal.json").read_text())
    records = journal["tasks"].values() if isinstance(journal["tasks"], dict) else journal["tasks"]
    assert all(r.get("cached", {}).get("run_dir", "").endswith("r1") for r in records), records
    # outputs whole, and nothing else left beside them (a killed link's temporary name)
    assert sorted(p.name for p in results.iterdir()) == RESULTS
    assert {name: (results / name).read_bytes() for name in RESULTS} == expected
    verify = _run([ALTAR, "cache", "verify", "--cache", "store", "--json"], tmp_path)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert len(list((tmp_path / "store" / "entries").rglob("*.json"))) == len(RESULTS)
    if step == "indexed":  # every shard whole, and a third run served through them
        shards = list((tmp_path / "store" / "index").iterdir())
        assert shards
        assert all(json.loads(p.read_text())["rows"] for p in shards)
        shutil.rmtree(results)
        third = _run([ALTAR, "run", str(plan), "--run-dir", "r3", *IN_PROCESS], tmp_path)
        assert third.returncode == 0, third.stderr
        assert [t["status"] for t in json.loads(third.stdout)["tasks"]] == ["cached"] * 4
        assert {name: (results / name).read_bytes() for name in RESULTS} == expected
