"""Slurm pre-flight on the fake cluster: the GRES a GPU task asks for (issue 23 item 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
from altar.backends.slurm import SlurmExecutionBackend
from altar.backends.slurm.commands import parse_gres
from altar.backends.slurm.fake import FakeLoginNode
from altar.execution import ContainerTaskSpec, ResourceRequest, UnsupportedCapabilityError


def _gpu(pool: str, count: int = 1) -> ContainerTaskSpec:
    return ContainerTaskSpec(
        kind="k", image="busybox", command=["true"], resources=ResourceRequest(pool, count)
    )


def test_gres_strings_read_as_slurm_prints_them() -> None:
    assert parse_gres("(null)") == {}
    assert parse_gres("gpu:a100:4(S:0-1),gpu:2") == {("gpu", "a100"): 4, ("gpu", None): 2}
    assert parse_gres("gpu:v100:2(S:0,1),mps:100") == {("gpu", "v100"): 2, ("mps", None): 100}
    assert parse_gres("gpu") == {("gpu", None): 1}


@pytest.mark.asyncio
async def test_check_spec_refuses_a_gpu_request_the_partition_has_no_gres_for(
    tmp_path: Path,
) -> None:
    node = FakeLoginNode(gpus={"a100": 2})
    backend = SlurmExecutionBackend(
        data_root=tmp_path / "data",
        container_runtime="docker",
        runtime=node,
        gpu_types={"gpu": None, "a100": "a100", "h100": "h100"},
    )
    await backend.check_spec(_gpu("a100", 2))
    await backend.check_spec(_gpu("gpu", 2))  # any type: the two A100s count
    with pytest.raises(UnsupportedCapabilityError) as refused:
        await backend.check_spec(_gpu("h100"))
    assert refused.value.capability == "gpu"
    assert str(refused.value).startswith(
        "partition the default has no node with GRES gpu:h100:1 (its nodes have: gpu:a100:2)"
    )
    with pytest.raises(UnsupportedCapabilityError, match="no node with GRES gpu:a100:3"):
        await backend.check_spec(_gpu("a100", 3))
    assert len([call for call in node.calls if "sinfo" in call]) == 1  # asked once
    assert not list((tmp_path / "data").glob(".altar-slurm/jobs/*"))


@pytest.mark.asyncio
async def test_check_spec_on_a_cluster_without_gres_refuses_every_gpu_task(
    tmp_path: Path,
) -> None:
    backend = SlurmExecutionBackend(
        data_root=tmp_path / "data", container_runtime="docker", runtime=FakeLoginNode()
    )
    await backend.check_spec(ContainerTaskSpec(kind="k", image="busybox", command=["true"]))
    with pytest.raises(UnsupportedCapabilityError, match=r"its nodes have: no GRES"):
        await backend.check_spec(_gpu("gpu"))
