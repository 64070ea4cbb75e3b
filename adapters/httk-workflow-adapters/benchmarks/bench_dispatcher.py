"""Dispatcher overhead: a `local` invoke of `true` through run_adapter vs a bare interpreter.

Target: at most 1.5x the time of `python3 -c pass` with the same interpreter.
Run: uv run python adapters/httk-workflow-adapters/benchmarks/bench_dispatcher.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _table import median_seconds, report
from httk.workflow.adapters import add_remote, run_adapter

REPEAT = 25


def main() -> int:
    with tempfile.TemporaryDirectory() as scratch:
        project = Path(scratch)
        (project / ".httk-project").mkdir()
        (project / ".httk-project" / "project.json").write_text("{}")
        os.environ["HTTK_CONFIG_HOME"] = str(project / "config")
        bundle = add_remote("bench", template="local", project=project)
        request = {"queue": "default", "argv": ["true"]}

        def through_adapter() -> None:
            result = run_adapter(bundle, "invoke", request)
            assert result["returncode"] == 0, json.dumps(result)

        def bare() -> None:
            subprocess.run([sys.executable, "-c", "pass"], check=True)

        measured = median_seconds(through_adapter, repeat=REPEAT, warmup=3)
        baseline = median_seconds(bare, repeat=REPEAT, warmup=3)
    ratio = measured / baseline
    report(
        f"dispatcher overhead ({REPEAT} repetitions, {sys.executable})",
        ("run_adapter local invoke `true`", measured),
        ("python3 -c pass", baseline),
        "<= 1.5x",
        ratio <= 1.5,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
