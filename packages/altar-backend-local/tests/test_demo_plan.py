"""The README demo plan (examples/demo/plan.toml) run on this backend, without the plan runner."""

from __future__ import annotations

import asyncio
import hashlib
import os
import tomllib
from pathlib import Path
from typing import Any

import pytest
from altar.backends.local import LocalDockerExecutionBackend
from altar.execution import (
    CONTAINER_MOUNT_ROOT,
    ContainerTaskSpec,
    ExecutionBackend,
    PathResolver,
    TaskHandle,
    TaskState,
    TaskStatus,
    Transfer,
    spec_from_dict,
)
from altar.execution.plans.placeholders import expand_spec
from altar.execution.plans.plan import Plan

DEMO = Path(__file__).resolve().parents[3] / "examples" / "demo"


def load_plan() -> dict[str, Any]:
    with open(DEMO / "plan.toml", "rb") as handle:
        return tomllib.load(handle)


def resolve(transfer: Transfer, base: Path) -> Transfer:
    uri = transfer.uri if os.path.isabs(transfer.uri) else str(base / transfer.uri)
    return Transfer(uri, transfer.logical_path, transfer.locality_key, transfer.digest)


def specs(base: Path, output_base: Path) -> list[ContainerTaskSpec]:
    built = []
    for task in load_plan()["tasks"]:
        spec = spec_from_dict({k: v for k, v in task.items() if k != "id"})
        # the plan names the volume {altar:mount_root}; the runner expands it at submit
        spec = expand_spec(spec, PathResolver(CONTAINER_MOUNT_ROOT))
        built.append(
            ContainerTaskSpec(
                **{
                    **spec.__dict__,
                    "inputs": [resolve(t, base) for t in spec.inputs],
                    "outputs": [resolve(t, output_base) for t in spec.outputs],
                }
            )
        )
    return built


def expected_means() -> dict[str, float]:
    """The demo's arithmetic, done independently of the shell scripts."""
    weights = []
    for fold in range(3):
        table = {}
        for line in (DEMO / f"data/models/fold{fold}.weights").read_text().splitlines():
            if line and not line.startswith("#"):
                key, value = line.split("\t")
                table[key] = float(value)
        weights.append(table)
    means = {}
    for line in (DEMO / "data/variants.tsv").read_text().splitlines():
        if line.startswith("#"):
            continue
        _chrom, _pos, ref, alt, name = line.split("\t")
        means[name] = sum(w[alt] - w[ref] + w["bias"] for w in weights) / 3
    return means


def test_every_digest_in_the_plan_matches_its_file() -> None:
    checked = 0
    for task in load_plan()["tasks"]:
        for transfer in task.get("inputs", []):
            if transfer.get("digest"):
                data = (DEMO / transfer["uri"]).read_bytes()
                assert transfer["digest"] == "sha256:" + hashlib.sha256(data).hexdigest()
                checked += 1
    assert checked == 7  # three weights, the score script thrice, the summarize script


def test_the_plan_names_the_local_backend_and_builds_specs(tmp_path: Path) -> None:
    plan = load_plan()
    assert plan["backend"]["type"] == "local"
    LocalDockerExecutionBackend(data_root=tmp_path, **plan["backend"].get("options", {}))
    built = specs(DEMO, tmp_path)
    assert [s.kind for s in built] == ["score", "score", "score", "summarize"]


async def run_until_terminal(
    backend: LocalDockerExecutionBackend, handles: list[TaskHandle]
) -> list[TaskStatus]:
    loop = asyncio.get_running_loop()
    end = loop.time() + 60
    while True:
        statuses = await backend.poll(handles)
        if all(s.state.is_terminal for s in statuses):
            return statuses
        assert loop.time() < end
        await asyncio.sleep(0.2)


@pytest.mark.docker
@pytest.mark.integration
@pytest.mark.asyncio
async def test_the_demo_plan_runs_end_to_end(docker_host: str, tmp_path: Path) -> None:
    """Folds first, then summarize, which reads what they wrote (the runner's order)."""
    plan = load_plan()
    backend = LocalDockerExecutionBackend(
        data_root=tmp_path / "data", watchdog=False, **plan["backend"].get("options", {})
    )
    built = specs(DEMO, tmp_path)
    written = {t.logical_path for s in built for t in s.outputs}
    await backend.stage_inputs(
        [t for s in built for t in s.inputs if t.logical_path not in written]
    )
    folds = [s for s in built if s.kind == "score"]
    (summarize,) = [s for s in built if s.kind == "summarize"]
    assert {t.logical_path for t in summarize.inputs} & written == {
        t.logical_path for s in folds for t in s.outputs
    }
    handles = [await backend.submit(s) for s in folds]
    try:
        statuses = await run_until_terminal(backend, handles)
        assert [s.state for s in statuses] == [TaskState.SUCCEEDED] * 3, statuses
        handles.append(await backend.submit(summarize))
        statuses = await run_until_terminal(backend, handles[-1:])
        assert statuses[0].state is TaskState.SUCCEEDED, statuses
        await backend.collect_outputs([t for s in built for t in s.outputs])
    finally:
        await backend.cleanup(handles)
    rows = (tmp_path / "results" / "summary.tsv").read_text().splitlines()
    assert rows[0].split("\t") == ["variant", "site", "mean_score", "min", "max", "folds"]
    means = {row.split("\t")[0]: float(row.split("\t")[2]) for row in rows[1:]}
    expected = expected_means()
    assert means.keys() == expected.keys()
    for name, value in expected.items():
        assert means[name] == pytest.approx(value, abs=1e-4)
    assert all(row.endswith("\t3") for row in rows[1:])


@pytest.mark.docker
@pytest.mark.integration
@pytest.mark.asyncio
async def test_the_demo_plan_matches_the_reference_backend(
    docker_host: str, tmp_path: Path
) -> None:
    """The seed's portability check: same commands, same output bytes, same outcomes."""
    from dataclasses import replace

    from altar.conformance import compare_with_reference
    from altar.execution.plans.plan import load_plan as load_plan_file

    plan = load_plan_file(DEMO / "plan.toml")

    def rendered(backend: ExecutionBackend) -> Plan:
        root = backend.path_resolver().resolve("")
        tasks = [
            replace(
                task,
                spec=replace(
                    task.spec,
                    command=[
                        arg.replace("/mnt/volume", root, 1)
                        if arg.startswith("/mnt/volume/")
                        else arg
                        for arg in task.spec.command
                    ],
                ),
            )
            for task in plan.tasks
        ]
        return replace(plan, tasks=tasks)

    backend = LocalDockerExecutionBackend(data_root=tmp_path / "data", watchdog=False)
    report = await compare_with_reference(rendered, backend, workdir=tmp_path / "compare")
    assert report.ok, report.format()
