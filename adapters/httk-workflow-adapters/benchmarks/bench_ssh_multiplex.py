"""ssh-slurm invokes of `true`: a new connection each, ssh_multiplex, and ssh_multiplex with
ssh_agent, on a quiet and on a loaded machine.

How it measures: three remotes on the test sshd, `plain` (a new connection per operation),
`mux` (`ssh_multiplex`: one master connection, a new session and login shell per command) and
`agent` (`ssh_multiplex` + `ssh_agent`: commands run by one process on the target, reached
through the master). Each round runs one `run_adapter(invoke, ["true"])` on each, in an order
that rotates every round, so drifting load from other work on a shared machine hits all alike.
Every call is timed on its own and the medians per call are compared; masters and the agent
are started before the measured rounds. The "loaded" phase repeats the rounds while one
CPU-bound busy loop per core runs (a load generator started by the benchmark and stopped
after it).

Also printed: the remote login shell alone (`$SHELL -c true` started as sshd starts it, with
`SSH_CLIENT` set so bash reads ~/.bashrc), which `mux` still pays once per command.

Target: multiplexed commands at least 2x faster per call under load. Needs the test sshd
(scripts/services up). Run:
uv run python adapters/httk-workflow-adapters/benchmarks/bench_ssh_multiplex.py
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _services import ssh_settings
from httk.workflow.adapters import add_remote, run_adapter

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "30"))


def _spin() -> None:  # pragma: no cover - runs in the load generator's processes
    while True:
        pass


@contextmanager
def cpu_load(processes: int) -> Iterator[None]:
    """One busy loop per core for the duration of the block."""
    workers = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(processes)]
    for worker in workers:
        worker.start()
    try:
        time.sleep(0.5)
        yield
    finally:
        for worker in workers:
            worker.kill()
        for worker in workers:
            worker.join()


def _timed(bundle: Path) -> float:
    started = time.perf_counter()
    result = run_adapter(bundle, "invoke", {"queue": "default", "argv": ["true"]})
    elapsed = time.perf_counter() - started
    assert result["returncode"] == 0, result["stderr"]
    return elapsed


CASES = {
    "plain": {},
    "mux": {"ssh_multiplex": "120"},
    "agent": {"ssh_multiplex": "120", "ssh_agent": "yes"},
}


def measure(bundles: dict[str, Path]) -> dict[str, float]:
    """Median seconds per call of each case, interleaved call by call."""
    names = list(CASES)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for round_number in range(ROUNDS):
        shift = round_number % len(names)
        for name in names[shift:] + names[:shift]:
            samples[name].append(_timed(bundles[name]))
    return {name: statistics.median(times) for name, times in samples.items()}


def login_shell_cost(host: str) -> float:
    """Median seconds of the remote login shell alone, as sshd starts it for a command."""
    shell = (
        subprocess.run(
            ["ssh", host, "printf", "%s", "$SHELL"], capture_output=True, text=True, check=True
        ).stdout
        or "/bin/sh"
    )
    times = []
    for _ in range(5):
        started = time.perf_counter()
        subprocess.run(
            [shell, "-c", "true"],
            env={**os.environ, "SSH_CLIENT": "127.0.0.1 1 22", "SHLVL": "0"},
            check=True,
        )
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> int:
    found = ssh_settings()
    if found is None:
        print("ssh multiplexing: SKIPPED (no test sshd; run scripts/services up)")
        return 0
    host, wrapper = found
    os.environ["PATH"] = f"{wrapper}{os.pathsep}{os.environ['PATH']}"
    scratch = Path(tempfile.mkdtemp(prefix="bench", dir="/tmp"))  # short socket paths
    os.environ["XDG_RUNTIME_DIR"] = str(scratch)
    results: dict[str, dict[str, float]] = {}
    try:
        (scratch / ".httk-project").mkdir()
        (scratch / ".httk-project" / "project.json").write_text("{}")
        os.environ["HTTK_CONFIG_HOME"] = str(scratch / "config")
        bundles = {}
        for name, extra in CASES.items():
            bundle = add_remote(name, template="ssh-slurm", project=scratch)
            metadata = json.loads((bundle / "remote.json").read_text())
            metadata["queues"]["default"] = {"host": host, **extra}
            (bundle / "remote.json").write_text(json.dumps(metadata))
            bundles[name] = bundle
        _timed(bundles["mux"])  # start the masters and the agent outside the measured rounds
        _timed(bundles["agent"])
        results["quiet"] = measure(bundles)
        with cpu_load(os.cpu_count() or 1):
            results["loaded"] = measure(bundles)
        shell = login_shell_cost(host)
    finally:
        from httk.workflow.adapter_runtime.targets import close_masters
        from httk.workflow.adapters import queue_settings

        for name in ("mux", "agent"):
            bundle = scratch / ".httk-project" / "remotes" / name
            if bundle.is_dir():
                close_masters(queue_settings(bundle, "default"))
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"\n{ROUNDS} ssh invokes of `true` per case, interleaved call by call; medians per call")
    print(f"  {'phase':<8}{'plain':>10}{'mux':>10}{'agent':>10}{'mux x':>9}{'agent x':>9}")
    for phase, row in results.items():
        plain, mux, agent = row["plain"], row["mux"], row["agent"]
        print(
            f"  {phase:<8}{plain * 1000:>8.1f}ms{mux * 1000:>8.1f}ms{agent * 1000:>8.1f}ms"
            f"{plain / mux:>8.2f}x{plain / agent:>8.2f}x"
        )
    print(f"  remote login shell alone (`$SHELL -c true` as sshd runs it): {shell * 1000:.1f} ms")
    loaded = results["loaded"]
    for name in ("mux", "agent"):
        met = loaded["plain"] / loaded[name] >= 2
        print(f"  {name}: target >= 2x faster per call under load   {'met' if met else 'MISSED'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
