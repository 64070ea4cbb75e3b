"""What a provider was asked to run, as a conformance hook reports it back."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["GIB", "LaunchedTask"]

GIB = 1 << 30
"""Bytes in one GiB: ``ResourceRequest.memory_gb`` counts GiB."""


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
