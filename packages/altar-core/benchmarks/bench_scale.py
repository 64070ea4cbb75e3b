"""Scale: plans of 1k to 100k instant tasks through the ``altar`` command (issue 24).

Every task runs on an instant backend (``InstantBackend`` below: a submit is the execution, and
the task has succeeded at its first poll), so only Altar's own cost is timed. Each figure comes
from a fresh ``altar`` process (this file re-run with ``--altar ARGS``, which registers the
backend and calls ``altar.execution.cli.command``): wall time, the process's peak RSS
(``os.wait4``), the bytes it wrote to files (``wchar`` of ``/proc/self/io`` less what went to
stdout and stderr), the run directory's size on disk, its stderr lines, and, for
``max_parallel = 10``, its fsync calls (``strace -f -c`` when installed, else ``os.fsync`` and
``os.fdatasync`` wrapped in the process).

Rows: flat plans through ``altar run``; ``altar status`` (and ``--json``), ``altar runs``,
``altar check`` and ``altar report`` on the largest; a chain (ms per link); a fan-in; tasks
with ``max_parallel = 10``; a run SIGKILLed at half its executions and resumed (the backend
appends each execution to a file, so the count survives the kill: every task must have run
once). Each row stands beside the issue's goal and, where the issue asks, a bare Python loop
doing the same bookkeeping (a dict update and a JSON line appended per task) as the baseline.

    uv run python packages/altar-core/benchmarks/bench_scale.py [--quick | --full]
        [--profile {run,status,runs,check,report,parallel}]... [--profile-tasks N] [--keep DIR]
        [--poll-interval S] [--chain-budget S]

``--quick`` (the default): 1k and 10k plans, a 200 chain, 1k fan-in and ``max_parallel``
rows, a kill at half of 5k: about two minutes. ``--full``: the issue's sizes (100k flat,
2,000 chain, 10k fan-in and ``max_parallel``, kill at half of 50k): 15 to 20 minutes
on 2 busy cores. ``--profile COMMAND`` prints instead the top 10 functions (cProfile) of that
``altar`` command on a 10k plan (``parallel``: ``altar run --max-parallel 10``). Always exits
0 unless a command fails outright or the resumed run executed a task twice or never. The backend
keeps the contract's default ``poll_interval_s`` (0.2 s), which bounds the chain and
``max_parallel`` rows' wall time; ``--poll-interval S`` sets another.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from altar.execution import (
    ContainerTaskSpec,
    ExecutionBackend,
    TaskHandle,
    TaskState,
    TaskStatus,
    Transfer,
)
from altar.execution.labels import LABEL_RUN, LABEL_SUBMISSION, LABEL_TASK
from altar.execution.uris import local_path_or_none

HERE = Path(__file__).resolve()
CHILD_TIMEOUT_S = 3600.0
KB, MB = 1024, 1024 * 1024


# -- the instant backend -----------------------------------------------------------------------


class InstantBackend(ExecutionBackend):
    """Every submit is an execution that has succeeded by the task's first poll.

    ``record`` (a file path) makes it a durable provider: each execution is one line appended
    with a single ``write`` (so a SIGKILL cannot tear it), a restarted process reads the lines
    back, adopts a submit whose ``altar.submission`` key it has seen and lists the run's
    objects. Without ``record`` it keeps nothing per task, so the process's memory is Altar's.
    """

    name: ClassVar[str] = "instant"
    input_digest_verification: ClassVar[Any] = "staging"
    adopts_submissions: ClassVar[bool] = True

    def __init__(self, *, record: str | None = None) -> None:
        self.record = record
        self.count = 0
        self.by_key: dict[str, TaskHandle] = {}
        self._fd: int | None = None
        if record is not None:
            for handle in read_record(Path(record)):
                self.by_key[handle.labels[LABEL_SUBMISSION]] = handle
            self._fd = os.open(record, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    async def submit(self, spec: ContainerTaskSpec) -> TaskHandle:
        key = spec.labels.get(LABEL_SUBMISSION, "")
        if key in self.by_key:
            return self.by_key[key]
        self.count += 1
        handle = TaskHandle(self.name, f"{os.getpid()}-{self.count}", dict(spec.labels))
        if self._fd is not None:
            os.write(
                self._fd, (json.dumps(handle.labels | {"id": handle.external_id}) + "\n").encode()
            )
            self.by_key[key] = handle
        return handle

    async def poll(self, handles: list[TaskHandle]) -> list[TaskStatus]:
        return [TaskStatus(handle, TaskState.SUCCEEDED) for handle in handles]

    async def collect_outputs(self, transfers: list[Transfer]) -> None:
        """Each declared output "was written" with its logical path as its bytes (bench_cache)."""
        write_outputs(transfers)

    async def list_submissions(self, run: str) -> list[TaskHandle] | None:
        if self.record is None:
            return None
        return [h for h in self.by_key.values() if h.labels.get(LABEL_RUN) == run]


def write_outputs(transfers: list[Transfer]) -> None:
    for transfer in transfers:
        local = local_path_or_none(transfer.uri)
        if local is not None:
            path = Path(local)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(transfer.logical_path + "\n")


def read_record(path: Path) -> Iterator[TaskHandle]:
    """The executions a record file holds, one handle each (a torn last line is skipped)."""
    if not path.exists():
        return
    for line in path.read_bytes().splitlines():
        try:
            labels = json.loads(line)
        except ValueError:
            continue
        external_id = labels.pop("id")
        yield TaskHandle(InstantBackend.name, external_id, labels)


def altar_child(argv: list[str]) -> int:
    """``altar ARGV`` with the instant backend registered (what every measured process runs)."""
    import atexit

    from altar.execution.cli.command import main
    from altar.execution.registry import register

    register("instant", InstantBackend)
    pause = os.environ.get("BENCH_POLL_INTERVAL")
    if pause:
        InstantBackend.poll_interval_s = float(pause)
    fsyncs = [0]
    if os.environ.get("BENCH_COUNT_FSYNC"):
        for name in ("fsync", "fdatasync"):
            real = getattr(os, name)

            def counted(fd: int, real: Callable[[int], None] = real) -> None:
                fsyncs[0] += 1
                real(fd)

            setattr(os, name, counted)
    facts = os.environ.get("BENCH_FACTS")
    if facts:

        def write_facts() -> None:
            sys.stdout.flush()
            sys.stderr.flush()
            io = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
            Path(facts).write_text(json.dumps({"wchar": int(io["wchar"]), "fsyncs": fsyncs[0]}))

        atexit.register(write_facts)
    profile = os.environ.get("BENCH_PROFILE")
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        try:
            return profiler.runcall(main, argv)
        finally:
            profiler.dump_stats(profile)
    return main(argv)


# -- plans ------------------------------------------------------------------------------------


def task(i: int, **extra: Any) -> dict[str, Any]:
    """One small task of a lab-like plan: four kinds, five folds."""
    return {
        "id": f"t{i:06d}",
        "kind": f"kind{i % 4}",
        "image": "busybox:latest",
        "command": ["true", str(i)],
        "labels": {"batch": "b1", "fold": str(i % 5)},
        **extra,
    }


def write_plan(path: Path, tasks: list[dict[str, Any]], **top: Any) -> Path:
    backend: dict[str, Any] = {"type": "instant"}
    if "record" in top:
        backend["options"] = {"record": top.pop("record")}
    path.write_text(json.dumps({"backend": backend, **top, "tasks": tasks}))
    return path


def flat(n: int) -> list[dict[str, Any]]:
    return [task(i) for i in range(n)]


def chain(n: int) -> list[dict[str, Any]]:
    return [task(i, after=[f"t{i - 1:06d}"] if i else []) for i in range(n)]


def fan_in(n: int) -> list[dict[str, Any]]:
    merge = {**task(n), "id": "merge", "kind": "merge", "after": [f"t{i:06d}" for i in range(n)]}
    return [*flat(n), merge]


# -- measuring one process --------------------------------------------------------------------


@dataclass
class Proc:
    """What one ``altar`` process cost."""

    code: int
    wall_s: float
    cpu_s: float
    rss_bytes: int
    written_bytes: int
    stdout_bytes: int
    stderr_lines: int
    fsyncs: int | None


def altar(
    argv: Sequence[str],
    work: Path,
    *,
    ok: Sequence[int] = (0,),
    strace: bool = False,
    count_fsync: bool = False,
    profile: Path | None = None,
    kill_when: Callable[[], bool] | None = None,
) -> Proc:
    """Run ``altar ARGV`` in a fresh process from ``work``; SIGKILL it once ``kill_when()``."""
    facts = work / "facts.json"
    facts.unlink(missing_ok=True)
    env = {**os.environ, "BENCH_FACTS": str(facts), "PYTHONDONTWRITEBYTECODE": "1"}
    if count_fsync:
        env["BENCH_COUNT_FSYNC"] = "1"
    if profile is not None:
        env["BENCH_PROFILE"] = str(profile)
    command = [sys.executable, str(HERE), "--altar", *argv]
    trace = work / "strace.txt"
    if strace:
        command = ["strace", "-f", "-c", "-o", str(trace), "-e", "trace=fsync,fdatasync", *command]
    out_path, err_path = work / "stdout.txt", work / "stderr.txt"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        start = time.perf_counter()
        child = subprocess.Popen(command, cwd=work, stdout=out, stderr=err, env=env)
        if kill_when is not None:
            while child.poll() is None and not kill_when():
                time.sleep(0.01)
            if child.poll() is None:
                os.kill(child.pid, signal.SIGKILL)
        # wait4 gives this child's own peak RSS (RUSAGE_CHILDREN would be the max of all)
        try:
            _, status, usage = os.wait4(child.pid, 0)
        except ChildProcessError:  # child.poll() above reaped it
            status, usage = 0, None
        wall = time.perf_counter() - start
        code = os.waitstatus_to_exitcode(status) if usage is not None else (child.returncode or 0)
        child.returncode = code
    stderr = err_path.read_bytes()
    if kill_when is None and code not in ok:
        sys.stderr.write(stderr.decode(errors="replace")[-3000:])
        raise SystemExit(f"altar {' '.join(argv)} exited with {code}")
    stdout_bytes = out_path.stat().st_size
    written = 0
    fsyncs = None
    if facts.exists():
        data = json.loads(facts.read_text())
        written = max(0, data["wchar"] - stdout_bytes - len(stderr))
        fsyncs = data["fsyncs"] if count_fsync else None
    if strace and trace.exists():
        fsyncs = sum(
            int(parts[3])
            for line in trace.read_text().splitlines()
            if len(parts := line.split()) >= 5 and parts[-1] in ("fsync", "fdatasync")
        )
    rss = usage.ru_maxrss * KB if usage is not None else 0
    cpu = usage.ru_utime + usage.ru_stime if usage is not None else 0.0
    return Proc(code, wall, cpu, rss, written, stdout_bytes, stderr.count(b"\n"), fsyncs)


def tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# -- the bare baseline ------------------------------------------------------------------------


def bare_loop(n: int, work: Path) -> float:
    """Seconds for a dict update and a JSON line appended per task: the least a run must do."""
    state: dict[str, dict[str, Any]] = {}
    path = work / "bare.jsonl"
    start = time.perf_counter()
    with path.open("w") as log:
        for i in range(n):
            task_id = f"t{i:06d}"
            record: dict[str, Any] = {"task": task_id, "state": "succeeded", "attempt": 1}
            state[task_id] = record
            log.write(json.dumps(record) + "\n")
    elapsed = time.perf_counter() - start
    path.unlink()
    return elapsed


def bare_status(n: int, work: Path) -> float:
    """Seconds to read such a log back and count tasks per state (the baseline of ``status``)."""
    path = work / "bare.jsonl"
    with path.open("w") as log:
        for i in range(n):
            log.write(json.dumps({"task": f"t{i:06d}", "state": "succeeded", "attempt": 1}) + "\n")
    start = time.perf_counter()
    counts: dict[str, int] = {}
    with path.open() as log:
        for line in log:
            state = json.loads(line)["state"]
            counts[state] = counts.get(state, 0) + 1
    elapsed = time.perf_counter() - start
    path.unlink()
    return elapsed


async def in_process_overhead(n: int, work: Path) -> tuple[float, float]:
    """ms per task of ``run_plan`` on the instant backend with no poll pause, less the bare loop.

    Best of three, as wall time and as this process's CPU time (steadier on a shared machine).
    """
    from altar.execution.plans.plan import plan_from_specs
    from altar.execution.run.runner import run_plan

    specs = [
        ContainerTaskSpec(kind="bench", image="busybox:latest", command=["true", str(i)])
        for i in range(n)
    ]
    wall = cpu = float("inf")
    for rep in range(3):
        start, start_cpu = time.perf_counter(), time.process_time()
        result = await run_plan(
            plan_from_specs(specs),
            InstantBackend(),
            run_dir=work / f"inproc-{rep}",
            poll_interval_s=0.0,
            max_poll_interval_s=0.0,
        )
        wall = min(wall, time.perf_counter() - start)
        cpu = min(cpu, time.process_time() - start_cpu)
        assert result.ok
    bare_wall = bare_cpu = float("inf")
    for _ in range(3):
        start_cpu = time.process_time()
        bare_wall = min(bare_wall, bare_loop(n, work))
        bare_cpu = min(bare_cpu, time.process_time() - start_cpu)
    return (wall - bare_wall) / n * 1000, (cpu - bare_cpu) / n * 1000


# -- the table --------------------------------------------------------------------------------


class Table:
    """Rows of figure / measured / CPU / goal / bare loop / ratio / verdict, printed as they come.

    CPU is the process's user + system time: on a shared machine it is the steadier figure of
    Altar's own cost, where wall time also counts waiting for the cores and the poll pauses.
    """

    def __init__(self) -> None:
        self.rows: list[tuple[str, ...]] = []
        print(
            f"{'figure':<48}{'measured':>12}{'CPU':>10}  {'goal (issue 24)':<26}"
            f"{'bare loop':>11}{'ratio':>8}"
        )

    def row(
        self,
        figure: str,
        measured: str,
        goal: str = "",
        met: bool | None = None,
        bare: str = "",
        ratio: float | None = None,
        cpu: float | None = None,
    ) -> None:
        verdict = "" if met is None else ("met" if met else "MISSED")
        ratio_text = f"{ratio:.0f}x" if ratio is not None else ""
        cpu_text = secs(cpu) if cpu is not None else ""
        cells = (figure, measured, cpu_text, goal, bare, ratio_text, verdict)
        self.rows.append(cells)
        line = f"{figure:<48}{measured:>12}{cpu_text:>10}  {goal:<26}{bare:>11}{ratio_text:>8}"
        print(f"{line}  {verdict}".rstrip())
        sys.stdout.flush()

    def note(self, text: str) -> None:
        self.rows.append((text,))
        print(f"  {text}")
        sys.stdout.flush()


def judged(size: int, at: int, goal: str, met: bool) -> tuple[str, bool | None]:
    """The goal and verdict for a row at ``size``; goals of another size are shown, not judged."""
    if size == at:
        return goal, met
    return f"({at // 1000}k: {goal})", None


def secs(value: float) -> str:
    return f"{value:.2f} s" if value >= 0.1 else f"{value * 1000:.1f} ms"


# -- the scenarios ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Sizes:
    flat: tuple[int, ...]
    chain: int
    chain_long: int | None
    fan_in: int
    parallel: int
    kill: int


QUICK = Sizes(
    flat=(1000, 10_000), chain=200, chain_long=None, fan_in=1000, parallel=1000, kill=5000
)
FULL = Sizes(
    flat=(1000, 10_000, 100_000),
    chain=200,
    chain_long=2000,
    fan_in=10_000,
    parallel=10_000,
    kill=50_000,
)
#: Longest a chain of ``chain_long`` may be predicted to take before it is left out.
CHAIN_BUDGET_S = 240.0


def flat_runs(table: Table, sizes: Sizes, work: Path) -> Path:
    """``altar run`` of every flat size; returns the largest run's folder of runs."""
    largest = work
    for n in sizes.flat:
        here = work / f"flat-{n}"
        here.mkdir()
        plan = write_plan(here / "plan.json", flat(n))
        proc = altar(["run", str(plan), "--run-dir", "runs/run"], here)
        run_dir = here / "runs" / "run"
        bare = bare_loop(n, here)
        ms = proc.wall_s / n * 1000
        label = f"{n // 1000}k tasks: altar run"
        wall, ratio = secs(proc.wall_s), proc.wall_s / bare
        table.row(f"{label}: wall", wall, "", None, secs(bare), ratio, proc.cpu_s)
        table.row(f"{label}: ms per task", f"{ms:.3f} ms", "", None, f"{bare / n * 1000:.4f} ms")
        table.row(f"{label}: CPU ms per task", f"{proc.cpu_s / n * 1000:.3f} ms")
        goal, met = judged(n, 100_000, "<= 200 MB RSS", proc.rss_bytes <= 200 * MB)
        table.row(f"{label}: peak RSS", f"{proc.rss_bytes / MB:.0f} MB", goal, met)
        per_task = proc.written_bytes / n
        goal, met = judged(n, 100_000, "<= 1 KB written/task", per_task <= KB)
        table.row(f"{label}: bytes written/task", f"{per_task:,.0f} B", goal, met)
        table.row(f"{label}: run directory on disk", f"{tree_bytes(run_dir) / MB:.1f} MB")
        table.row(f"{label}: stderr lines", f"{proc.stderr_lines:,}", "bounded, readable")
        largest = here
    return largest


def inspect_largest(table: Table, sizes: Sizes, here: Path) -> None:
    n = sizes.flat[-1]
    label = f"{n // 1000}k tasks"
    bare = bare_status(n, here)
    for flags in ([], ["--json"]):
        proc = altar(["status", "runs/run", *flags], here)
        goal, met = judged(n, 100_000, "<= 2 s", proc.wall_s <= 2.0)
        what = f"{label}: altar status {' '.join(flags)}".rstrip()
        table.row(what, secs(proc.wall_s), goal, met, secs(bare), proc.wall_s / bare, proc.cpu_s)
        table.row(f"{what}: peak RSS", f"{proc.rss_bytes / MB:.0f} MB")
    proc = altar(["runs", "runs"], here)
    goal, met = judged(n, 100_000, "<= 0.5 s", proc.wall_s <= 0.5)
    table.row(f"{label}: altar runs (one such run)", secs(proc.wall_s), goal, met, cpu=proc.cpu_s)
    proc = altar(["check", "plan.json"], here)
    goal, met = judged(n, 100_000, "<= 3 s", proc.wall_s <= 3.0)
    table.row(f"{label}: altar check", secs(proc.wall_s), goal, met, cpu=proc.cpu_s)
    report = here / "report.html"
    proc = altar(["report", "runs/run", "--output", str(report)], here)
    goal, met = judged(n, 100_000, "<= 5 MB HTML", report.stat().st_size <= 5 * MB)
    table.row(f"{label}: altar report: wall", secs(proc.wall_s), cpu=proc.cpu_s)
    table.row(
        f"{label}: altar report: HTML size", f"{report.stat().st_size / MB:.1f} MB", goal, met
    )
    table.row(f"{label}: altar report: peak RSS", f"{proc.rss_bytes / MB:.0f} MB")


def chains(table: Table, sizes: Sizes, work: Path, budget_s: float = CHAIN_BUDGET_S) -> None:
    lengths = [sizes.chain]
    if sizes.chain_long:
        lengths.append(sizes.chain_long)
    per_link = 0.0
    for n in lengths:
        if n != sizes.chain and per_link * n > budget_s:
            table.note(
                f"chain of {n:,}: not run, {per_link * 1000:.0f} ms per link predicts "
                f"{per_link * n:.0f} s (budget {budget_s:.0f} s: --chain-budget)"
            )
            continue
        here = work / f"chain-{n}"
        here.mkdir()
        plan = write_plan(here / "plan.json", chain(n))
        proc = altar(["run", str(plan), "--run-dir", "runs/run"], here)
        per_link = proc.wall_s / n
        bare = bare_loop(n, here) / n
        table.row(
            f"chain of {n:,}: ms per link",
            f"{per_link * 1000:.1f} ms",
            "<= 10 ms per link",
            per_link <= 0.010,
            f"{bare * 1000:.4f} ms",
            per_link / bare,
            proc.cpu_s,
        )
        table.row(f"chain of {n:,}: CPU ms per link", f"{proc.cpu_s / n * 1000:.2f} ms")


def fan_in_run(table: Table, sizes: Sizes, work: Path) -> None:
    n = sizes.fan_in
    here = work / f"fanin-{n}"
    here.mkdir()
    plan = write_plan(here / "plan.json", fan_in(n))
    proc = altar(["run", str(plan), "--run-dir", "runs/run"], here)
    bare = bare_loop(n + 1, here)
    table.row(
        f"fan-in of {n:,} into 1: altar run",
        secs(proc.wall_s),
        "",
        None,
        secs(bare),
        proc.wall_s / bare,
        proc.cpu_s,
    )
    table.row(f"fan-in of {n:,}: peak RSS", f"{proc.rss_bytes / MB:.0f} MB")


def parallel_run(table: Table, sizes: Sizes, work: Path) -> None:
    n = sizes.parallel
    here = work / f"parallel-{n}"
    here.mkdir()
    plan = write_plan(here / "plan.json", flat(n), max_parallel=10)
    proc = altar(["run", str(plan), "--run-dir", "runs/run"], here)
    ms = proc.wall_s / n * 1000
    bare = bare_loop(n, here) / n * 1000
    goal, met = judged(n, 10_000, "<= 1 ms per task", ms <= 1.0)
    table.row(
        f"{n // 1000}k tasks, max_parallel = 10: ms per task",
        f"{ms:.2f} ms",
        goal,
        met,
        f"{bare:.4f} ms",
        ms / bare,
        proc.cpu_s,
    )
    cpu_ms = proc.cpu_s / n * 1000
    goal, met = judged(n, 10_000, "<= 1 ms per task (own)", cpu_ms <= 1.0)
    table.row(
        f"{n // 1000}k tasks, max_parallel = 10: CPU ms per task", f"{cpu_ms:.2f} ms", goal, met
    )
    tool = "strace -f -c" if shutil.which("strace") else "os.fsync wrapped"
    shutil.rmtree(here / "runs")
    counted = altar(
        ["run", str(plan), "--run-dir", "runs/run"],
        here,
        strace=tool.startswith("strace"),
        count_fsync=not tool.startswith("strace"),
    )
    table.row(
        f"{n // 1000}k tasks, max_parallel = 10: fsyncs",
        f"{counted.fsyncs:,}" if counted.fsyncs is not None else "?",
        "batched per tick",
    )
    table.note(f"fsyncs counted by {tool} in a second run ({secs(counted.wall_s)} under it)")


def kill_and_resume(table: Table, sizes: Sizes, work: Path) -> bool:
    n = sizes.kill
    here = work / f"kill-{n}"
    here.mkdir()
    record = here / "executions.jsonl"
    plan = write_plan(here / "plan.json", flat(n), record=str(record))
    seen = [0, 0]  # bytes read so far, executions counted

    def half_done() -> bool:
        if not record.exists():
            return False
        with record.open("rb") as file:
            file.seek(seen[0])
            chunk = file.read()
        # count whole lines only; a line being written is read again next time
        whole = chunk.rfind(b"\n") + 1
        seen[0] += whole
        seen[1] += chunk[:whole].count(b"\n")
        return seen[1] >= n // 2

    argv = ["run", str(plan), "--run-dir", "runs/run"]
    killed = altar(argv, here, kill_when=half_done)
    before = sum(1 for _ in read_record(record))
    resumed = altar(argv, here)
    executions: dict[str, int] = {}
    for handle in read_record(record):
        executions[handle.labels[LABEL_TASK]] = executions.get(handle.labels[LABEL_TASK], 0) + 1
    twice = sum(1 for count in executions.values() if count > 1)
    never = n - len(executions)
    once = twice == 0 and never == 0
    table.row(
        f"{n // 1000}k run SIGKILLed at 50 %: killed after",
        secs(killed.wall_s),
        f"code {killed.code}",
    )
    table.row(f"{n // 1000}k run: executions before the kill", f"{before:,}")
    table.row(f"{n // 1000}k run: resume: wall", secs(resumed.wall_s))
    table.row(
        f"{n // 1000}k run: tasks executed twice / never",
        f"{twice:,} / {never:,}",
        "every task once",
        once,
    )
    return once


PROFILED = ("run", "status", "runs", "check", "report", "parallel")


def print_profile(commands: list[str], work: Path, tasks: int = 10_000) -> None:
    """cProfile of each ``altar`` command on a ``tasks``-task plan: top 10 by own time."""
    import pstats

    here = work / "profile"
    here.mkdir()
    write_plan(here / "plan.json", flat(tasks))
    argvs = {
        "run": ["run", "plan.json", "--run-dir", "runs/run"],
        "status": ["status", "runs/run"],
        "runs": ["runs", "runs"],
        "check": ["check", "plan.json"],
        "report": ["report", "runs/run", "--output", "report.html"],
        "parallel": ["run", "plan.json", "--run-dir", "runs/mp10", "--max-parallel", "10"],
    }
    if "run" not in commands:
        altar(argvs["run"], here)
    for command in PROFILED:
        if command not in commands:
            continue
        if command == "run":
            shutil.rmtree(here / "runs", ignore_errors=True)
        stats = here / f"{command}.prof"
        proc = altar(argvs[command], here, profile=stats)
        print(
            f"\naltar {command} on {tasks:,} tasks under cProfile: {secs(proc.wall_s)} wall, "
            f"{secs(proc.cpu_s)} CPU; top 10 by own time"
        )
        pstats.Stats(str(stats)).sort_stats("tottime").print_stats(10)
        # asyncio's frames lead any cumulative list: show altar's own functions
        print(f"altar {command}: top 15 of altar's functions by cumulative time")
        pstats.Stats(str(stats)).sort_stats("cumulative").print_stats(r"altar[/\\]execution", 15)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--altar"]:
        return altar_child(argv[1:])
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="1k and 10k plans (the default)")
    size.add_argument("--full", action="store_true", help="the issue's sizes, up to 100k")
    parser.add_argument(
        "--profile",
        choices=PROFILED,
        action="append",
        help="instead of the table: cProfile of this altar command (repeatable; parallel: "
        "altar run --max-parallel 10)",
    )
    parser.add_argument(
        "--profile-tasks", metavar="N", type=int, default=10_000, help="plan size for --profile"
    )
    parser.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (default: a temp)")
    parser.add_argument(
        "--chain-budget",
        metavar="S",
        type=float,
        default=CHAIN_BUDGET_S,
        help=f"run the long chain if it would take at most S s (default {CHAIN_BUDGET_S:g})",
    )
    parser.add_argument(
        "--poll-interval",
        metavar="S",
        type=float,
        help=f"the instant backend's poll_interval_s (default {InstantBackend.poll_interval_s})",
    )
    args = parser.parse_args(argv)
    sizes = FULL if args.full else QUICK
    if args.poll_interval is not None:  # the measured processes read it
        os.environ["BENCH_POLL_INTERVAL"] = str(args.poll_interval)

    if args.keep:
        work = Path(args.keep).resolve()
        work.mkdir(parents=True, exist_ok=False)
    else:
        work = Path(tempfile.mkdtemp(prefix="altar-bench-scale-"))
    try:
        load = os.getloadavg()[0]
        pause = args.poll_interval if args.poll_interval is not None else 0.2
        print(
            f"scale benchmark ({'full' if args.full else 'quick'}), instant backend "
            f"(poll_interval_s {pause:g}), {os.cpu_count()} cores, load {load:.1f}, work in {work}"
        )
        if args.profile:
            print_profile(args.profile, work, args.profile_tasks)
            return 0
        table = Table()
        overhead, overhead_cpu = asyncio.run(in_process_overhead(1000, work))
        table.row(
            "1k tasks: runner overhead (in process, no pause)",
            f"{overhead:.3f} ms",
            "keep <= 0.3 ms per task",
            overhead <= 0.3,
        )
        table.row(
            "1k tasks: runner overhead, CPU time",
            f"{overhead_cpu:.3f} ms",
            "keep <= 0.3 ms per task",
            overhead_cpu <= 0.3,
        )
        largest = flat_runs(table, sizes, work)
        inspect_largest(table, sizes, largest)
        chains(table, sizes, work, args.chain_budget)
        fan_in_run(table, sizes, work)
        parallel_run(table, sizes, work)
        once = kill_and_resume(table, sizes, work)
        print(f"load average at the end: {os.getloadavg()[0]:.1f}")
        return 0 if once else 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
