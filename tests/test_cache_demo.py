"""The task cache on real Docker: the demo plan run twice executes nothing the second time
(issue 25); a fold whose weights change reruns with what reads it, and `cache explain` says why."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DEMO = Path(__file__).resolve().parents[1] / "examples" / "demo"
ALTAR = str(Path(sys.executable).parent / "altar")


def altar(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ALTAR, *args], capture_output=True, text=True, timeout=600, check=False, cwd=cwd
    )


def run(demo: Path, name: str, store: Path, tmp_path: Path) -> dict[str, object]:
    done = altar(
        "run", str(demo / "plan.toml"), "--run-dir", str(tmp_path / name), "--cache", str(store),
        "--option", f"data_root={tmp_path / 'volume'}", "--json", "--quiet",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.mark.docker
def test_the_demo_runs_twice_executing_nothing_the_second_time(
    docker_host: str, tmp_path: Path
) -> None:
    demo = tmp_path / "demo"
    shutil.copytree(DEMO, demo, ignore=shutil.ignore_patterns("results"))
    store = tmp_path / "store"
    first = run(demo, "r1", store, tmp_path)
    assert {t["status"] for t in first["tasks"]} == {"succeeded"}  # type: ignore[index]
    results = {p.name: p.read_bytes() for p in (demo / "results").iterdir()}
    shutil.rmtree(demo / "results")
    second = run(demo, "r2", store, tmp_path)
    tasks = second["tasks"]
    assert [(t["status"], t["attempts"]) for t in tasks] == [("cached", 0)] * len(tasks)  # type: ignore[union-attr]
    assert {p.name: p.read_bytes() for p in (demo / "results").iterdir()} == results

    # fold 1's weights change (and the plan's digest with them): fold-1 and summarize rerun
    weights = demo / "data" / "models" / "fold1.weights"
    old = "sha256:" + hashlib.sha256(weights.read_bytes()).hexdigest()
    weights.write_bytes(weights.read_bytes().replace(b"0", b"1", 1))
    new = "sha256:" + hashlib.sha256(weights.read_bytes()).hexdigest()
    plan = demo / "plan.toml"
    plan.write_text(plan.read_text().replace(old, new))
    third = run(demo, "r3", store, tmp_path)
    statuses = {t["id"]: t["status"] for t in third["tasks"]}  # type: ignore[union-attr]
    assert statuses == {
        "fold-0": "cached",
        "fold-1": "succeeded",
        "fold-2": "cached",
        "summarize": "succeeded",
    }
    # against a store without run 3's entries, explain names the changed weights
    for manifest in (store / "entries").rglob("*.json"):
        if json.loads(manifest.read_text())["origin"]["run_dir"] == str(tmp_path / "r3"):
            os.unlink(manifest)
    done = altar("cache", "explain", "--cache", str(store), str(tmp_path / "r3"), "fold-1",
                 cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "input demo/models/fold1.weights digest changed" in done.stdout


@pytest.mark.docker
def test_a_plan_cached_on_local_hits_in_process(docker_host: str, tmp_path: Path) -> None:
    demo = tmp_path / "demo"
    shutil.copytree(DEMO, demo, ignore=shutil.ignore_patterns("results"))
    plan = demo / "plan.toml"
    plan.write_text(plan.read_text() + '\n[cache]\ndir = "../store"\ntrust_tags = true\n')
    first = altar("run", str(plan), "--run-dir", str(tmp_path / "local"), "--json", "--quiet",
                  "--option", f"data_root={tmp_path / 'volume'}", cwd=tmp_path)  # fmt: skip
    assert first.returncode == 0, first.stderr
    shutil.rmtree(demo / "results")
    second = altar(
        "run", str(plan), "--backend", "in-process", "--run-dir", str(tmp_path / "inproc"),
        "--option", "runtime=altar.conformance.reference:run_command_locally",
        "--json", "--quiet", cwd=tmp_path,
    )  # fmt: skip
    assert second.returncode == 0, second.stderr
    tasks = json.loads(second.stdout)["tasks"]
    assert {t["status"] for t in tasks} == {"cached"}
    assert sorted(p.name for p in (demo / "results").iterdir()) == [
        "fold0.tsv", "fold1.tsv", "fold2.tsv", "summary.tsv",
    ]  # fmt: skip
