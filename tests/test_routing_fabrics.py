"""Issue 26's end-to-end run: one demo-like plan over three fabrics, equal to one backend.

A CPU step on the local Docker engine prepares the variants, the folds run as Slurm jobs (real
slurmctld, containers on the same Docker engine), and the summary runs on the in-process
backend. Outputs move local -> slurm -> in-process, digests checked on both hops. The same
plan with ``--backend local`` gives the same results (``altar compare``). Small on purpose:
two folds, so two Slurm jobs on the shared node.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slurm, pytest.mark.docker, pytest.mark.slow]

DEMO = Path(__file__).resolve().parents[1] / "examples" / "demo"
ALTAR = str(Path(sys.executable).parent / "altar")
M = "{altar:mount_root}/demo"
SCORE_SH = "sha256:3eb2f1251bb40d52e8ea70612d4881334d93c6e657e5f252a58e64fdde12d217"
SUMMARIZE_SH = "sha256:a33c038463de2630df4df81d1d1f5f650917021b422e5209619367d59984e2d0"
WEIGHTS = {
    0: "sha256:1a96a0f87d03509e10a8ecdd3fb91178263e39279359cec647fb3d253b97a119",
    1: "sha256:4a1c018feed4488a6f73451657d7d53d475ccedd4d24261a24f6ddde0cbd3a36",
}


def _io(uri: str, logical_path: str, digest: str | None = None) -> str:
    """One transfer as a TOML inline table (on one line, as TOML requires)."""
    fields = {"uri": uri, "logical_path": logical_path} | ({"digest": digest} if digest else {})
    return "{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in fields.items()) + " }"


def _plan(demo: Path, docker_host: str, partition: str, work: Path) -> Path:
    def q(value: object) -> str:
        return json.dumps(value)

    folds = []
    for fold, digest in WEIGHTS.items():
        folds.append(
            f"""
[[tasks]]
id = "fold-{fold}"
kind = "score"
backend = "slurm"
image = "busybox:latest"
command = ["sh", "{M}/bin/score.sh", "{M}/models/fold{fold}.weights", "{M}/prepared.tsv",
           "{M}/scores/fold{fold}.tsv"]
inputs = [
    {{ uri = "results/prepared.tsv", logical_path = "demo/prepared.tsv" }},
    {{ uri = "model/score.sh", logical_path = "demo/bin/score.sh", digest = "{SCORE_SH}" }},
    {_io(f"data/models/fold{fold}.weights", f"demo/models/fold{fold}.weights", digest)},
]
outputs = [{{ uri = "results/fold{fold}.tsv", logical_path = "demo/scores/fold{fold}.tsv" }}]
resources = {{ cpu = 0.5, memory_gb = 0.125 }}
timeout_s = 120
"""
        )
    scores = ", ".join(f'"{M}/scores/fold{fold}.tsv"' for fold in WEIGHTS)
    score_inputs = "".join(
        f'    {{ uri = "results/fold{f}.tsv", logical_path = "demo/scores/fold{f}.tsv" }},\n'
        for f in WEIGHTS
    )
    text = f"""
max_parallel = 4

[backends.local]
type = "local"
default = true
options = {{ network = "none", data_root = {q(str(work / "local data"))} }}

[backends.slurm]
type = "slurm"
max_parallel = 2

[backends.slurm.options]
container_runtime = "docker"
runtime_options = {q(["-H", docker_host])}
partition = {q(partition)}
data_root = {q(str(work / "cluster data"))}

[backends.host]
type = "in-process"
options = {{ data_root = {q(str(work / "host data"))} }}

[[tasks]]
id = "prepare"
kind = "prepare"
image = "busybox:latest"
command = ["sh", "-c", "grep -v '^#' {M}/variants.tsv > {M}/prepared.tsv"]
inputs = [{{ uri = "data/variants.tsv", logical_path = "demo/variants.tsv" }}]
outputs = [{{ uri = "results/prepared.tsv", logical_path = "demo/prepared.tsv" }}]
resources = {{ cpu = 0.5, memory_gb = 0.125 }}
timeout_s = 60
{"".join(folds)}
[[tasks]]
id = "summarize"
kind = "summarize"
backend = "host"
image = "busybox:latest"
command = ["sh", "{M}/bin/summarize.sh", "{M}/summary.tsv", {scores}]
inputs = [
    {_io("model/summarize.sh", "demo/bin/summarize.sh", SUMMARIZE_SH)},
{score_inputs}]
outputs = [{{ uri = "results/summary.tsv", logical_path = "demo/summary.tsv" }}]
timeout_s = 60
env = {{ LC_ALL = "C" }}
"""
    path = demo / "routed.toml"
    path.write_text(text)
    return path


def _altar(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ALTAR, *argv], capture_output=True, text=True, timeout=900, check=False, cwd=cwd
    )


def test_cpu_steps_on_local_folds_on_slurm_and_the_summary_in_process_equal_one_backend(
    tmp_path: Path, docker_host: str, slurm_cluster: dict[str, str]
) -> None:
    demo = tmp_path / "demo"
    shutil.copytree(DEMO, demo, ignore=shutil.ignore_patterns("results"))
    plan = str(_plan(demo, docker_host, slurm_cluster["partition"], tmp_path))
    checked = _altar("check", plan, cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    routed = _altar("run", plan, "--run-dir", str(tmp_path / "routed"), "--json", cwd=tmp_path)
    assert routed.returncode == 0, routed.stdout + routed.stderr
    moved = json.loads(routed.stdout)["transfers"]
    prepared = (demo / "results/prepared.tsv").stat().st_size
    folds = sum((demo / f"results/fold{f}.tsv").stat().st_size for f in WEIGHTS)
    assert (moved["files"], moved["bytes"]) == (3, prepared + folds)  # local->slurm, slurm->host
    journal = json.loads((tmp_path / "routed/journal.json").read_text())
    ran = {t: r["attempts"][-1]["handle"]["backend"] for t, r in journal["tasks"].items()}
    assert ran == {
        "prepare": "local",
        "fold-0": "slurm",
        "fold-1": "slurm",
        "summarize": "in-process",
    }
    summary = (demo / "results/summary.tsv").read_text()
    assert summary.startswith("variant\tsite\tmean_score")
    assert "\t2\n" in summary  # each variant scored by both folds
    (demo / "results").rename(demo / "results-routed")
    one = _altar(
        "run", plan, "--backend", "local", "--run-dir", str(tmp_path / "one"), cwd=tmp_path
    )
    assert one.returncode == 0, one.stdout + one.stderr
    assert (demo / "results/summary.tsv").read_text() == summary
    compared = _altar(
        "compare", str(tmp_path / "routed"), str(tmp_path / "one"), "--json", cwd=tmp_path
    )
    assert compared.returncode == 0, compared.stdout + compared.stderr
    assert json.loads(compared.stdout)["differences"] == []
