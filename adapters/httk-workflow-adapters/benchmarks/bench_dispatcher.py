"""Dispatcher overhead: a `local` invoke of `true` through run_adapter vs a bare interpreter.

Target: at most 1.5x the time of `python3 -c pass` with the same interpreter. The measured
path is the real one: run_adapter -> the bundle's packaged `adapter` (/bin/sh) -> the runtime
(python -I -S, as run_adapter asks) -> `true` -> one JSON result, parsed and checked. The
runtime's bytecode is compiled first, as it is in an installed wheel. The breakdown rows
show the parts: the adapter run directly (without run_adapter), and the interpreter's
start with -I -S alone.
Run: uv run python adapters/httk-workflow-adapters/benchmarks/bench_dispatcher.py
"""

from __future__ import annotations

import compileall
import json
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
from httk.workflow.adapters.run import _child_environment, build_request

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
        request_file = project / "request.json"
        request_file.write_text(json.dumps(build_request(bundle.resolve(), "invoke", request)))
        environment = _child_environment()

        def through_adapter() -> None:
            assert run_adapter(bundle, "invoke", request)["returncode"] == 0

        def bare() -> None:
            subprocess.run([sys.executable, "-c", "pass"], check=True)

        def adapter_alone() -> None:
            subprocess.run(
                [str(bundle / "adapter"), str(request_file)],
                env=environment,
                check=True,
                stdout=subprocess.DEVNULL,
            )

        def isolated() -> None:
            subprocess.run([sys.executable, "-I", "-S", "-c", "pass"], check=True)

        walls, cpus = interleaved([through_adapter, bare, adapter_alone, isolated], REPEAT)
    rows = [
        "run_adapter local invoke `true`",
        "python3 -c pass",
        "  breakdown: the adapter run directly",
        "  breakdown: python3 -I -S -c pass",
    ]
    report(
        f"dispatcher overhead (median of {REPEAT}, interleaved; {sys.executable})",
        (rows[0], walls[0]),
        (rows[1], walls[1]),
        "<= 1.5x",
        walls[0] / walls[1] <= 1.5,
        extra=[
            *(
                f"{row:<44}{wall * 1000:>10.1f} ms"
                for row, wall in zip(rows[2:], walls[2:], strict=True)
            ),
            "CPU time (this process and its children): "
            + ", ".join(f"{cpu * 1000:.1f}" for cpu in cpus)
            + f" ms in the order above (ratio {cpus[0] / cpus[1]:.2f})",
        ],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
