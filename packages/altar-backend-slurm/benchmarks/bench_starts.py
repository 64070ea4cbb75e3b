"""Where a trivial task's time goes on real Slurm: the node's start rate vs ours.

Side by side in one run, each an array of ``--tasks`` jobs on the test Slurm, read back from
``sacct`` (Submit, Start, End: whole seconds):

- the node's own rate: ``sbatch --array --wrap true`` (no container);
- the same with the task's container: ``--wrap 'docker run --rm busybox true'`` (no Altar);
- ours: the plan runner driving ``SlurmExecutionBackend`` (arrays on, defaults), whose job
  script also writes the start and exit records and asks the engine about an OOM kill.

For each: wall time, starts per second (tasks / (last start - first submit)), and the median
seconds a job holds its CPU (End - Start). A node with C CPUs whose scheduler starts jobs in
passes every P seconds starts at most C jobs a pass while each job ends within a pass; a job
that holds its CPU past a pass halves that CPU's rate.

    uv run python packages/altar-backend-slurm/benchmarks/bench_starts.py [--tasks 100]
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
from datetime import datetime
from pathlib import Path

from _cluster import load_services_env
from altar.backends.slurm import SlurmExecutionBackend
from altar.execution import ContainerTaskSpec
from altar.execution.plans.plan import plan_from_specs
from altar.execution.run.runner import run_plan


def _sacct(args: list[str], under: str = "") -> list[tuple[float, float, float]]:
    """(submit, start, end) epoch seconds per job (``sacct -X``), of jobs whose working
    directory is under ``under`` when given."""
    text = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-o", "Submit,Start,End,WorkDir", *args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = []
    for line in text.splitlines():
        parts = line.split("|", 3)
        if len(parts) != 4 or "Unknown" in line or not all(parts[:3]):
            continue
        if under and not parts[3].startswith(under):
            continue
        submit, start, end = (datetime.fromisoformat(p).timestamp() for p in parts[:3])
        rows.append((submit, start, end))
    return rows


def _wait_accounted(
    args: list[str], count: int, under: str = ""
) -> list[tuple[float, float, float]]:
    deadline = time.monotonic() + 60
    while True:  # slurmdbd lags the controller by a moment
        rows = _sacct(args, under)
        if len(rows) >= count or time.monotonic() > deadline:
            return rows
        time.sleep(1)


def wrap_array(tasks: int, partition: str, work: str, name: str) -> tuple[float, list]:
    started = time.perf_counter()
    job = subprocess.run(
        ["sbatch", "--parsable", f"--partition={partition}", "--output=/dev/null",
         f"--job-name={name}", f"--array=0-{tasks - 1}", "--mem=128M", "--wrap", work],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    while subprocess.run(
        ["squeue", "-h", "--array", "-o", "%i", f"--jobs={job}"],
        capture_output=True, text=True, check=False,
    ).stdout.strip():  # fmt: skip
        time.sleep(1)
    wall = time.perf_counter() - started
    return wall, _wait_accounted([f"--jobs={job}"], tasks)


def ours(tasks: int, image: str, docker_host: str, partition: str) -> tuple[float, list]:
    specs = [
        ContainerTaskSpec(kind="trivial", image=image, command=["true"], labels={"n": str(i)})
        for i in range(tasks)
    ]
    plan = plan_from_specs(specs, backend_type="slurm", max_parallel=tasks)
    with tempfile.TemporaryDirectory(prefix="altar-bench-starts-") as scratch:
        backend = SlurmExecutionBackend(
            data_root=Path(scratch, "data"),
            partition=partition,
            container_runtime="docker",
            runtime_options=["-H", docker_host],
        )
        begun = datetime.now().strftime("%Y-%m-%dT%H:%M:%S")
        started = time.perf_counter()
        result = asyncio.run(run_plan(plan, backend, run_dir=Path(scratch, "run")))
        wall = time.perf_counter() - started
        if not result.ok:
            raise SystemExit(f"bench_starts: the plan failed: {result.counts()}")
        rows = _wait_accounted(["--allusers", f"--starttime={begun}"], tasks, under=scratch)
    return wall, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100)
    args = parser.parse_args()
    env = load_services_env("bench_starts")
    docker_host = env.get("DOCKER_HOST", "")
    partition = env.get("ALTAR_TEST_SLURM_PARTITION", "debug")
    image = os.environ.get("ALTAR_TEST_IMAGE", "busybox:latest")
    docker = shlex.join(
        ["docker", "-H", docker_host, "run", "--rm", "--network=none", image, "true"]
    )
    methods = [
        ("node: array of `true`",
         lambda: wrap_array(args.tasks, partition, "true", "altar-bench-true")),
        ("node: array of `docker run --rm ... true`",
         lambda: wrap_array(args.tasks, partition, docker, "altar-bench-docker")),
        ("ours (arrays on, defaults)", lambda: ours(args.tasks, image, docker_host, partition)),
    ]  # fmt: skip
    print(f"{args.tasks} trivial tasks on the test Slurm\n", flush=True)
    print(
        f"| {'method':<42} | {'wall s':>7} | {'span s':>7} | {'starts/s':>8} | {'CPU hold s':>10} |"
    )
    walls = []
    for name, call in methods:
        wall, times = call()
        walls.append(wall)
        if not times:
            print(f"| {name:<42} | {wall:7.1f} | {'?':>7} | {'?':>8} | {'?':>10} |", flush=True)
            continue
        first = min(b for b, _, _ in times)
        span = max(e for _, _, e in times) - first  # first submit to last end, Slurm's clock
        rate = len(times) / max(max(s for _, s, _ in times) - first, 1.0)
        hold = statistics.median(e - s for _, s, e in times)
        print(
            f"| {name:<42} | {wall:7.1f} | {span:7.1f} | {rate:8.2f} | {hold:10.1f} |", flush=True
        )
    for (name, _), wall in zip(methods[1:], walls[1:], strict=True):
        print(f"{name}: {wall / walls[0]:.2f}x the node's wall time for `true` (target <= 1.2x)")


if __name__ == "__main__":
    main()
