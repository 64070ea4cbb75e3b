"""What a provider was asked to run, and what it holds, as conformance hooks report them."""

from __future__ import annotations

from dataclasses import dataclass, field

from altar.execution import ContainerTaskSpec

__all__ = ["GIB", "MIB", "LaunchedTask", "ProviderTask"]

GIB = 1 << 30
"""Bytes in one GiB: ``ResourceRequest.memory_gb`` counts GiB."""

MIB = 1 << 20
"""Bytes in one MiB, the coarsest unit a provider may round a memory limit up to."""


@dataclass(frozen=True)
class LaunchedTask:
    """One task as the provider saw it, read back from the fake provider.

    ``memory_bytes`` is the memory limit in bytes (``memory_gb`` is GiB, so 1.5 is
    ``1.5 * 2**30``); ``cpu`` the CPU request in cores; ``gpu_count`` the number of devices
    the provider will attach (0 for a CPU-only task). ``env`` and ``labels`` hold everything
    the provider received, including anything the backend adds of its own.
    """

    image: str
    command: list[str]
    env: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    cpu: float | None = None
    memory_bytes: int | None = None
    gpu_count: int = 0

    @classmethod
    def of(cls, spec: ContainerTaskSpec) -> LaunchedTask:
        """What a provider asked to run ``spec`` exactly holds (a fake's record of a create)."""
        resources = spec.resources
        memory = None if resources.memory_gb is None else int(resources.memory_gb * GIB)
        return cls(
            image=spec.image,
            command=list(spec.command),
            env=dict(spec.env),
            labels=dict(spec.labels),
            cpu=resources.cpu,
            memory_bytes=memory,
            gpu_count=resources.count if resources.gpu is not None else 0,
        )


@dataclass(frozen=True)
class ProviderTask:
    """What the provider itself holds for a task, read from the fake provider's record.

    ``image`` is the image the provider will run; ``cpu`` the CPUs it reserves or enforces
    (a cgroup quota, a Kubernetes request or limit, a Slurm allocation in whole cores);
    ``memory_bytes`` the memory limit it enforces, in bytes. None: the provider cannot report
    it, and the check that needs it skips with the reason.
    """

    image: str | None = None
    cpu: float | None = None
    memory_bytes: int | None = None
