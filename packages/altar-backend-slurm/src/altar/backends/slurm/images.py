"""Image digests for the task cache: what a tag is now, and a reference jobs run it by.

The task cache keys a task by its image's content digest (``ExecutionBackend.image_digest``).
On Slurm the containers run on the compute nodes, so a digest only counts if every job of the
run will run exactly those bytes, whichever node it lands on and whenever it starts. The login
node asks its engine (``docker``/``podman`` with the backend's ``runtime_options`` and
``runtime_env``: the same engine words the jobs use) for the tag's image id and registry
digests, then:

- a registry digest (``RepoDigests``) pins the jobs to ``repo@sha256:<manifest>``: any node
  pulls or finds exactly that manifest, whose config is the image id the key names;
- else, when the backend's ``shared_engine`` says the nodes run containers on the engine the
  login node reaches (one machine, or one remote daemon), the jobs are pinned to the image id
  itself: the tag may move before a job starts, the id cannot;
- else (a node-local image nobody can pin, apptainer, an image the engine lacks, an engine
  that did not answer) there is no digest and the task is uncacheable unless the plan trusts
  tags.

The key's ``image`` field is the image id either way, the same value the local backend reads
from the same engine, so a plan run on ``local`` and then on ``slurm`` hits across them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from altar.backends.slurm.render import ContainerRuntime
from altar.backends.slurm.runtime import LoginNode, LoginNodeUnreachableError
from altar.execution import ContainerTaskSpec

__all__ = ["ImageFacts", "ImagePins", "inspect_argv", "parse_inspect", "pin"]

_HEX64 = re.compile(r"[0-9a-f]{64}")
_FORMAT = "{{.Id}} {{json .RepoDigests}}"


@dataclass(frozen=True)
class ImageFacts:
    """What the engine says of one image: its id (``sha256:<hex>``) and registry digests."""

    image_id: str
    repo_digests: tuple[str, ...] = ()


def inspect_argv(
    image: str,
    *,
    runtime: ContainerRuntime,
    runtime_options: Sequence[str] = (),
    runtime_env: Mapping[str, str] | None = None,
) -> list[str]:
    """The login node's argv asking its engine about ``image`` (no pull), as the jobs would."""
    env = [f"{name}={value}" for name, value in sorted((runtime_env or {}).items())]
    prefix = ["env", *env] if env else []
    # "--" keeps an image named like an option from being read as one
    inspect = ["image", "inspect", "--format", _FORMAT, "--", image]
    return [*prefix, runtime, *runtime_options, *inspect]


def parse_inspect(stdout: str) -> ImageFacts | None:
    """The facts in one ``image inspect`` line; None if it is not what the format prints."""
    identity, _, digests_json = stdout.strip().partition(" ")
    identity = identity.removeprefix("sha256:")  # podman prints the bare hex
    if not _HEX64.fullmatch(identity):
        return None
    try:
        digests = json.loads(digests_json or "null") or []
    except ValueError:
        return None
    if not isinstance(digests, list):
        return None
    pinned = tuple(d for d in digests if isinstance(d, str) and _pinned(d))
    return ImageFacts("sha256:" + identity, pinned)


def _pinned(reference: str) -> bool:
    _, at, digest = reference.rpartition("@")
    return bool(at) and digest.startswith("sha256:") and bool(_HEX64.fullmatch(digest[7:]))


def _repository(reference: str) -> str:
    """``reference`` without tag or digest, Docker Hub's implied prefixes dropped."""
    name = reference.partition("@")[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:  # a tag, not a registry's port
        name = name[:colon]
    for prefix in ("docker.io/", "index.docker.io/"):
        name = name.removeprefix(prefix)
    return name.removeprefix("library/")


def pin(
    image: str, facts: ImageFacts, *, runtime: ContainerRuntime, shared_engine: bool
) -> str | None:
    """The reference jobs run ``image`` by, so they run ``facts``' bytes; None: none does.

    A registry digest of the image's own repository first (any node can pull it), else any of
    its registry digests (the same manifest, named in another repository), else the image id
    when the nodes share this engine. Docker and Podman both run an image by its bare id.
    """
    if facts.repo_digests:
        wanted = _repository(image)
        same = [d for d in facts.repo_digests if _repository(d) == wanted]
        return (same or list(facts.repo_digests))[0]
    if shared_engine:
        return facts.image_id.removeprefix("sha256:") if runtime == "podman" else facts.image_id
    return None


class ImagePins:
    """One backend's resolved tags: the key's digest, and the reference its jobs run."""

    def __init__(
        self,
        *,
        runtime: ContainerRuntime,
        runtime_options: Sequence[str],
        runtime_env: Mapping[str, str],
        shared_engine: bool,
    ) -> None:
        self.runtime: ContainerRuntime = runtime
        self.runtime_options = list(runtime_options)
        self.runtime_env = dict(runtime_env)
        self.shared_engine = shared_engine
        self.pins: dict[str, str] = {}  # image as the plan writes it -> reference jobs run

    def resolve(self, node: LoginNode, image: str) -> str | None:
        """The image id of ``image`` if jobs can be pinned to it (then they are); else None.

        Synchronous (one command on the login node). A pinned reference or an apptainer
        image is not asked about: the former is its own digest, the latter has no engine.
        """
        if self.runtime == "apptainer" or "@" in image:
            return None
        argv = inspect_argv(
            image,
            runtime=self.runtime,
            runtime_options=self.runtime_options,
            runtime_env=self.runtime_env,
        )
        try:
            result = node.run(argv)
        except LoginNodeUnreachableError:
            return None  # uncacheable for this run, never a reason to stop it
        facts = parse_inspect(result.stdout) if result.ok else None
        if facts is None:
            return None
        reference = pin(image, facts, runtime=self.runtime, shared_engine=self.shared_engine)
        if reference is None:
            return None
        self.pins[image] = reference
        return facts.image_id

    def pinned(self, spec: ContainerTaskSpec) -> ContainerTaskSpec:
        """``spec`` running its image by the pinned reference, when its tag was resolved."""
        reference = self.pins.get(spec.image)
        return spec if reference is None else replace(spec, image=reference)
