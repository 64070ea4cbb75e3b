"""compare_with_reference: a plan through a backend and the in-process reference."""

from __future__ import annotations

from pathlib import Path

import pytest
from altar.conformance import InProcessExecutionBackend, compare_with_reference
from altar.conformance.reference import run_command_locally
from altar.execution import ContainerTaskSpec, ExecutionBackend, Transfer
from subprocess_backend import SubprocessExecutionBackend

FAST = {"poll_interval_s": 0.01, "max_poll_interval_s": 0.05}


def folds(backend: ExecutionBackend) -> list[ContainerTaskSpec]:
    """Two shell tasks whose commands name paths from the backend's own resolver."""
    resolver = backend.path_resolver()
    specs = []
    for fold in ("0", "1"):
        logical = f"jobs/J/fold-{fold}.txt"
        specs.append(
            ContainerTaskSpec(
                kind="fold",
                image="busybox:latest",
                command=[
                    "sh",
                    "-c",
                    'mkdir -p "${2%/*}" && printf "%s\\n" "$1" > "$2"',
                    "sh",
                    f"fold {fold} says 'hi' $(not run)",
                    resolver.resolve(logical),
                ],
                labels={"fold": fold},
                outputs=[Transfer(f"results/fold-{fold}.txt", logical)],
            )
        )
    return specs


class ShoutingBackend(InProcessExecutionBackend):
    """Rewrites the command: upper-cases every argument after the script."""

    async def submit(self, spec: ContainerTaskSpec):  # type: ignore[no-untyped-def]
        command = [
            *spec.command[:4],
            *(arg.upper() for arg in spec.command[4:5]),
            *spec.command[5:],
        ]
        return await super().submit(ContainerTaskSpec(**{**spec.__dict__, "command": command}))


@pytest.mark.asyncio
async def test_the_example_backend_matches_the_reference(tmp_path: Path) -> None:
    backend = SubprocessExecutionBackend(data_root=tmp_path / "volume")
    report = await compare_with_reference(folds, backend, workdir=tmp_path / "compare", **FAST)
    assert report.ok, report.format()
    assert report.format().endswith("across 2 task(s)")
    produced = tmp_path / "compare/backend/outputs/fold-0/jobs/J/fold-0.txt"
    assert produced.read_text() == "fold 0 says 'hi' $(not run)\n"


@pytest.mark.asyncio
async def test_a_rewritten_command_shows_up_as_output_differences(tmp_path: Path) -> None:
    backend = ShoutingBackend(run_command_locally, data_root=tmp_path / "volume")
    report = await compare_with_reference(folds, backend, workdir=tmp_path / "compare", **FAST)
    assert not report.ok
    aspects = sorted({(d.task_id, d.aspect) for d in report.differences})
    # The plan's commands are equal (the backend rewrote them after submit): the bytes differ.
    assert aspects == [("fold-0", "output"), ("fold-1", "output")]
    assert "fold-0" in report.format()


@pytest.mark.asyncio
async def test_specs_rendered_for_another_mount_root_differ_in_command(tmp_path: Path) -> None:
    backend = InProcessExecutionBackend(run_command_locally, data_root=tmp_path / "volume")

    def skewed(each: ExecutionBackend) -> list[ContainerTaskSpec]:
        specs = folds(each)
        if each is backend:
            specs[1] = ContainerTaskSpec(**{**specs[1].__dict__, "command": ["true"]})
        return specs

    report = await compare_with_reference(skewed, backend, workdir=tmp_path / "compare", **FAST)
    commands = [d for d in report.differences if d.aspect == "command"]
    assert [d.task_id for d in commands] == ["fold-1"]


@pytest.mark.asyncio
async def test_a_static_list_of_specs_is_accepted(tmp_path: Path) -> None:
    spec = ContainerTaskSpec(kind="noop", image="busybox:latest", command=["true"])
    backend = InProcessExecutionBackend(run_command_locally, data_root=tmp_path / "volume")
    report = await compare_with_reference([spec], backend, workdir=tmp_path / "c", **FAST)
    assert report.ok, report.format()


@pytest.mark.asyncio
async def test_nonsense_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    backend = InProcessExecutionBackend(data_root=tmp_path)
    with pytest.raises(TypeError, match="item 0 is str"):
        await compare_with_reference(["true"], backend, workdir=tmp_path)  # type: ignore[list-item]
    with pytest.raises(ValueError, match="at least one task"):
        await compare_with_reference([], backend, workdir=tmp_path)
