"""Dispatcher overhead: a `local` invoke of `true` through run_adapter vs a bare interpreter.

Target: at most 1.5x the time of `python3 -c pass` with the same interpreter. The runtime's
bytecode is compiled first, as it is in an installed wheel.
Run: uv run python adapters/httk-workflow-adapters/benchmarks/bench_dispatcher.py
"""

from __future__ import annotations

import compileall
import os
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


def interleaved(actions: list[Callable[[], object]], repeat: int) -> list[float]:
    """Medians, alternating the actions so drifting machine load hits each alike."""
    samples: list[list[float]] = [[] for _ in actions]
    for action in actions:
        action()
    for _ in range(repeat):
        for index, action in enumerate(actions):
            started = time.perf_counter()
            action()
            samples[index].append(time.perf_counter() - started)
    return [statistics.median(s) for s in samples]


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

        measured, baseline = interleaved([through_adapter, bare], REPEAT)
    report(
        f"dispatcher overhead (median of {REPEAT}, interleaved; {sys.executable})",
        ("run_adapter local invoke `true`", measured),
        ("python3 -c pass", baseline),
        "<= 1.5x",
        measured / baseline <= 1.5,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
