"""One poll of 1,000 real Slurm jobs vs one ``squeue -j`` per job.

Submits 1,000 held jobs (``sbatch --hold``: they never start, so the shared test cluster does
no work for them) to the real Slurm, then times ``SlurmExecutionBackend.poll`` over all of them
against the shell user's loop of one ``squeue -h -j ID`` per job, and counts the remote commands
a poll runs. The jobs are cancelled at the end.

    uv run python packages/altar-backend-slurm/benchmarks/bench_poll.py [--jobs 1000]

Targets: a poll runs at most 2 remote commands and is at least 20x faster than the loop.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import tempfile
import time

from _cluster import CountingLoginNode, load_services_env
from altar.backends.slurm import SlurmExecutionBackend
from altar.execution import TaskHandle

TARGET_RATIO = 20.0
TARGET_COMMANDS = 2


def submit_held(count: int, partition: str) -> list[str]:
    ids = []
    for _ in range(count):
        done = subprocess.run(
            [
                "sbatch",
                "--parsable",
                "--hold",
                f"--partition={partition}",
                "--job-name=altar-bench",
                "--output=/dev/null",
                "--wrap",
                "true",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        ids.append(done.stdout.strip().split(";")[0])
    return ids


def cancel(ids: list[str]) -> None:
    for start in range(0, len(ids), 500):
        subprocess.run(["scancel", *ids[start : start + 500]], check=False)


def baseline(ids: list[str]) -> float:
    started = time.perf_counter()
    for job_id in ids:
        subprocess.run(["squeue", "-h", "-j", job_id], capture_output=True, text=True, check=True)
    return time.perf_counter() - started


def ours(backend: SlurmExecutionBackend, handles: list[TaskHandle]) -> float:
    started = time.perf_counter()
    statuses = asyncio.run(backend.poll(handles))
    elapsed = time.perf_counter() - started
    assert len(statuses) == len(handles)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    env = load_services_env("bench_poll")
    partition = env.get("ALTAR_TEST_SLURM_PARTITION", "debug")
    print(f"submitting {args.jobs} held jobs to partition {partition} ...", flush=True)
    ids = submit_held(args.jobs, partition)
    try:
        node = CountingLoginNode()
        with tempfile.TemporaryDirectory(prefix="altar-bench-poll-") as scratch:
            # queue_interval_s=0: every poll asks squeue (this measures that query against the
            # loop; a poll between queue queries reads only the jobs' records, see bench_records)
            backend = SlurmExecutionBackend(data_root=scratch, runtime=node, queue_interval_s=0)
            token = "0" * 16 + "-" + "0" * 16 + "-" + "0" * 8
            handles = [TaskHandle("slurm", f"{job_id}:{token}") for job_id in ids]
            theirs: list[float] = []
            mine: list[float] = []
            commands: list[int] = []
            for _ in range(args.repeats):  # interleaved: both see the same load
                theirs.append(baseline(ids))
                node.commands.clear()
                mine.append(ours(backend, handles))
                commands.append(len(node.commands))
            # Cancelled, the same jobs have ended: squeue lists them for MinJobAge and says how
            # (only FAILED jobs, or jobs past that window, cost the poll its one sacct).
            cancel(ids)
            ended: list[float] = []
            ended_commands: list[int] = []
            for _ in range(args.repeats):
                node.commands.clear()
                ended.append(ours(backend, handles))
                ended_commands.append(len(node.commands))
    finally:
        cancel(ids)
    base_s, ours_s = statistics.median(theirs), statistics.median(mine)
    ratio = base_s / ours_s
    print()
    print(f"| {'method':<40} | {'median s':>9} | {'commands':>8} | {'runs':>4} |")
    print(f"|{'-' * 42}|{'-' * 11}|{'-' * 10}|{'-' * 6}|")
    print(
        f"| {'squeue -h -j ID per job (baseline)':<40} | {base_s:9.3f} | {args.jobs:8} | "
        f"{len(theirs):4} |"
    )
    print(
        f"| {'SlurmExecutionBackend.poll, all jobs':<40} | {ours_s:9.3f} | {max(commands):8} | "
        f"{len(mine):4} |"
    )
    ended_s = statistics.median(ended)
    print(
        f"| {'... the same jobs once cancelled':<40} | {ended_s:9.3f} | "
        f"{max(ended_commands):8} | {len(ended):4} |"
    )
    print()
    print(
        f"speed-up {ratio:.1f}x (target >= {TARGET_RATIO:g}x): "
        f"{'met' if ratio >= TARGET_RATIO else 'MISSED'}"
    )
    most = max(*commands, *ended_commands)
    print(
        f"remote commands per poll {most} (target <= {TARGET_COMMANDS}): "
        f"{'met' if most <= TARGET_COMMANDS else 'MISSED'}"
    )
    print(f"speed-up once the jobs ended: {base_s / ended_s:.1f}x")


if __name__ == "__main__":
    main()
