"""Trivial tasks on real Slurm: ours with arrays on and off vs an ``sbatch --wrap`` loop.

Side by side in one run, each with the controller's RPCs it cost (``sdiag`` deltas by type;
the test Slurm is shared, so other users' RPCs can show in a delta too):

- ours, default options (arrays on): the plan runner driving ``SlurmExecutionBackend``;
- ours with ``arrays = false``;
- a shell loop of ``sbatch --wrap`` polled by ``squeue`` every ``--loop-poll-s`` (60 s);
- the node's own job-start rate: one ``sbatch --array`` of ``true`` jobs (no container), polled
  every second: how fast this Slurm starts trivial jobs at all.

    uv run python packages/altar-backend-slurm/benchmarks/bench_arrays.py [--tasks 2000]

Targets (issue 21): wall time <= 1.0x the loop; sbatch calls <= tasks / 100 with arrays on;
REQUEST_JOB_INFO <= 1 per minute of run time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shlex
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from _cluster import load_services_env
from altar.backends.slurm import CommandResult, LocalLoginNode, SlurmExecutionBackend
from altar.execution import ContainerTaskSpec
from altar.execution.plans.plan import plan_from_specs
from altar.execution.run.runner import run_plan

_RPC = re.compile(r"^\s+(REQUEST_[A-Z_]+)\s+\(\s*\d+\)\s+count:(\d+)", re.MULTILINE)
SHOWN = ("REQUEST_JOB_INFO", "REQUEST_SUBMIT_BATCH_JOB", "REQUEST_JOB_INFO_SINGLE")


class SubmitCounter(LocalLoginNode):
    """This machine's login node, counting the commands that run sbatch."""

    def __init__(self) -> None:
        super().__init__()
        self.sbatches = 0
        self.job_queries = 0  # squeue: what costs the controller a REQUEST_JOB_INFO

    def run(self, argv: Sequence[str]) -> CommandResult:
        if argv[:1] == ["sh"] and argv[3:4] in (["altar-submit"], ["altar-array-submit"]):
            self.sbatches += 1
        if "squeue" in argv[:4]:
            self.job_queries += 1
        return super().run(argv)


#: The backend's own squeue calls in the last run of ``ours``, by arrays on/off.
OWN_QUERIES: dict[bool, int] = {}


def rpcs() -> dict[str, int]:
    text = subprocess.run(["sdiag"], capture_output=True, text=True, check=True).stdout
    section = text.split("by message type", 1)[-1].split("by user", 1)[0]
    return {name: int(count) for name, count in _RPC.findall(section)}


def measured(call: Callable[[], int]) -> tuple[float, int, dict[str, int]]:
    """Wall seconds, sbatch calls, and the sdiag delta of ``call``."""
    before = rpcs()
    started = time.perf_counter()
    sbatches = call()
    elapsed = time.perf_counter() - started
    after = rpcs()
    return elapsed, sbatches, {k: after.get(k, 0) - before.get(k, 0) for k in SHOWN}


def _wait(ids: list[str], every_s: float) -> None:
    while subprocess.run(
        ["squeue", "-h", "--array", "-o", "%i", f"--jobs={','.join(ids)}"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip():
        time.sleep(every_s)


def loop(tasks: int, work: str, partition: str, every_s: float) -> int:
    ids = []
    for _ in range(tasks):
        done = subprocess.run(
            ["sbatch", "--parsable", f"--partition={partition}", "--output=/dev/null",
             "--job-name=altar-bench-wrap", "--wrap", work],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        ids.append(done.stdout.strip().split(";")[0])
    _wait(ids, every_s)
    return tasks


def start_rate(tasks: int, partition: str, array_size: int) -> int:
    ids = []
    for first in range(0, tasks, array_size):
        size = min(array_size, tasks - first)
        done = subprocess.run(
            ["sbatch", "--parsable", f"--partition={partition}", "--output=/dev/null",
             "--job-name=altar-bench-rate", f"--array=0-{size - 1}", "--wrap", "true"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        ids.append(done.stdout.strip().split(";")[0])
    _wait(ids, 1.0)
    return len(ids)


def ours(tasks: int, image: str, docker_host: str, partition: str, *, arrays: bool) -> int:
    specs = [
        ContainerTaskSpec(kind="trivial", image=image, command=["true"], labels={"n": str(i)})
        for i in range(tasks)
    ]
    plan = plan_from_specs(specs, backend_type="slurm", max_parallel=tasks)
    node = SubmitCounter()
    with tempfile.TemporaryDirectory(prefix="altar-bench-arrays-") as scratch:
        backend = SlurmExecutionBackend(
            data_root=Path(scratch, "data"),
            partition=partition,
            container_runtime="docker",
            runtime_options=["-H", docker_host],
            arrays=arrays,
            runtime=node,
        )
        result = asyncio.run(run_plan(plan, backend, run_dir=Path(scratch, "run")))
    if not result.ok:
        raise SystemExit(f"bench_arrays: the plan failed: {result.counts()}")
    OWN_QUERIES[arrays] = node.job_queries
    return node.sbatches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=200, help="2000 for the issue's size")
    parser.add_argument("--loop-poll-s", type=float, default=60.0)
    args = parser.parse_args()
    env = load_services_env("bench_arrays")
    docker_host = env.get("DOCKER_HOST", "")
    partition = env.get("ALTAR_TEST_SLURM_PARTITION", "debug")
    image = os.environ.get("ALTAR_TEST_IMAGE", "busybox:latest")
    work = shlex.join(["docker", "-H", docker_host, "run", "--rm", "--network=none", image, "true"])
    print(f"{args.tasks} trivial tasks (`docker run {image} true`) ...", flush=True)
    methods = [
        ("node's job-start rate (array of `true`)",
         lambda: start_rate(args.tasks, partition, 500)),
        (f"sbatch --wrap loop, squeue every {args.loop_poll_s:g} s",
         lambda: loop(args.tasks, work, partition, args.loop_poll_s)),
        ("ours, arrays on (defaults)",
         lambda: ours(args.tasks, image, docker_host, partition, arrays=True)),
        ("ours, arrays = false",
         lambda: ours(args.tasks, image, docker_host, partition, arrays=False)),
    ]  # fmt: skip
    print()
    print(f"| {'method':<42} | {'wall s':>8} | {'tasks/s':>7} | {'sbatch':>6} | "
          + " | ".join(f"{k:>24}" for k in SHOWN) + " |", flush=True)  # fmt: skip
    rows = []
    for name, call in methods:  # each row as soon as it is measured
        seconds, sbatches, delta = measured(call)
        rows.append((name, (seconds, sbatches, delta)))
        print(f"| {name:<42} | {seconds:8.1f} | {args.tasks / seconds:7.2f} | {sbatches:6} | "
              + " | ".join(f"{delta[k]:24}" for k in SHOWN) + " |", flush=True)  # fmt: skip
    loop_s = rows[1][1][0]
    for (name, (seconds, sbatches, delta)), arrays in zip(rows[2:], (True, False), strict=True):
        per_min = delta["REQUEST_JOB_INFO"] / (seconds / 60)
        own = OWN_QUERIES.get(arrays, 0) / (seconds / 60)
        print(f"{name}: {seconds / loop_s:.2f}x the loop's wall time (target <= 1.0x), "
              f"{seconds / rows[0][1][0]:.2f}x the node's start rate (target <= 1.2x), "
              f"REQUEST_JOB_INFO {per_min:.1f}/min, the backend's own squeue {own:.1f}/min "
              f"(target <= 1), sbatch {sbatches} (target <= {args.tasks / 100:g})")  # fmt: skip


if __name__ == "__main__":
    main()
