"""A 1 GiB push through run_adapter against plain rsync over the same ssh.

Target: at most 1.05x the time of `rsync --archive -e ssh SRC/ HOST:DST/`.
Needs the test sshd (scripts/services up). Set HTTK_BENCH_PUSH_MIB to change the size.
Run: uv run python adapters/httk-workflow-adapters/benchmarks/bench_push.py
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _services import ssh_settings
from _table import median_seconds, report
from httk.workflow.adapters import add_remote, run_adapter

MIB = int(os.environ.get("HTTK_BENCH_PUSH_MIB", "1024"))
REPEAT = 3


def main() -> int:
    found = ssh_settings()
    if found is None:
        print("1 GiB push: SKIPPED (no test sshd; run scripts/services up)")
        return 0
    host, wrapper = found
    os.environ["PATH"] = f"{wrapper}{os.pathsep}{os.environ['PATH']}"
    scratch = Path(tempfile.mkdtemp(prefix="bench-push-"))
    try:
        (scratch / ".httk-project").mkdir()
        (scratch / ".httk-project" / "project.json").write_text("{}")
        os.environ["HTTK_CONFIG_HOME"] = str(scratch / "config")
        bundle = add_remote("cluster", template="ssh-slurm", project=scratch)
        metadata = json.loads((bundle / "remote.json").read_text())
        metadata["queues"]["default"] = {"host": host}
        (bundle / "remote.json").write_text(json.dumps(metadata))
        source = scratch / "source"
        source.mkdir()
        with (source / "payload.bin").open("wb") as handle:
            for _ in range(MIB):
                handle.write(os.urandom(1 << 20))
        destination = scratch / "destination"

        def fresh() -> None:
            shutil.rmtree(destination, ignore_errors=True)

        def adapter_push() -> None:
            fresh()
            request = {"queue": "default", "source": str(source), "destination": str(destination)}
            run_adapter(bundle, "push", request, timeout=3600)

        def plain_rsync() -> None:
            fresh()
            subprocess.run(
                [
                    "rsync",
                    "--archive",
                    "-e",
                    "ssh -o BatchMode=yes",
                    f"{source}/",
                    f"{host}:{destination}/",
                ],
                check=True,
            )

        # Interleave so drifting machine load hits both the same way.
        adapter_times, rsync_times = [], []
        for _ in range(REPEAT):
            adapter_times.append(median_seconds(adapter_push, repeat=1, warmup=0))
            rsync_times.append(median_seconds(plain_rsync, repeat=1, warmup=0))
        measured = sorted(adapter_times)[len(adapter_times) // 2]
        baseline = sorted(rsync_times)[len(rsync_times) // 2]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    ratio = measured / baseline
    report(
        f"{MIB} MiB push over ssh to {host} (median of {REPEAT}, interleaved)",
        ("run_adapter push (ssh-slurm)", measured),
        ("rsync --archive -e ssh", baseline),
        "<= 1.05x",
        ratio <= 1.05,
        unit="s",
        scale=1.0,
        extra=[
            f"throughput {MIB / measured:.0f} MiB/s via adapter, {MIB / baseline:.0f} MiB/s plain"
        ],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
