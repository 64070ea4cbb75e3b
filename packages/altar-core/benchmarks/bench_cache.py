"""Benchmark: the task cache's store, against the work it saves.

Run: ``uv run python packages/altar-core/benchmarks/bench_cache.py [--repeat N] [--entries N]
[--size-mib N]``. Prints medians side by side with a baseline and the ratio against the issue's
targets (issue 25):

- a verified lookup among ``--entries`` entries (default 10,000), one output each, its record
  current, through the store's index (and without it): target ≤ 1 ms median per lookup;
  baseline: one ``os.stat`` of the output;
- serving a cached output of ``--size-mib`` (default 1024) MiB by link, against copying it
  with ``shutil.copyfile``: target ≤ 0.05x;
- ``altar run`` of a ``--tasks`` (default 10,000) task plan whose every task is cached (one
  output each, bench_scale.py's instant backend), against ``altar status`` of that run:
  target ≤ 2x. Both are fresh processes; medians of ``--repeat`` runs (a new run directory
  each), wall and CPU; the first run serving the entries (the one writing the store's index)
  is timed apart. ``altar check`` of the plan is timed beside them: the start-up and the
  parse every run pays before its first lookup. A second row re-runs the plan in place (its
  outputs left at their uris by the previous run: nothing to link).

Always exits 0; the figures are for reading, not for asserting.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from altar.execution import ContainerTaskSpec, Transfer, sha256_file
from altar.execution.cache import CacheStore, TaskKey, task_key
from altar.execution.cache.index import CacheIndex
from altar.execution.state.journal import Journal

IMAGE = "sha256:" + "a" * 64
IMAGE_PINNED = "busybox@" + IMAGE


def _key(n: int) -> TaskKey:
    spec = ContainerTaskSpec("k", "img", ["score", str(n)], outputs=[Transfer("o", "jobs/o")])
    return task_key(spec, image=IMAGE, inputs={})


def _timed(function: Callable[[], None], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_lookup(root: Path, entries: int, repeat: int) -> None:
    store = CacheStore(root / "store")
    outputs = root / "outputs"
    outputs.mkdir()
    for n in range(entries):
        path = outputs / f"o{n}"
        path.write_bytes(f"score {n}\n".encode())
        store.put(_key(n), {"jobs/o": (path, sha256_file(path))})
    time.sleep(1.1)  # the objects' status-change second is over: records can be written
    for n in range(entries):
        store.lookup(_key(n))  # writes each object's record (a first lookup hashes)
    store.flush_index()  # and its index row
    probes = [_key(n * 7919 % entries) for n in range(min(entries, 1000))]
    store = CacheStore(root / "store")  # a later run: the index read from its shards
    unindexed = CacheStore(root / "store")
    unindexed.index = CacheIndex(str(root / "no-index"))
    unindexed.index.learn = lambda hex_, row: None  # type: ignore[method-assign]

    def lookups(store: CacheStore = store) -> None:
        for key in probes:
            entry, problems = store.lookup(key)
            assert entry is not None
            assert not problems

    def stats() -> None:
        for key in probes:
            os.stat(store.entry_path(key.digest))

    ours = _timed(lookups, repeat) / len(probes)
    slow = _timed(lambda: lookups(unindexed), repeat) / len(probes)
    base = _timed(stats, repeat) / len(probes)
    print(
        f"verified lookup, {entries} entries: {ours * 1e3:.3f} ms median per lookup "
        f"through the index ({slow * 1e3:.3f} ms without it; one stat: {base * 1e3:.4f} ms, "
        f"{ours / base:.1f}x) target <= 1 ms: {'met' if ours <= 1e-3 else 'NOT met'}"
    )


def bench_serve(root: Path, size_mib: int, repeat: int) -> None:
    store = CacheStore(root / "store-big")
    big = root / "big.bin"
    with open(big, "wb") as handle:
        block = os.urandom(1 << 20)
        for _ in range(size_mib):
            handle.write(block)
    digest = sha256_file(big)
    entry = store.put(_key(-1), {"jobs/o": (big, digest)})
    out = root / "served"

    def serve() -> None:
        store.materialize(entry, {"jobs/o": out})

    def copy() -> None:
        shutil.copyfile(store.object_path(digest), root / "copied.bin")

    ours, base = _timed(serve, repeat), _timed(copy, repeat)
    print(
        f"serve {size_mib} MiB cached output: {ours * 1e3:.2f} ms median by link vs "
        f"{base * 1e3:.1f} ms to copy it ({ours / base:.4f}x) target <= 0.05x: "
        f"{'met' if ours <= 0.05 * base else 'NOT met'}"
    )


def bench_cached_plan(root: Path, tasks: int, repeat: int) -> None:
    import bench_scale  # beside this file: its instant backend and child-process runner

    work = root / "plan"
    work.mkdir()
    plan = [
        bench_scale.task(
            i,
            image=IMAGE_PINNED,
            outputs=[{"uri": f"out/o{i:06d}", "logical_path": f"jobs/o{i:06d}"}],
        )
        for i in range(tasks)
    ]
    bench_scale.write_plan(work / "plan.json", plan, cache={"dir": "store"})
    fill = bench_scale.altar(["run", "plan.json", "--run-dir", "runs/fill", "--quiet"], work)
    # a weekly re-run, not one in the same second: each object's last link (its ctime) is
    # in a past second, so its record can be written (see docs/guide/cache.md)
    time.sleep(1.1)
    shutil.rmtree(work / "out")
    # the first run serving the entries reads their manifests and writes the store's index
    first = bench_scale.altar(["run", "plan.json", "--run-dir", "runs/indexing", "--quiet"], work)
    runs, statuses, checks, in_place = [], [], [], []
    for n in range(repeat):
        shutil.rmtree(work / "out")
        run_dir = f"runs/cached-{n}"
        runs.append(bench_scale.altar(["run", "plan.json", "--run-dir", run_dir, "--quiet"], work))
        statuses.append(bench_scale.altar(["status", run_dir], work))
        checks.append(bench_scale.altar(["check", "plan.json"], work))
        # the weekly re-run in place: every output is still at its uri (the store's object)
        again = ["run", "plan.json", "--run-dir", f"runs/in-place-{n}", "--quiet"]
        in_place.append(bench_scale.altar(again, work))
    cached = Journal.load(work / "runs" / "cached-0")
    served = sum(1 for record in cached.tasks.values() if record.cached)
    ours = statistics.median(p.wall_s for p in runs)
    base = statistics.median(p.wall_s for p in statuses)
    cpu = statistics.median(p.cpu_s for p in runs)
    cpu_base = statistics.median(p.cpu_s for p in statuses)
    check = statistics.median(p.wall_s for p in checks)
    cpu_check = statistics.median(p.cpu_s for p in checks)
    print(
        f"{tasks} tasks fully cached ({served} served): altar run {ours:.2f} s median vs "
        f"altar status {base:.2f} s ({ours / base:.2f}x; CPU {cpu:.2f} s vs {cpu_base:.2f} s, "
        f"{cpu / cpu_base:.2f}x) target <= 2x: {'met' if ours <= 2 * base else 'NOT met'}; "
        f"altar check (start-up and the plan's parse, which no run skips) {check:.2f} s, "
        f"CPU {cpu_check:.2f} s ({cpu_check / cpu_base:.2f}x status's CPU); first run storing "
        f"them {fill.wall_s:.1f} s, first serving them (writing the index) {first.wall_s:.2f} s"
    )
    ours = statistics.median(p.wall_s for p in in_place)
    cpu = statistics.median(p.cpu_s for p in in_place)
    print(
        f"{tasks} tasks fully cached, re-run in place (outputs still at their uris): altar run "
        f"{ours:.2f} s median vs altar status {base:.2f} s ({ours / base:.2f}x; CPU {cpu:.2f} s "
        f"vs {cpu_base:.2f} s, {cpu / cpu_base:.2f}x) target <= 2x: "
        f"{'met' if ours <= 2 * base else 'NOT met'}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--only", choices=["lookup", "serve", "plan"], action="append")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="altar-bench-cache-") as tmp:
        only = set(args.only or ["lookup", "serve", "plan"])
        if "lookup" in only:
            bench_lookup(Path(tmp), args.entries, args.repeat)
        if "serve" in only:
            bench_serve(Path(tmp), args.size_mib, args.repeat)
        if "plan" in only:
            bench_cached_plan(Path(tmp), args.tasks, args.repeat)


if __name__ == "__main__":
    main()
