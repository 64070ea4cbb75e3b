"""20 consecutive ssh-slurm invokes of `true`, with and without ssh_multiplex.

Target: at least 2x faster with multiplexing. Needs the test sshd (scripts/services up).
Run: uv run python adapters/httk-workflow-adapters/benchmarks/bench_ssh_multiplex.py
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _services import ssh_settings
from _table import median_seconds, report
from httk.workflow.adapters import add_remote, run_adapter

INVOKES = 20
REPEAT = 5


def main() -> int:
    found = ssh_settings()
    if found is None:
        print("ssh multiplexing: SKIPPED (no test sshd; run scripts/services up)")
        return 0
    host, wrapper = found
    os.environ["PATH"] = f"{wrapper}{os.pathsep}{os.environ['PATH']}"
    scratch = Path(tempfile.mkdtemp(prefix="bench"))
    os.environ["XDG_RUNTIME_DIR"] = str(scratch)
    try:
        (scratch / ".httk-project").mkdir()
        (scratch / ".httk-project" / "project.json").write_text("{}")
        os.environ["HTTK_CONFIG_HOME"] = str(scratch / "config")
        bundles = {}
        for name, extra in (("plain", {}), ("mux", {"ssh_multiplex": "60"})):
            bundle = add_remote(name, template="ssh-slurm", project=scratch)
            metadata = json.loads((bundle / "remote.json").read_text())
            metadata["queues"]["default"] = {"host": host, **extra}
            (bundle / "remote.json").write_text(json.dumps(metadata))
            bundles[name] = bundle

        def sequence(bundle: Path) -> None:
            for _ in range(INVOKES):
                result = run_adapter(bundle, "invoke", {"queue": "default", "argv": ["true"]})
                assert result["returncode"] == 0, result["stderr"]

        # Alternate the two so drifting load on a shared machine hits both alike. The first
        # multiplexed sequence pays for starting the master; it is part of what is measured.
        plain_times, mux_times = [], []
        for _ in range(REPEAT):
            plain_times.append(
                median_seconds(lambda: sequence(bundles["plain"]), repeat=1, warmup=0)
            )
            mux_times.append(median_seconds(lambda: sequence(bundles["mux"]), repeat=1, warmup=0))
        plain, mux = statistics.median(plain_times), statistics.median(mux_times)
        started = time.perf_counter()
        subprocess.run(["ssh", "-o", "BatchMode=yes", host, "true"], check=True)
        bare = time.perf_counter() - started
    finally:
        for socket in (scratch / f"httk-ssh-{os.getuid()}").glob("*"):
            if not socket.name.endswith(".lock"):
                subprocess.run(
                    ["ssh", "-o", f"ControlPath={socket}", "-O", "exit", host],
                    capture_output=True,
                    check=False,
                )
        shutil.rmtree(scratch, ignore_errors=True)
    speedup = plain / mux
    report(
        f"{INVOKES} consecutive ssh invokes (median of {REPEAT} sequences, interleaved)",
        ("with ssh_multiplex", mux),
        ("without (a new connection each)", plain),
        ">= 2x faster with (ratio <= 0.50)",
        speedup >= 2,
        extra=[
            f"per operation: {mux / INVOKES * 1000:.1f} ms with, "
            f"{plain / INVOKES * 1000:.1f} ms without; one bare `ssh true`: {bare * 1000:.1f} ms",
            f"speedup {speedup:.2f}x",
        ],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
