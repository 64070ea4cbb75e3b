"""Trivial tasks through the plan runner on Slurm vs a shell loop of ``sbatch --wrap``.

The baseline is what a shell user would write: one ``sbatch --wrap 'docker run --rm
--network=none busybox:latest true'`` per task, then ``squeue`` every 0.5 s until none of the
jobs is left. Ours is the plan runner (journal, polling with backoff, cleanup) driving
``SlurmExecutionBackend`` with Docker on this login node; each task is one batch job running the
same container. Both share the test cluster's two CPUs, so both are bound by Slurm's scheduling.

    uv run python packages/altar-backend-slurm/benchmarks/bench_runner.py [--tasks 200]

Target: the runner takes at most 1.3x the time of the baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from _cluster import CountingLoginNode, load_services_env
from altar.backends.slurm import SlurmExecutionBackend
from altar.execution import ContainerTaskSpec
from altar.execution.plans.plan import plan_from_specs
from altar.execution.run.runner import run_plan

TARGET_RATIO = 1.3


def baseline(tasks: int, image: str, docker_host: str, partition: str) -> float:
    work = shlex.join(["docker", "-H", docker_host, "run", "--rm", "--network=none", image, "true"])
    started = time.perf_counter()
    ids = []
    for _ in range(tasks):
        done = subprocess.run(
            [
                "sbatch",
                "--parsable",
                f"--partition={partition}",
                "--output=/dev/null",
                "--job-name=altar-bench-wrap",
                "--wrap",
                work,
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        ids.append(done.stdout.strip().split(";")[0])
    while subprocess.run(
        ["squeue", "-h", "-o", "%i", f"--jobs={','.join(ids)}"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip():
        time.sleep(0.5)
    return time.perf_counter() - started


def ours(tasks: int, image: str, docker_host: str, partition: str) -> tuple[float, int]:
    specs = [
        ContainerTaskSpec(kind="trivial", image=image, command=["true"], labels={"n": str(i)})
        for i in range(tasks)
    ]
    plan = plan_from_specs(specs, backend_type="slurm", max_parallel=tasks)
    node = CountingLoginNode()
    with tempfile.TemporaryDirectory(prefix="altar-bench-slurm-") as scratch:
        backend = SlurmExecutionBackend(
            data_root=Path(scratch, "data"),
            partition=partition,
            container_runtime="docker",
            runtime_options=["-H", docker_host],
            runtime=node,
        )
        started = time.perf_counter()
        result = asyncio.run(run_plan(plan, backend, run_dir=Path(scratch, "run")))
        elapsed = time.perf_counter() - started
    if not result.ok:
        raise SystemExit(f"bench_runner: the plan failed: {result.counts()}")
    return elapsed, len(node.commands)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    env = load_services_env("bench_runner")
    docker_host = env.get("DOCKER_HOST", "")
    if not docker_host:
        raise SystemExit("bench_runner: needs DOCKER_HOST (scripts/services up)")
    partition = env.get("ALTAR_TEST_SLURM_PARTITION", "debug")
    image = os.environ.get("ALTAR_TEST_IMAGE", "busybox:latest")
    print(
        f"{args.tasks} jobs of `docker run {image} true`, {args.repeats} run(s) each ...",
        flush=True,
    )
    theirs: list[float] = []
    mine: list[float] = []
    commands: list[int] = []
    for _ in range(args.repeats):  # interleaved: both see the same load
        theirs.append(baseline(args.tasks, image, docker_host, partition))
        seconds, count = ours(args.tasks, image, docker_host, partition)
        mine.append(seconds)
        commands.append(count)
    base_s, ours_s = statistics.median(theirs), statistics.median(mine)
    ratio = ours_s / base_s
    print()
    print(f"| {'method':<44} | {'median s':>8} | {'tasks/s':>7} | {'runs':>4} |")
    print(f"|{'-' * 46}|{'-' * 10}|{'-' * 9}|{'-' * 6}|")
    for name, seconds, runs in (
        ("sbatch --wrap loop + squeue wait (baseline)", base_s, len(theirs)),
        ("plan runner + slurm backend (docker)", ours_s, len(mine)),
    ):
        print(f"| {name:<44} | {seconds:8.2f} | {args.tasks / seconds:7.2f} | {runs:4} |")
    print()
    print(
        f"remote commands in the runner's run: {statistics.median(commands):.0f} "
        f"({statistics.median(commands) / args.tasks:.1f} per task)"
    )
    verdict = "met" if ratio <= TARGET_RATIO else "MISSED"
    print(f"ratio {ratio:.2f}x the baseline's time (target <= {TARGET_RATIO}x): {verdict}")


if __name__ == "__main__":
    main()
