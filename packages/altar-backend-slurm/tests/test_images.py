"""Image digests for the task cache on Slurm (issue 25): a tag resolves only where the jobs
can be pinned to exactly the bytes the key names, and then the batch script runs that pin."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from altar.backends.slurm import SlurmExecutionBackend
from altar.backends.slurm.fake import FakeLoginNode
from altar.backends.slurm.images import ImageFacts, inspect_argv, parse_inspect, pin
from altar.backends.slurm.runtime import CommandResult
from altar.execution import ContainerTaskSpec

ID = "sha256:" + "1" * 64
MANIFEST = "sha256:" + "2" * 64


class EngineNode(FakeLoginNode):
    """The fake login node, with an engine that answers ``image inspect`` like Docker does."""

    def __init__(self, images: dict[str, tuple[str, list[str]]], **kwargs: object) -> None:
        super().__init__(partitions={"debug": 86400}, **kwargs)  # type: ignore[arg-type]
        self.images = images

    def run(self, argv: Sequence[str]) -> CommandResult:
        words = list(argv)
        if "inspect" not in words or self.unreachable:
            return super().run(argv)
        self.calls.append(words)
        image = words[-1]
        if image not in self.images:
            return CommandResult(1, "", f"Error: No such image: {image}\n")
        identity, digests = self.images[image]
        return CommandResult(0, f"{identity} {json.dumps(digests)}\n", "")


def _backend(tmp_path: Path, node: FakeLoginNode, **options: object) -> SlurmExecutionBackend:
    return SlurmExecutionBackend(
        data_root=tmp_path / "data",
        container_runtime=options.pop("container_runtime", "docker"),  # type: ignore[arg-type]
        runtime=node,
        **options,  # type: ignore[arg-type]
    )


def _spec(image: str) -> ContainerTaskSpec:
    return ContainerTaskSpec(kind="t", image=image, command=["true"])


def test_inspect_output_of_docker_and_podman_parses_and_anything_else_does_not() -> None:
    docker = parse_inspect(f'{ID} ["busybox@{MANIFEST}"]\n')
    assert docker == ImageFacts(ID, (f"busybox@{MANIFEST}",))
    podman = parse_inspect(f"{'1' * 64} null")  # podman: bare hex, no digests
    assert podman == ImageFacts(ID, ())
    assert parse_inspect(f"{ID} []") == ImageFacts(ID, ())
    for junk in ("", "Error: no such image", f"{ID} [", "sha256:12 []", f'{ID} {{"a": 1}}'):
        assert parse_inspect(junk) is None, junk
    # a digest that is not sha256 is not a pin
    assert parse_inspect(f'{ID} ["busybox@md5:abc"]') == ImageFacts(ID, ())


def test_a_registry_digest_of_the_same_repository_is_the_pin() -> None:
    facts = ImageFacts(ID, (f"mirror.lab/busybox@{MANIFEST}", f"docker.io/library/busybox@{ID}"))
    assert pin("busybox:latest", facts, runtime="docker", shared_engine=False) == (
        f"docker.io/library/busybox@{ID}"
    )
    assert pin("mirror.lab/busybox:1", facts, runtime="docker", shared_engine=True) == (
        f"mirror.lab/busybox@{MANIFEST}"
    )
    # another repository's digest names the same manifest: still a pin
    assert pin("other:1", facts, runtime="docker", shared_engine=False) == (
        f"mirror.lab/busybox@{MANIFEST}"
    )
    # a registry port is not a tag
    port = ImageFacts(ID, (f"reg:5000/x@{MANIFEST}",))
    got = pin("reg:5000/x", port, runtime="podman", shared_engine=False)
    assert got == f"reg:5000/x@{MANIFEST}"


def test_without_a_registry_digest_only_a_shared_engine_pins_by_image_id() -> None:
    facts = ImageFacts(ID, ())
    assert pin("busybox:latest", facts, runtime="docker", shared_engine=False) is None
    assert pin("busybox:latest", facts, runtime="docker", shared_engine=True) == ID
    assert pin("busybox:latest", facts, runtime="podman", shared_engine=True) == "1" * 64


def test_the_engine_is_asked_with_the_jobs_engine_words() -> None:
    argv = inspect_argv(
        "busybox:latest",
        runtime="podman",
        runtime_options=["--root", "/r"],
        runtime_env={"CONTAINERS_CONF": "/c.conf"},
    )
    assert argv[:4] == ["env", "CONTAINERS_CONF=/c.conf", "podman", "--root"]
    assert argv[-2:] == ["--", "busybox:latest"]
    assert inspect_argv("x", runtime="docker")[:3] == ["docker", "image", "inspect"]


@pytest.mark.asyncio
async def test_a_resolved_tag_is_keyed_by_its_id_and_the_job_runs_the_pin(tmp_path: Path) -> None:
    node = EngineNode({"busybox:latest": (ID, [])})
    backend = _backend(tmp_path, node, shared_engine=True)
    assert "busybox:latest" in backend.render(_spec("busybox:latest"), "t1")
    assert await backend.image_digest("busybox:latest") == ID
    script = backend.render(_spec("busybox:latest"), "t2")
    assert f" {ID} true" in script
    assert "busybox:latest" not in script
    # another image of the plan is not pinned by it
    assert "alpine:3" in backend.render(_spec("alpine:3"), "t3")


@pytest.mark.asyncio
async def test_a_registry_digest_pins_without_a_shared_engine(tmp_path: Path) -> None:
    node = EngineNode({"busybox:latest": (ID, [f"busybox@{MANIFEST}"])})
    backend = _backend(tmp_path, node)
    assert await backend.image_digest("busybox:latest") == ID
    assert f"busybox@{MANIFEST}" in backend.render(_spec("busybox:latest"), "t1")


@pytest.mark.asyncio
async def test_no_digest_where_the_job_could_run_other_bytes(tmp_path: Path) -> None:
    node = EngineNode({"busybox:latest": (ID, [])})
    # node-local image, engine not shared: the nodes may hold other bytes under that tag
    plain = _backend(tmp_path, node)
    assert await plain.image_digest("busybox:latest") is None
    assert "busybox:latest" in plain.render(_spec("busybox:latest"), "t1")
    # an image the engine lacks (a job would pull whatever the tag is then)
    assert await _backend(tmp_path, node, shared_engine=True).image_digest("gone:1") is None
    # apptainer has no engine to ask; a pinned reference is its own digest: nothing is run
    asked = len(node.calls)
    apptainer = _backend(tmp_path, node, container_runtime="apptainer", shared_engine=True)
    assert await apptainer.image_digest("busybox:latest") is None
    assert await plain.image_digest(f"busybox@{MANIFEST}") is None
    assert len(node.calls) == asked


@pytest.mark.asyncio
async def test_an_unreachable_login_node_leaves_the_tag_unresolved(tmp_path: Path) -> None:
    node = EngineNode({"busybox:latest": (ID, [])})
    node.unreachable = True
    backend = _backend(tmp_path, node, shared_engine=True)
    assert await backend.image_digest("busybox:latest") is None
