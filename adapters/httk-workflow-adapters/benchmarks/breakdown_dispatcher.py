"""Where a `local` invoke's time goes: the dispatcher path taken apart, step by step.

Not a benchmark with a target (bench_dispatcher.py is that): each row is one command line,
and consecutive rows add one step, so their differences are the steps' costs. CPU time of
the children, median of interleaved repetitions.
Run: uv run python adapters/httk-workflow-adapters/benchmarks/breakdown_dispatcher.py
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
from pathlib import Path

import httk.workflow.adapter_runtime as runtime
from httk.workflow.adapters import add_remote
from httk.workflow.adapters.run import IMPORT_ROOT_VARIABLE, _child_environment, build_request

REPEAT = 60
BOOT = "import sys; sys.path.append(sys.argv.pop(1)); "


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    compileall.compile_dir(Path(runtime.__file__).parent, quiet=1)
    python = sys.executable
    with tempfile.TemporaryDirectory() as scratch:
        project = Path(scratch)
        (project / ".httk-project").mkdir()
        (project / ".httk-project" / "project.json").write_text("{}")
        os.environ["HTTK_CONFIG_HOME"] = str(project / "config")
        bundle = add_remote("bench", template="local", project=project)
        request = project / "request.json"
        payload = build_request(bundle.resolve(), "invoke", {"queue": "default", "argv": ["true"]})
        request.write_text(json.dumps(payload))
        environment = _child_environment()
        root = environment[IMPORT_ROOT_VARIABLE]
        rows: list[tuple[str, list[str]]] = [
            ("python3 -c pass (the baseline)", [python, "-c", "pass"]),
            ("python3 -I -S -c pass", [python, "-I", "-S", "-c", "pass"]),
            ("  + import os", [python, "-I", "-S", "-c", "import os"]),
            ("  + _json, select", [python, "-I", "-S", "-c", "import os, _json, select"]),
            (
                "  + the runtime's modules",
                [
                    python,
                    "-I",
                    "-S",
                    "-c",
                    BOOT + "from httk.workflow.adapter_runtime import operations",
                    root,
                ],
            ),
            (
                "  + the invoke, normal interpreter exit",
                [
                    python,
                    "-I",
                    "-S",
                    "-c",
                    BOOT
                    + "from httk.workflow.adapter_runtime import main; raise SystemExit(main())",
                    root,
                    str(request),
                ],
            ),
            (
                "  + leaving through os._exit (run_isolated)",
                [
                    python,
                    "-I",
                    "-S",
                    "-c",
                    BOOT + "from httk.workflow.adapter_runtime import run_isolated; run_isolated()",
                    root,
                    str(request),
                ],
            ),
            ("  + /bin/sh: the packaged adapter", [str(bundle / "adapter"), str(request)]),
            ("true alone", ["true"]),
            (
                "python3 -m httk.workflow.adapter_runtime (with site)",
                [python, "-m", "httk.workflow.adapter_runtime", str(request)],
            ),
        ]
        samples: list[list[float]] = [[] for _ in rows]
        for _ in range(REPEAT):
            for index, (_, argv) in enumerate(rows):
                started = _children_cpu()
                subprocess.run(argv, env=environment, stdout=subprocess.DEVNULL, check=True)
                samples[index].append(_children_cpu() - started)
    print(f"\ndispatcher breakdown (CPU ms, median of {REPEAT}, interleaved; {python})")
    for (label, _), values in zip(rows, samples, strict=True):
        print(f"  {label:<56}{statistics.median(values) * 1000:>7.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
