"""Trivial tasks through the plan runner (2 slots) vs ``xargs -P 2 docker run --rm``.

The baseline is what a shell user would write: ``xargs -P 2`` starting ``docker run --rm
--network none busybox:latest true`` for each task. Ours is the plan runner (journal, polling
with backoff, staging, cleanup) driving the local backend with ``max_parallel = 2``. Both run the
same containers on the same engine.

    uv run python packages/altar-backend-local/benchmarks/bench_plan_runner.py [--tasks 200]

Needs a Docker engine (DOCKER_HOST, as in /tmp/altar-services/env), the docker CLI and xargs.
Target: the runner takes at most 1.3x the time of the baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from _engine import docker_host
from altar.backends.local import LocalDockerExecutionBackend
from altar.execution import ContainerTaskSpec
from altar.execution.plans.plan import plan_from_specs
from altar.execution.run.runner import run_plan

TARGET_RATIO = 1.3
SLOTS = 2


def baseline(tasks: int, image: str) -> float:
    """``seq N | xargs -P 2 -I{} docker run --rm --network none IMAGE true``."""
    argv = [
        "xargs",
        "-P",
        str(SLOTS),
        "-I{}",
        "docker",
        "run",
        "--rm",
        "--network",
        "none",
        "--label",
        "altar.bench=xargs-{}",
        image,
        "true",
    ]
    lines = "".join(f"{i}\n" for i in range(tasks))
    started = time.perf_counter()
    subprocess.run(argv, input=lines, text=True, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def ours(tasks: int, image: str, poll_interval_s: float | None) -> float:
    specs = [
        ContainerTaskSpec(kind="trivial", image=image, command=["true"], labels={"n": str(i)})
        for i in range(tasks)
    ]
    plan = plan_from_specs(specs, backend_type="local", max_parallel=SLOTS)
    with tempfile.TemporaryDirectory(prefix="altar-bench-runner-") as scratch:
        backend = LocalDockerExecutionBackend(data_root=Path(scratch, "data"), slots=SLOTS)
        started = time.perf_counter()
        result = asyncio.run(
            run_plan(plan, backend, run_dir=Path(scratch, "run"), poll_interval_s=poll_interval_s)
        )
        elapsed = time.perf_counter() - started
        backend.close()
    if not result.ok:
        raise SystemExit(f"bench_plan_runner: the plan failed: {result.counts()}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--poll-interval",
        type=float,
        default=None,
        help="the runner's first poll interval (s); default: the backend's own "
        f"({LocalDockerExecutionBackend.poll_interval_s:g} s)",
    )
    args = parser.parse_args()
    poll_s = args.poll_interval
    if poll_s is None:
        poll_s = LocalDockerExecutionBackend.poll_interval_s
    host = docker_host("bench_plan_runner")
    image = os.environ.get("ALTAR_TEST_IMAGE", "busybox:latest")
    print(
        f"{args.tasks} x `true` on {host}, {SLOTS} at a time, {args.repeats} runs each ...",
        flush=True,
    )
    theirs: list[float] = []
    mine: list[float] = []
    for _ in range(args.repeats):  # interleaved, so both see the same machine load
        theirs.append(baseline(args.tasks, image))
        mine.append(ours(args.tasks, image, args.poll_interval))
    base_s = statistics.median(theirs)
    ours_s = statistics.median(mine)
    ratio = ours_s / base_s
    print()
    print(f"| {'method':<44} | {'median s':>8} | {'tasks/s':>7} | {'runs':>4} |")
    print(f"|{'-' * 46}|{'-' * 10}|{'-' * 9}|{'-' * 6}|")
    for name, seconds, runs in (
        (f"xargs -P {SLOTS} docker run --rm (baseline)", base_s, len(theirs)),
        (f"plan runner + local, {SLOTS} slots, poll {poll_s:g} s", ours_s, len(mine)),
    ):
        print(f"| {name:<44} | {seconds:8.2f} | {args.tasks / seconds:7.2f} | {runs:4} |")
    print()
    verdict = "met" if ratio <= TARGET_RATIO else "MISSED"
    print(f"ratio {ratio:.2f}x the baseline's time (target <= {TARGET_RATIO}x): {verdict}")


if __name__ == "__main__":
    main()
