"""Dispatcher overhead: a `local` invoke of `true` through run_adapter vs a bare interpreter.

Target: at most 1.5x the time of `python3 -c pass` with the same interpreter. The runtime's
bytecode is compiled first, as it is in an installed wheel.
Run: uv run python adapters/httk-workflow-adapters/benchmarks/bench_dispatcher.py
"""

from __future__ import annotations

import compileall
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import httk.workflow.adapter_runtime as runtime
from _table import report
from httk.workflow.adapters import add_remote, run_adapter

REPEAT = 40


def _cpu() -> float:
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def interleaved(
    actions: list[Callable[[], object]], repeat: int
) -> tuple[list[float], list[float]]:
    """Wall and CPU medians, alternating the actions so drifting load hits each alike.

    CPU time (this process and its children) is much less sensitive to other load on a
    shared machine than wall time, so both are reported.
    """
    wall: list[list[float]] = [[] for _ in actions]
    cpu: list[list[float]] = [[] for _ in actions]
    for action in actions:
        action()
    for _ in range(repeat):
        for index, action in enumerate(actions):
            started, cpu_started = time.perf_counter(), _cpu()
            action()
            wall[index].append(time.perf_counter() - started)
            cpu[index].append(_cpu() - cpu_started)
    return [statistics.median(s) for s in wall], [statistics.median(s) for s in cpu]


def main() -> int:
    compileall.compile_dir(Path(runtime.__file__).parent, quiet=1)
    with tempfile.TemporaryDirectory() as scratch:
        project = Path(scratch)
        (project / ".httk-project").mkdir()
        (project / ".httk-project" / "project.json").write_text("{}")
        os.environ["HTTK_CONFIG_HOME"] = str(project / "config")
        bundle = add_remote("bench", template="local", project=project)
        request = {"queue": "default", "argv": ["true"]}

        def through_adapter() -> None:
            assert run_adapter(bundle, "invoke", request)["returncode"] == 0

        def bare() -> None:
            subprocess.run([sys.executable, "-c", "pass"], check=True)

        def floor() -> None:
            # What any JSON-speaking runtime that starts a command must import.
            subprocess.run([sys.executable, "-c", "import json, subprocess"], check=True)

        (measured, baseline, least), (cpu_measured, cpu_baseline, cpu_least) = interleaved(
            [through_adapter, bare, floor], REPEAT
        )
    report(
        f"dispatcher overhead (median of {REPEAT}, interleaved; {sys.executable})",
        ("run_adapter local invoke `true`", measured),
        ("python3 -c pass", baseline),
        "<= 1.5x",
        measured / baseline <= 1.5,
        extra=[
            f"python3 -c 'import json, subprocess'{least * 1000:>16.1f} ms",
            f"CPU time: adapter {cpu_measured * 1000:.1f} ms, bare {cpu_baseline * 1000:.1f} ms, "
            f"json+subprocess floor {cpu_least * 1000:.1f} ms "
            f"(ratio {cpu_measured / cpu_baseline:.2f})",
        ],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
