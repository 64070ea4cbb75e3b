"""One plan through the Modal backend and through the in-process reference: same commands,
same output bytes, same outcomes. Sandboxes run as real containers (``DockerModal``)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from altar.backends.modal import ModalExecutionBackend
from altar.execution import ContainerTaskSpec, ExecutionBackend, Transfer

from .docker_modal import DockerModal

compare_with_reference = pytest.importorskip("altar.conformance").compare_with_reference

FAST = {"poll_interval_s": 0.05, "max_poll_interval_s": 0.2}
WEIGHTS = b"model weights \x00\x01\x02\n" * 100


def _plan(weights: Path):
    digest = "sha256:" + hashlib.sha256(WEIGHTS).hexdigest()

    def plan(backend: ExecutionBackend) -> list[ContainerTaskSpec]:
        resolve = backend.path_resolver().resolve
        specs = []
        for fold in ("0", "1"):
            out = f"jobs/J/fold-{fold}/scores.tsv"
            specs.append(
                ContainerTaskSpec(
                    kind="fold",
                    image="busybox:latest",
                    command=[
                        "sh",
                        "-c",
                        'mkdir -p "${3%/*}" && { printf "%s\\n" "$1"; sha256sum < "$2"; } > "$3"',
                        "score",
                        f"fold {fold} says 'hi' $(not run)",
                        resolve("models/m/weights.bin"),
                        resolve(out),
                    ],
                    labels={"job_id": "J", "fold": fold},
                    inputs=[Transfer(str(weights), "models/m/weights.bin", digest=digest)],
                    outputs=[Transfer(f"results/fold-{fold}.tsv", out)],
                    timeout_s=120,
                )
            )
        return specs

    return plan


@pytest.mark.docker
@pytest.mark.asyncio
async def test_a_plan_runs_the_same_on_modal_and_the_reference(
    docker_host: str, tmp_path: Path
) -> None:
    weights = tmp_path / "weights.bin"
    weights.write_bytes(WEIGHTS)
    runtime = DockerModal(tmp_path / "modal-volumes")
    backend = ModalExecutionBackend(runtime=runtime)
    try:
        report = await compare_with_reference(
            _plan(weights), backend, workdir=tmp_path / "compare", **FAST
        )
    finally:
        await runtime.close()
    assert report.ok, report.format()
    outputs = tmp_path / "compare" / "backend" / "outputs"
    collected = sorted(p.relative_to(outputs).as_posix() for p in outputs.rglob("*.tsv"))
    assert len(collected) == 2
    assert collected[0].endswith("jobs/J/fold-0/scores.tsv")
    text = (outputs / collected[0]).read_text()
    expected_hash = hashlib.sha256(WEIGHTS).hexdigest()
    assert text.startswith("fold 0 says 'hi' $(not run)\n" + expected_hash)
