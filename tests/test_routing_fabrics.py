"""Issue 26's end-to-end run: one demo-like plan over three fabrics, equal to one backend.

A CPU step on the local Docker engine prepares the variants, the folds run as Slurm jobs (real
slurmctld, containers on the same Docker engine), and the summary runs on the in-process
backend. Outputs move local -> slurm -> in-process, digests checked on both hops. The same
plan with ``--backend local`` gives the same results (``altar compare``). Small on purpose:
two folds, so two Slurm jobs on the shared node.

And one backend's outage on real Slurm: the login node made unreachable for the Slurm lane (its
commands started through a program that is not there, so the real login-node runtime fails)
while the in-process lane's tasks go on; one Slurm job.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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
options = {{ data_root = {q(str(work / "host-data"))} }}

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


class _Outage:
    """The real login node (``sbatch``/``squeue`` on this machine) that, while ``down``, starts
    every command through a program that is not there (an ssh binary gone, a wrong path): the
    real :class:`LocalLoginNode` then raises ``LoginNodeUnreachableError``, so neither Slurm
    nor the jobs' records on the cluster can be read, as when the login node is down."""

    remote = False

    def __init__(self, missing: Path) -> None:
        from altar.backends.slurm.sdk_runtime import LocalLoginNode

        self.missing = str(missing)
        self.inner = LocalLoginNode()
        self.down = False
        self.refused = 0  # commands that found it down

    def run(self, argv: Sequence[str]) -> Any:
        if not self.down:
            return self.inner.run(argv)
        self.refused += 1
        return self.inner.run([self.missing, *argv])

    def push(self, local: str, remote: str) -> None:
        self.inner.push(local, remote)

    def pull(self, remote: str, local: str) -> None:
        self.inner.pull(remote, local)


@pytest.mark.asyncio
async def test_slurm_unreachable_mid_run_holds_back_only_its_tasks_and_they_finish_on_return(
    tmp_path: Path, docker_host: str, slurm_cluster: dict[str, str]
) -> None:
    """Issue 26: the Slurm login node cannot be reached once the Slurm job is submitted; the
    in-process backend's tasks go on and finish meanwhile; when it answers again the same run
    finishes the Slurm task, every task in one attempt."""
    import asyncio
    import time
    import tomllib

    from altar.backends.slurm import SlurmExecutionBackend
    from altar.conformance.reference import InProcessExecutionBackend
    from altar.execution.plans.plan import parse_plan
    from altar.execution.run.routed import RoutedBackend, routed_options
    from altar.execution.run.runner import run_plan
    from altar.execution.state.journal import Journal

    host = "".join(
        f'[[tasks]]\nid = "h{n}"\nkind = "h"\nimage = "busybox:latest"\n'
        f'command = ["sh", "-c", "sleep 0.5; echo h{n} > {{altar:path:h{n}.txt}}"]\n'
        f'outputs = [{{ uri = "out/h{n}.txt", logical_path = "h{n}.txt" }}]\n\n'
        for n in range(3)
    )
    hpc = "".join(
        f'[[tasks]]\nid = "s{n}"\nkind = "s"\nbackend = "hpc"\nimage = "busybox:latest"\n'
        f'command = ["sh", "-c", "echo s{n} > {{altar:path:s{n}.txt}}"]\n'
        f'outputs = [{{ uri = "out/s{n}.txt", logical_path = "s{n}.txt" }}]\n'
        "resources = { cpu = 0.5, memory_gb = 0.125 }\ntimeout_s = 120\n\n"
        for n in range(1)  # one job: the cluster is one node shared with every test
    )
    text = (
        '[backends.host]\ntype = "in-process"\nmax_parallel = 1\n\n'
        '[backends.hpc]\ntype = "slurm"\nmax_parallel = 1\n\n' + host + hpc
    )
    plan = parse_plan(tomllib.loads(text), base_dir=tmp_path)
    node = _Outage(tmp_path / "no-such-ssh")
    slurm = SlurmExecutionBackend(
        container_runtime="docker",
        runtime_options=["-H", docker_host],
        partition=slurm_cluster["partition"],
        data_root=str(tmp_path / "cluster data"),
        runtime=node,
    )
    lanes = {
        "host": InProcessExecutionBackend(data_root=tmp_path / "host-data"),
        "hpc": slurm,
    }
    routed = RoutedBackend(**routed_options(plan), built=lanes)
    run_dir = tmp_path / "run"
    run = asyncio.create_task(
        run_plan(plan, routed, run_dir=run_dir, poll_interval_s=0.1, max_poll_interval_s=0.5)
    )

    def journal() -> Journal | None:
        return Journal.load(run_dir) if Journal.exists(run_dir) else None

    try:
        down_at = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not run.done():
            seen = journal()
            if down_at is None and seen and any(a.handle for a in seen.tasks["s0"].attempts):
                node.down, down_at = True, time.time()  # the Slurm job is in
            if down_at is not None and all((tmp_path / f"out/h{n}.txt").exists() for n in range(3)):
                break
            await asyncio.sleep(0.05)
        assert down_at is not None, "s0 was never submitted"
        assert all((tmp_path / f"out/h{n}.txt").exists() for n in range(3))  # the other lane
        assert not run.done()
        seen = journal()
        assert seen is not None
        submits = [seen.tasks[f"h{n}"].attempts[-1].submitted_at or 0.0 for n in range(3)]
        assert max(submits) >= down_at  # host submits went on while Slurm was down
        await asyncio.sleep(1.0)  # a few polls that find Slurm down
        assert node.refused > 0
        assert not (tmp_path / "out/s0.txt").exists()
        node.down = False
        result = await asyncio.wait_for(asyncio.shield(run), 300)  # the node's queue may be long
    finally:
        node.down = False
        if not run.done():  # a failed test leaves no job on the shared node
            run.cancel()
            with contextlib.suppress(BaseException):
                await run
            for record in Journal.load(run_dir).tasks.values():
                for attempt in record.attempts:
                    if attempt.handle is not None and attempt.finished_at is None:
                        await routed.cancel(attempt.handle)
    assert result.ok, [(t.id, t.status, t.detail) for t in result.tasks]
    assert (tmp_path / "out/s0.txt").read_text() == "s0\n"
    done = Journal.load(run_dir)
    assert {t: len(r.attempts) for t, r in done.tasks.items()} == dict.fromkeys(done.tasks, 1)
