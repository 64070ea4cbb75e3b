"""How soon a run notices a job's end, and what its polling costs the controller.

Runs the same plan of trivial tasks (``docker run busybox true``) through the plan runner on
the real Slurm twice, one after the other:

- **records** (ours, default options): every poll reads the jobs' start and exit records (one
  command); ``squeue`` at most once per ``queue_interval_s`` (60 s); the backend caps the
  runner's backoff at 2 s (``max_poll_interval_s``);
- **queue every poll** (the old behaviour): ``queue_interval_s=0``, so every poll asks
  ``squeue`` about every open job, and the runner's own 5 s backoff cap.

For each it prints the median time from a job's end (its exit record's mtime: the record is
the script's last act) to the runner's event saying the task finished, and the controller RPCs
per minute of run time from ``sdiag`` deltas by message type (the controller is shared with
whatever else runs on this machine: the backend's own squeue/sacct/sbatch counts, exact, are
printed beside them).

    uv run python packages/altar-backend-slurm/benchmarks/bench_records.py [--tasks 50]

Targets (the issue's): a median end-to-notice of at most 2 s, and at most one poll ``squeue``
per minute of run time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from _cluster import load_services_env
from altar.backends.slurm import CommandResult, LocalLoginNode, SlurmExecutionBackend
from altar.execution import ContainerTaskSpec, RunEvent
from altar.execution.plans.plan import plan_from_specs
from altar.execution.run.runner import run_plan

TARGET_NOTICE_S = 2.0
TARGET_QUEUE_PER_MIN = 1.0
RPC_TYPES = (
    "REQUEST_JOB_INFO",
    "REQUEST_JOB_INFO_SINGLE",
    "REQUEST_PARTITION_INFO",
    "REQUEST_FED_INFO",
    "REQUEST_SUBMIT_BATCH_JOB",
)
_RPC = re.compile(r"^\s*([A-Z_]+)\s+\(\s*\d+\)\s+count:(\d+)", re.MULTILINE)


class Counting(LocalLoginNode):
    def __init__(self) -> None:
        super().__init__()
        self.programs: Counter[str] = Counter()

    def run(self, argv: Sequence[str]) -> CommandResult:
        program = argv[3] if argv[0] == "timeout" else argv[0]
        if program == "squeue":
            program = "squeue (poll)" if any(a.startswith("--jobs=") for a in argv) else program
            program = "squeue (submit lookup)" if program == "squeue" else program
        self.programs["records" if argv[3:4] == ["altar-records"] else program] += 1
        return super().run(argv)


class OldPace(SlurmExecutionBackend):
    """The old behaviour: the runner's own backoff cap (no backend cap)."""

    max_poll_interval_s: ClassVar[float | None] = None


def sdiag() -> Counter[str]:
    text = subprocess.run(["sdiag"], capture_output=True, text=True, check=True).stdout
    section = text.split("by message type", 1)[-1].split("by user", 1)[0]
    return Counter({name: int(count) for name, count in _RPC.findall(section)})


def one_run(
    label: str, tasks: int, image: str, docker_host: str, partition: str, old: bool
) -> dict[str, Any]:
    specs = [
        ContainerTaskSpec(kind="trivial", image=image, command=["true"], labels={"n": str(i)})
        for i in range(tasks)
    ]
    plan = plan_from_specs(specs, backend_type="slurm", max_parallel=tasks)
    node = Counting()
    noticed: dict[str, float] = {}

    def on_event(event: RunEvent) -> None:
        if event.kind in ("succeeded", "failed") and event.task_id:
            noticed.setdefault(event.task_id, time.time())

    with tempfile.TemporaryDirectory(prefix="altar-bench-records-") as scratch:
        cls = OldPace if old else SlurmExecutionBackend
        backend = cls(
            data_root=Path(scratch, "data"),
            partition=partition,
            container_runtime="docker",
            runtime_options=["-H", docker_host],
            runtime=node,
            **({"queue_interval_s": 0.0} if old else {}),
        )
        before = sdiag()
        started = time.perf_counter()
        result = asyncio.run(
            run_plan(plan, backend, run_dir=Path(scratch, "run"), on_event=on_event)
        )
        elapsed = time.perf_counter() - started
        after = sdiag()
        if not result.ok:
            raise SystemExit(f"bench_records: the {label} run failed: {result.counts()}")
        # cleanup kept each job's exit record (mtime: when the job wrote it) in the logs dir
        ends = {}
        for record in Path(scratch, "data", ".altar-slurm", "logs").glob("*/exit-status"):
            ends[record.parent.name] = record.stat().st_mtime
        by_task = {}
        for task in result.tasks:
            token = task.external_id.split(":", 1)[1] if task.external_id else None
            if token in ends and task.id in noticed:
                by_task[task.id] = noticed[task.id] - ends[token]
    delta = Counter({k: after[k] - before[k] for k in after})
    return {
        "label": label,
        "elapsed": elapsed,
        "notice": statistics.median(by_task.values()) if by_task else float("nan"),
        "noticed": len(by_task),
        "rpc": delta,
        "programs": node.programs,
        "reset": any(v < 0 for v in delta.values()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=50)
    args = parser.parse_args()
    env = load_services_env("bench_records")
    docker_host = env.get("DOCKER_HOST", "")
    if not docker_host:
        raise SystemExit("bench_records: needs DOCKER_HOST (scripts/services up)")
    partition = env.get("ALTAR_TEST_SLURM_PARTITION", "debug")
    image = os.environ.get("ALTAR_TEST_IMAGE", "busybox:latest")
    print(f"{args.tasks} jobs of `docker run {image} true` per run ...", flush=True)
    runs = [
        one_run("records (ours, defaults)", args.tasks, image, docker_host, partition, old=False),
        one_run("queue every poll (old)", args.tasks, image, docker_host, partition, old=True),
    ]
    print()
    head = f"| {'':<30} |" + "".join(f" {r['label']:>26} |" for r in runs)
    print(head)
    print("|" + "-" * 32 + "|" + ("-" * 28 + "|") * len(runs))

    def row(name: str, values: list[str]) -> None:
        print(f"| {name:<30} |" + "".join(f" {v:>26} |" for v in values))

    row("wall time s", [f"{r['elapsed']:.1f}" for r in runs])
    row("median end -> noticed s", [f"{r['notice']:.2f} (n={r['noticed']})" for r in runs])
    for program in ("records", "squeue (poll)", "squeue (submit lookup)", "sacct", "sh"):
        row(f"{program} calls", [str(r["programs"].get(program, 0)) for r in runs])
    for name in RPC_TYPES:
        row(
            f"{name}/min",
            [f"{r['rpc'].get(name, 0) / (r['elapsed'] / 60):.1f}" for r in runs],
        )
    row(
        "all controller RPCs/min",
        [f"{sum(r['rpc'].values()) / (r['elapsed'] / 60):.1f}" for r in runs],
    )
    print()
    ours, old = runs
    queue_min = ours["programs"].get("squeue (poll)", 0) / (ours["elapsed"] / 60)
    old_queue_min = old["programs"].get("squeue (poll)", 0) / (old["elapsed"] / 60)
    print(
        f"poll squeue per minute: {queue_min:.2f} vs {old_queue_min:.2f} "
        f"({old_queue_min / max(queue_min, 1e-9):.0f}x fewer)"
    )
    print(
        f"end -> noticed: {ours['notice']:.2f} s vs {old['notice']:.2f} s "
        f"(ratio {ours['notice'] / old['notice']:.2f})"
    )
    if any(r["reset"] for r in runs):
        print("note: sdiag's counters were reset during a run; its deltas are not meaningful")
    print(
        f"targets: median notice <= {TARGET_NOTICE_S} s: "
        f"{'met' if ours['notice'] <= TARGET_NOTICE_S else 'MISSED'}; "
        f"poll squeue <= {TARGET_QUEUE_PER_MIN}/min: "
        f"{'met' if queue_min <= TARGET_QUEUE_PER_MIN else 'MISSED'}"
    )


if __name__ == "__main__":
    main()
