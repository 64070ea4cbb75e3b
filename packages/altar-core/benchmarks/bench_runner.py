"""Runner overhead and poll economy.

1. Overhead per task: a plan of 1000 tasks on a zero-latency in-memory backend (submit and poll
   return at once; each task succeeds on its second poll). The runner journals every step with
   fsync; the baseline is a bare loop that submits every spec and polls every handle once per
   tick with no journal, no retries, no bookkeeping. Target: at most 1 ms of runner time per task.
2. Poll calls: tasks that each need 5 polls to finish, for 10, 100 and 1000 tasks. The runner
   makes one poll call per tick whatever the number of tasks; naive per-task polling makes one
   call per task per tick. Target: the runner's count does not grow with the task count.

    uv run python packages/altar-core/benchmarks/bench_runner.py [--reps N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from altar.execution import (
    ContainerTaskSpec,
    ExecutionBackend,
    TaskHandle,
    TaskState,
    TaskStatus,
)
from altar.execution.plans.plan import plan_from_specs
from altar.execution.run.runner import run_plan

TARGET_MS_PER_TASK = 1.0


class InstantBackend(ExecutionBackend):
    """Accepts every task at once; a task succeeds after ``polls`` polls of it."""

    name = "instant"
    input_digest_verification = "staging"

    def __init__(self, *, polls: int = 1) -> None:
        self.polls = polls
        self.seen: dict[str, int] = {}
        self.poll_calls = 0
        self.next_id = 0

    async def submit(self, spec: ContainerTaskSpec) -> TaskHandle:
        self.next_id += 1
        external_id = f"t{self.next_id}"
        self.seen[external_id] = 0
        return TaskHandle(self.name, external_id, spec.labels)

    async def poll(self, handles: list[TaskHandle]) -> list[TaskStatus]:
        self.poll_calls += 1
        statuses = []
        for handle in handles:
            self.seen[handle.external_id] += 1
            done = self.seen[handle.external_id] >= self.polls
            state = TaskState.SUCCEEDED if done else TaskState.RUNNING
            statuses.append(TaskStatus(handle, state))
        return statuses


def specs(count: int) -> list[ContainerTaskSpec]:
    return [
        ContainerTaskSpec(
            kind="bench",
            image="busybox:latest",
            command=["true", str(i)],
            labels={"job_id": "bench", "shard": str(i)},
        )
        for i in range(count)
    ]


async def runner_once(count: int, polls: int) -> tuple[float, int]:
    backend = InstantBackend(polls=polls)
    plan = plan_from_specs(specs(count))
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        result = await run_plan(
            plan, backend, run_dir=Path(tmp) / "run", poll_interval_s=0.0, max_poll_interval_s=0.0
        )
        elapsed = time.perf_counter() - start
    assert result.ok
    return elapsed, backend.poll_calls


async def naive_once(count: int, polls: int, *, per_task: bool) -> tuple[float, int]:
    backend = InstantBackend(polls=polls)
    start = time.perf_counter()
    handles = [await backend.submit(spec) for spec in specs(count)]
    open_handles = handles
    while open_handles:
        if per_task:
            statuses = [(await backend.poll([h]))[0] for h in open_handles]
        else:
            statuses = await backend.poll(open_handles)
        open_handles = [s.handle for s in statuses if not s.state.is_terminal]
        await asyncio.sleep(0)
    return time.perf_counter() - start, backend.poll_calls


def median(values: list[float]) -> float:
    return statistics.median(values)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=1000)
    args = parser.parse_args()

    count = args.tasks
    ours = [asyncio.run(runner_once(count, 1))[0] for _ in range(args.reps)]
    base = [asyncio.run(naive_once(count, 1, per_task=False))[0] for _ in range(args.reps)]
    ours_ms = median(ours) / count * 1000
    base_ms = median(base) / count * 1000
    verdict = "met" if ours_ms <= TARGET_MS_PER_TASK else "MISSED"
    print(f"runner overhead, {count} tasks, zero-latency backend (median of {args.reps})")
    print(f"  {'':<28}{'total s':>10}{'ms/task':>10}")
    print(f"  {'altar runner (journaled)':<28}{median(ours):>10.3f}{ours_ms:>10.3f}")
    print(f"  {'bare loop (no journal)':<28}{median(base):>10.3f}{base_ms:>10.3f}")
    print(
        f"  extra cost of the runner: {ours_ms - base_ms:.3f} ms/task "
        f"(ratio {ours_ms / base_ms:.1f}x); target <= {TARGET_MS_PER_TASK} ms/task: {verdict}"
    )
    print()
    print("poll calls until done (each task needs 5 polls)")
    print(f"  {'tasks':>6}{'altar runner':>14}{'naive per-task':>16}{'ratio':>8}")
    runner_counts = []
    for n in (10, 100, 1000):
        _, ours_calls = asyncio.run(runner_once(n, 5))
        _, naive_calls = asyncio.run(naive_once(n, 5, per_task=True))
        runner_counts.append(ours_calls)
        print(f"  {n:>6}{ours_calls:>14}{naive_calls:>16}{naive_calls / ours_calls:>7.0f}x")
    flat = len(set(runner_counts)) == 1
    print(f"  target: runner calls independent of the task count: {'met' if flat else 'MISSED'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
