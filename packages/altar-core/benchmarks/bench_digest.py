"""Benchmarks for altar.execution.digests.digest against the tools people would otherwise use.

Run: ``uv run python packages/altar-core/benchmarks/bench_digest.py [--repeat N] [--scale F]``.
Prints one table: our median, the baseline's median, the ratio, the target, and MET or MISSED.
Always exits 0. Files live under ``$ALTAR_BENCH_DIR`` (default: a fresh folder in /tmp) and
are removed afterwards; about 11 GiB at scale 1. Every file is read once before timing, so all
numbers are for warm files (page cache); the cache is never dropped, as that needs root and
disturbs every other process on the machine. Writers call ``sync`` before each repetition so
one repetition's dirty pages do not slow the next. Competing commands run round-robin, one
repetition each in turn, so they see the same background load.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from altar.execution.digests.digest import (
    copy_and_verify,
    has_verification_record,
    sha256_file,
    verify_file_digest,
    verify_files,
    verify_files_script,
)

MiB = 1 << 20


@dataclass
class Timing:
    wall: float  # median seconds
    cpu: float  # median user+sys seconds of this process and its children


@dataclass
class Row:
    name: str
    ours: Timing
    baseline_name: str
    baseline: Timing
    ratio: float
    target: str
    met: bool


def _cpu() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def interleaved(
    actions: dict[str, Callable[[], object]],
    repeat: int,
    setup: Callable[[], object] | None = None,
) -> dict[str, Timing]:
    """Median timings, running the actions round-robin so they share the machine's load."""
    walls: dict[str, list[float]] = {name: [] for name in actions}
    cpus: dict[str, list[float]] = {name: [] for name in actions}
    for _ in range(repeat):
        for name, action in actions.items():
            if setup is not None:
                setup()
            cpu, start = _cpu(), time.perf_counter()
            action()
            walls[name].append(time.perf_counter() - start)
            cpus[name].append(_cpu() - cpu)
    return {
        name: Timing(statistics.median(walls[name]), statistics.median(cpus[name]))
        for name in actions
    }


def progress(message: str) -> None:
    print(f"  ... {message}", file=sys.stderr, flush=True)


def run(*argv: str) -> None:
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)


def write_file(path: Path, size: int, seed: bytes) -> str:
    """Pseudo-random bytes (a random block made unique per file), returning its digest."""
    block = os.urandom(min(size, 64 * MiB)) if size else b""
    digest = hashlib.sha256()
    with path.open("wb") as handle:
        left = size
        first = True
        while left:
            part = block[: min(left, len(block))]
            if first:
                part = seed + part[len(seed) :]
                first = False
            handle.write(part)
            digest.update(part)
            left -= len(part)
    return "sha256:" + digest.hexdigest()


def warm(*paths: Path) -> None:
    for path in paths:
        with path.open("rb") as handle:
            while handle.read(8 * MiB):
                pass


def settle(*paths: Path) -> None:
    latest = max(os.stat(path).st_ctime_ns // 1_000_000_000 for path in paths)
    delay = latest + 1.05 - time.time()
    if delay > 0:
        time.sleep(delay)


def remove(*paths: Path) -> None:
    for path in paths:
        path.unlink(missing_ok=True)


def sync() -> None:
    os.sync()


def bench_hash(root: Path, size: int, repeat: int) -> tuple[list[Row], Path, str, Timing]:
    progress(f"hashing {size // MiB} MiB")
    big = root / "big.bin"
    expected = write_file(big, size, b"hash")
    warm(big)
    timings = interleaved(
        {
            "ours": lambda: sha256_file(big),
            "openssl": lambda: run("openssl", "dgst", "-sha256", str(big)),
            "sha256sum": lambda: run("sha256sum", str(big)),
        },
        repeat,
    )
    ours, openssl, coreutils = timings["ours"], timings["openssl"], timings["sha256sum"]
    label = f"sha256_file {size // MiB} MiB"
    rows = [
        Row(
            label,
            ours,
            "openssl dgst -sha256",
            openssl,
            openssl.wall / ours.wall,
            "throughput >= 0.9x",
            openssl.wall / ours.wall >= 0.9,
        ),
        Row(
            label,
            ours,
            "sha256sum",
            coreutils,
            coreutils.wall / ours.wall,
            "throughput (info)",
            True,
        ),
    ]
    return rows, big, expected, ours


def bench_record(big: Path, expected: str, hashing: Timing, repeat: int) -> Row:
    progress("verify_file_digest with a current record")
    settle(big)
    verify_file_digest(big, expected)
    if not has_verification_record(big, expected):
        print("bench_digest: no record was written; the row below hashes", file=sys.stderr)
    calls = 2000

    def batch() -> None:
        for _ in range(calls):
            verify_file_digest(big, expected)

    total = interleaved({"batch": batch}, repeat)["batch"]
    per_call = Timing(total.wall / calls, total.cpu / calls)
    speedup = hashing.wall / per_call.wall
    return Row(
        "verify_file_digest, recorded",
        per_call,
        "hashing the file",
        hashing,
        speedup,
        "faster >= 1000x",
        speedup >= 1000,
    )


def bench_copy(root: Path, big: Path, expected: str, repeat: int) -> list[Row]:
    progress(f"copy and verify {big.stat().st_size // MiB} MiB")
    ours_dest, cp_dest = root / "copy-ours.bin", root / "copy-cp.bin"

    def setup() -> None:
        remove(ours_dest, cp_dest)
        os.sync()  # start each repetition without the previous one's dirty pages

    def cp_then_hash() -> None:
        run("cp", str(big), str(cp_dest))
        if sha256_file(cp_dest) != expected:
            raise AssertionError("cp produced different bytes")

    def cp_then_sha256sum() -> None:
        run("cp", str(big), str(cp_dest))
        run("sha256sum", str(cp_dest))

    timings = interleaved(
        {
            "ours": lambda: copy_and_verify(big, ours_dest, expected),
            "cp+hash": cp_then_hash,
            "cp+sha256sum": cp_then_sha256sum,
        },
        repeat,
        setup,
    )
    remove(ours_dest, cp_dest)
    ours, in_process, coreutils = timings["ours"], timings["cp+hash"], timings["cp+sha256sum"]
    label = f"copy_and_verify {big.stat().st_size // MiB} MiB"
    return [
        Row(
            label,
            ours,
            "cp + hashlib of the copy",
            in_process,
            ours.wall / in_process.wall,
            "time <= 1.0x",
            ours.wall / in_process.wall <= 1.0,
        ),
        Row(
            label,
            ours,
            "cp + sha256sum",
            coreutils,
            ours.wall / coreutils.wall,
            "time <= 0.3x",
            ours.wall / coreutils.wall <= 0.3,
        ),
    ]


def bench_parallel(root: Path, size: int, count: int, repeat: int) -> Row:
    progress(f"verify_files {count} x {size // MiB} MiB")
    items = []
    for index in range(count):
        path = root / f"part-{index}.bin"
        items.append((path, write_file(path, size, f"part{index}".encode())))
    warm(*(path for path, _ in items))

    def sequential() -> None:
        for path, expected in items:
            verify_file_digest(path, expected, trust_record=False, record=False)

    timings = interleaved(
        {
            "ours": lambda: verify_files(items, trust_records=False, record=False),
            "sequential": sequential,
        },
        repeat,
    )
    remove(*(path for path, _ in items))
    ours, baseline = timings["ours"], timings["sequential"]
    speedup = baseline.wall / ours.wall
    return Row(
        f"verify_files {count} x {size // MiB} MiB",
        ours,
        "one after another",
        baseline,
        speedup,
        "faster >= 1.6x",
        speedup >= 1.6,
    )


def bench_script(root: Path, size: int, count: int, repeat: int) -> list[Row]:
    progress(f"verify_files_script over {count} x {size // MiB} MiB")
    folder = root / "script"
    folder.mkdir()
    lines = []
    paths = []
    for index in range(count):
        path = folder / f"input {index}.bin"  # a space, as real names have
        hexd = write_file(path, size, f"input{index}".encode()).removeprefix("sha256:")
        lines.append(f"{hexd}  {path}")
        paths.append(path)
    check_file = folder / "SHA256SUMS"
    check_file.write_text("".join(line + "\n" for line in lines))
    warm(*paths)
    settle(*paths)
    script = verify_files_script()
    shells = {"dash + coreutils": ["dash", "-c"]}
    if shutil.which("busybox"):
        shells["busybox sh"] = ["busybox", "sh", "-c"]
    first = subprocess.run(["dash", "-c", script, "verify-inputs", *lines], capture_output=True)
    recorded = sum(
        has_verification_record(path, "sha256:" + line[:64])
        for path, line in zip(paths, lines, strict=True)
    )
    if first.returncode != 0 or recorded != count:
        print(f"bench_digest: script wrote {recorded}/{count} records", file=sys.stderr)
    actions: dict[str, Callable[[], object]] = {
        "sha256sum -c": lambda: run("sha256sum", "--quiet", "-c", str(check_file))
    }
    for name, argv in shells.items():
        actions[name] = functools.partial(run, *argv, script, "verify-inputs", *lines)
    timings = interleaved(actions, repeat)
    shutil.rmtree(folder)
    baseline = timings["sha256sum -c"]
    return [
        Row(
            f"verify_files_script {count} x {size // MiB} MiB, recorded ({name})",
            timings[name],
            "sha256sum -c",
            baseline,
            timings[name].wall / baseline.wall,
            "time <= 0.05x",
            timings[name].wall / baseline.wall <= 0.05,
        )
        for name in shells
    ]


def _seconds(value: float) -> str:
    return f"{value:.6f}" if value < 0.01 else f"{value:.3f}"


def print_table(rows: list[Row]) -> None:
    header = (
        "benchmark",
        "ours s",
        "(cpu s)",
        "baseline",
        "baseline s",
        "(cpu s)",
        "ratio",
        "target",
        "result",
    )
    table = [header] + [
        (
            row.name,
            _seconds(row.ours.wall),
            _seconds(row.ours.cpu),
            row.baseline_name,
            _seconds(row.baseline.wall),
            _seconds(row.baseline.cpu),
            f"{row.ratio:.3f}" if row.ratio < 100 else f"{row.ratio:.0f}",
            row.target,
            "MET" if row.met else "MISSED",
        )
        for row in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    for index, line in enumerate(table):
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        )
        if index == 0:
            print("  ".join("-" * width for width in widths))
    print("ratios compare wall-clock medians; cpu s is user+sys, for a machine under load")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="repetitions per measurement")
    parser.add_argument("--scale", type=float, default=1.0, help="shrink sizes for a quick run")
    args = parser.parse_args()
    for tool in ("openssl", "sha256sum", "cp", "dash"):
        if shutil.which(tool) is None:
            print(f"bench_digest: {tool} is not on PATH; skipped")
            return 0
    base = os.environ.get("ALTAR_BENCH_DIR")
    root = Path(tempfile.mkdtemp(prefix="altar-bench-digest-", dir=base))
    scale = args.scale
    try:
        print(f"bench_digest: files under {root}; all warm in the page cache (never dropped);")
        load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
        print(f"  medians of {args.repeat} interleaved repetitions; {os.cpu_count()} CPUs;")
        print(f"  load average at start {load} (other processes share these CPUs)")
        rows, big, expected, hashing = bench_hash(root, int(1024 * MiB * scale), args.repeat)
        rows.append(bench_record(big, expected, hashing, args.repeat))
        rows += bench_copy(root, big, expected, args.repeat)
        remove(big)
        rows.append(bench_parallel(root, int(256 * MiB * scale), 4, args.repeat))
        rows += bench_script(root, int(64 * MiB * scale), 100, max(3, args.repeat // 2))
        print_table(rows)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
