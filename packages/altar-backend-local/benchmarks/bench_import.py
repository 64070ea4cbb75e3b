"""Start-up cost of the local backend: ``altar backends`` with and without it, and its import.

``altar backends`` imports every installed backend to report it ``ok``. Before the docker SDK
was imported lazily, the local backend alone added ~0.3 s to that command (issue 12). This runs
each variant in a fresh interpreter, alternating them so machine load hits both alike, and
prints medians and the cost the local backend adds:

- ``altar backends``, every backend installed;
- ``altar backends`` with the ``local`` entry point hidden (the baseline);
- ``python -c pass``: the interpreter's own start, the floor under every variant;
- ``import altar.backends.local`` vs ``import altar.execution`` (the package alone);
- ``import altar.backends.local.sdk_runtime`` (what the SDK costs once the real runtime is built).

    uv run python packages/altar-backend-local/benchmarks/bench_import.py [--runs 15]

Target (issue 12): ``altar backends`` with every backend installed ≤ 0.3 s; the local backend
adds no docker SDK import.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

TARGET_S = 0.3

_HIDE_LOCAL = """
import sys
from importlib import metadata
real = metadata.entry_points
def entry_points(**kwargs):
    found = real(**kwargs)
    if kwargs.get("group") == "altar.execution_backends":
        return metadata.EntryPoints(ep for ep in found if ep.name != "local")
    return found
metadata.entry_points = entry_points
from altar.execution.cli.command import main
sys.argv = ["altar", "backends"]
try:
    main()
except SystemExit:
    pass
"""
_ALL = _HIDE_LOCAL.replace('ep.name != "local"', "True")
_DOCKER_LOADED = "import sys, altar.backends.local; print('docker' in sys.modules)"

VARIANTS: dict[str, list[str]] = {
    "altar backends (every backend installed)": ["-c", _ALL],
    "altar backends (local hidden: baseline)": ["-c", _HIDE_LOCAL],
    "python -c pass (interpreter floor)": ["-c", "pass"],
    "import altar.execution": ["-c", "import altar.execution"],
    "import altar.backends.local": ["-c", "import altar.backends.local"],
    "import altar.backends.local.sdk_runtime": ["-c", "import altar.backends.local.sdk_runtime"],
}


def once(args: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, *args], check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    for argv in VARIANTS.values():  # warm the page cache and .pyc files once
        once(argv)
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for _ in range(args.runs):
        for name, argv in VARIANTS.items():
            times[name].append(once(argv))
    medians = {name: statistics.median(values) for name, values in times.items()}
    loaded = subprocess.run(
        [sys.executable, "-c", _DOCKER_LOADED], check=True, capture_output=True, text=True
    ).stdout.strip()
    print(f"start-up, median of {args.runs} fresh interpreters each")
    print(f"| {'variant':<44} | {'median s':>8} |")
    print(f"|{'-' * 46}|{'-' * 10}|")
    for name, median in medians.items():
        print(f"| {name:<44} | {median:8.3f} |")
    names = list(VARIANTS)
    with_local, without = medians[names[0]], medians[names[1]]
    package = medians[names[4]] - medians[names[3]]
    print()
    print(
        f"the local backend adds {with_local - without:+.3f} s to `altar backends` "
        f"({with_local / without:.2f}x the baseline); its package import adds {package:+.3f} s "
        f"over altar.execution; docker SDK imported by `import altar.backends.local`: {loaded}"
    )
    met = with_local <= TARGET_S and loaded == "False"
    print(
        f"target: `altar backends` <= {TARGET_S} s with every backend installed, no SDK import: "
        f"{with_local:.3f} s: {'met' if met else 'MISSED'}"
    )


if __name__ == "__main__":
    main()
