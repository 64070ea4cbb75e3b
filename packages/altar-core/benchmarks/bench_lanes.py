"""Benchmark: what choosing a tick's submits costs a routed run's lanes (issue 26).

Run: ``uv run python packages/altar-core/benchmarks/bench_lanes.py [--tasks N] [--repeat N]``.
One call of the run's ``choose`` over ``--tasks`` (default 100,000) ready tasks with 64 in
flight and ``max_parallel`` 128, median of ``--repeat`` (15) calls, interleaved:

- baseline: one backend (one lane, as before routing);
- two lanes (half the tasks each, one with its own ``max_parallel``), without fallbacks;
- the same with a fallback on every task (each task's lane is worked out from its attempts).

Target: the routed ticks within 3x the baseline. Always exits 0; the figures are for reading.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from altar.execution.backend import ExecutionBackend
from altar.execution.run.lanes import Lanes
from altar.execution.run.routed import LABEL_ROUTE, RoutedBackend
from altar.execution.state.records import PENDING, QUEUED, Attempt, TaskRecord
from altar.execution.types import ContainerTaskSpec, TaskHandle, TaskStatus


class Idle(ExecutionBackend):
    """Answers capacity (no report) and nothing else: choose asks no more of it."""

    name = "idle"

    async def submit(self, spec: ContainerTaskSpec) -> TaskHandle:
        raise NotImplementedError

    async def poll(self, handles: list[TaskHandle]) -> list[TaskStatus]:
        raise NotImplementedError


def _records(tasks: int, routes: dict[str, str]) -> dict[str, TaskRecord]:
    records = {}
    for n in range(tasks):
        task = f"t{n:06d}"
        record = TaskRecord(task, "k", "digest", state=QUEUED)
        if n < 64:  # in flight
            handle = TaskHandle("idle", task, {LABEL_ROUTE: routes.get(task, "one")})
            record.attempts.append(Attempt(1, PENDING, handle=handle))
            record.state = PENDING
        records[task] = record
    return records


def _lanes(kind: str, tasks: int) -> tuple[Lanes, dict[str, TaskRecord]]:
    routes = {f"t{n:06d}": ("one", "two")[n % 2] for n in range(tasks)}
    spec = ContainerTaskSpec("k", "i", ["x"])
    specs = dict.fromkeys(routes, spec)
    backend: ExecutionBackend
    if kind == "one backend":
        backend = Idle()
    else:
        decls = {"one": {"type": "idle", "max_parallel": 48}, "two": {"type": "idle"}}
        fallbacks = {t: "two" for t, r in routes.items() if r == "one"}
        backend = RoutedBackend(
            backends=decls,
            routes=routes,
            default="one",
            fallbacks=fallbacks if kind.endswith("fallbacks") else None,
            built={"one": Idle(), "two": Idle()},
        )
    lanes = Lanes(backend, specs, max_parallel=128, pool=lambda r: "cpu", emit=lambda k, m: None)
    return lanes, _records(tasks, routes)


async def _once(lanes: Lanes, records: dict[str, TaskRecord]) -> float:
    start = time.perf_counter()
    ready = [r for r in records.values() if r.state == QUEUED]
    chosen = await lanes.choose(ready, records, (), 0.0)
    seconds = time.perf_counter() - start
    assert len(chosen) == 64, f"chose {len(chosen)}, not the 64 the run's max_parallel leaves"
    return seconds


async def _medians(kinds: list[str], tasks: int, repeat: int) -> dict[str, float]:
    setups = {kind: _lanes(kind, tasks) for kind in kinds}
    times: dict[str, list[float]] = {kind: [] for kind in kinds}
    for _ in range(repeat):  # interleaved, so a busy moment of the machine hits every kind
        for kind, (lanes, records) in setups.items():
            times[kind].append(await _once(lanes, records))
    return {kind: statistics.median(found) for kind, found in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    kinds = ["one backend", "two lanes", "two lanes, fallbacks"]
    medians = asyncio.run(_medians(kinds, args.tasks, args.repeat))
    base = medians[kinds[0]]
    print(f"choose over {args.tasks} ready tasks, median of {args.repeat} (target: <= 3x)")
    for kind, seconds in medians.items():
        print(f"  {kind:24s} {seconds * 1000:8.1f} ms  {seconds / base:5.2f}x")


if __name__ == "__main__":
    main()
