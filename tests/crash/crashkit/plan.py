"""The crash test's plan: 40 tasks in three layers, digest-checked inputs, a ledger per execution.

Layout, all derived from a seed (:func:`build_plan`):

- 6 inputs ``inputs/w<i>.bin`` of 1-4 MiB, staged to ``models/w<i>.bin`` with their digests;
- 30 ``fold`` tasks, each reading one staged input, 8 ``merge`` tasks reading 2-4 fold outputs
  each (so they run after them), 2 ``summary`` tasks reading 4 merge outputs each;
- every task sleeps 0.5-4 s and writes ``jobs/<id>.txt`` (its id and the sha256 of what it read),
  collected to ``<workdir>/results/<id>.txt`` with a declared digest, so a wrong or missing
  output fails the run instead of passing unnoticed.

Every execution of a task first appends ``start <task> <nonce> <pid> <marker>`` to
``<data root>/ledger.log`` and, when it has written its output, ``end <task> <nonce>``: the
ledger counts what actually ran, whatever the journal believes. ``marker`` is in every task's
command line, so a process left running is found by scanning ``/proc``.

Routed (``routes``): the plan declares ``[backends.NAME]`` and each kind of task names its
backend; tasks see their data root as ``{altar:mount_root}`` and each backend's data root
holds a ledger of its own (:attr:`CrashPlan.ledgers`).
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["LEDGER_NAME", "CrashPlan", "build_plan"]

LEDGER_NAME = "ledger.log"
MIB = 1024 * 1024
N_INPUTS = 6
N_FOLDS = 30
N_MERGES = 8
N_SUMMARIES = 2


@dataclass
class CrashPlan:
    """A written plan and what its run must produce."""

    path: Path
    data_root: Path
    results: Path
    marker: str
    task_ids: list[str]
    #: task id -> the exact bytes its collected output must hold
    expected: dict[str, bytes] = field(default_factory=dict)
    #: task id -> the ids it depends on
    dependencies: dict[str, list[str]] = field(default_factory=dict)
    #: every backend's data root (a routed plan has several; the first is ``data_root``)
    data_roots: list[Path] = field(default_factory=list)

    @property
    def ledger(self) -> Path:
        return self.data_root / LEDGER_NAME

    @property
    def ledgers(self) -> list[Path]:
        return [root / LEDGER_NAME for root in self.data_roots or [self.data_root]]


def _script(task_id: str, mount: str, reads: list[str], sleep_s: float, marker: str) -> str:
    """The task's shell program (POSIX sh: BusyBox in a container, dash on the host)."""
    ledger = f"{mount}/{LEDGER_NAME}"
    files = " ".join(f"{mount}/{path}" for path in reads)
    return (
        f": {marker}\n"
        "set -e\n"
        "n=$(od -An -N8 -tx1 /dev/urandom | tr -d ' \\n')\n"
        f'echo "start {task_id} $n $$ {marker}" >> {ledger}\n'
        f"cat {files} | sha256sum > /dev/null\n"
        f"sleep {sleep_s:.2f}\n"
        f"mkdir -p {mount}/jobs\n"
        f"{{ echo {task_id}; cat {files} | sha256sum | cut -d' ' -f1; }}"
        f" > {mount}/jobs/{task_id}.txt\n"
        f'echo "end {task_id} $n" >> {ledger}\n'
    )


def _content(task_id: str, read: bytes) -> bytes:
    return f"{task_id}\n{hashlib.sha256(read).hexdigest()}\n".encode()


def build_plan(
    workdir: Path,
    *,
    seed: int,
    backend: str,
    mount: str,
    backend_options: dict[str, Any],
    image: str = "busybox:latest",
    max_parallel: int = 6,
    backends: dict[str, dict[str, Any]] | None = None,
    routes: dict[str, str] | None = None,
) -> CrashPlan:
    """Write inputs and ``plan.json`` under ``workdir`` for ``backend``.

    ``mount`` is where tasks see the data root (``/mnt/volume`` in a container, the data root
    itself for the in-process backend, whose tasks run on the host). ``backends`` and
    ``routes`` (task kind -> backend name): a routed plan instead, over those
    ``[backends.NAME]`` tables (``backend`` and ``backend_options`` are then the first's).
    """
    rng = random.Random(seed)
    marker = f"altar-crash-{seed}-{rng.getrandbits(40):010x}"
    inputs_dir = workdir / "inputs"
    inputs_dir.mkdir(parents=True, exist_ok=True)
    data_root = Path(backend_options["data_root"])
    results = workdir / "results"
    weights: list[bytes] = []
    for index in range(N_INPUTS):
        size = rng.randint(1 * MIB, 4 * MIB)
        data = rng.randbytes(size)
        (inputs_dir / f"w{index}.bin").write_bytes(data)
        weights.append(data)

    tasks: list[dict[str, Any]] = []
    plan = CrashPlan(workdir / "plan.json", data_root, results, marker, [])
    if backends:
        plan.data_roots = [Path(b["options"]["data_root"]) for b in backends.values()]

    def add(
        task_id: str, kind: str, reads: list[tuple[str, str, str | None]], sleep_s: float
    ) -> None:
        """``reads``: (uri, logical path, digest or None for another task's output)."""
        read = b"".join(
            weights[int(Path(logical).stem[1:])]
            if logical.startswith("models/")
            else plan.expected[Path(logical).stem]
            for _, logical, _ in reads
        )
        content = _content(task_id, read)
        plan.expected[task_id] = content
        plan.task_ids.append(task_id)
        plan.dependencies[task_id] = [
            Path(logical).stem for _, logical, _ in reads if logical.startswith("jobs/")
        ]
        inputs = []
        for uri, logical, digest in reads:
            transfer: dict[str, Any] = {"uri": uri, "logical_path": logical}
            if digest is not None:
                transfer["digest"] = digest
            inputs.append(transfer)
        tasks.append(
            {
                "id": task_id,
                "kind": kind,
                "image": image,
                "command": [
                    "sh",
                    "-c",
                    _script(task_id, mount, [logical for _, logical, _ in reads], sleep_s, marker),
                ],
                "labels": {"crash_test": marker},
                "inputs": inputs,
                "outputs": [
                    {
                        "uri": str(results / f"{task_id}.txt"),
                        "logical_path": f"jobs/{task_id}.txt",
                        "digest": "sha256:" + hashlib.sha256(content).hexdigest(),
                    }
                ],
                "timeout_s": 300,
                **({"backend": routes[kind]} if routes else {}),
            }
        )

    def weight(index: int) -> tuple[str, str, str]:
        digest = "sha256:" + hashlib.sha256(weights[index]).hexdigest()
        return (str(inputs_dir / f"w{index}.bin"), f"models/w{index}.bin", digest)

    def output_of(task_id: str) -> tuple[str, str, None]:
        return (str(results / f"{task_id}.txt"), f"jobs/{task_id}.txt", None)

    folds = [f"f{i:02d}" for i in range(N_FOLDS)]
    for i, task_id in enumerate(folds):
        add(task_id, "fold", [weight(i % N_INPUTS)], rng.uniform(0.5, 4.0))
    merges = [f"m{k}" for k in range(N_MERGES)]
    for k, task_id in enumerate(merges):
        group = folds[4 * k : 4 * k + 4]
        add(task_id, "merge", [output_of(f) for f in group], rng.uniform(0.5, 2.0))
    for s in range(N_SUMMARIES):
        group = merges[4 * s : 4 * s + 4]
        add(f"s{s}", "summary", [output_of(m) for m in group], rng.uniform(0.5, 1.5))

    document = {
        "description": f"crash-consistency plan (seed {seed})",
        "max_parallel": max_parallel,
        "backend": {"type": backend, "options": backend_options},
        "tasks": tasks,
    }
    if backends:
        del document["backend"]
        document["backends"] = backends
    plan.path.write_text(json.dumps(document, indent=1))
    return plan
