"""What the engine would refuse at create, found before anything is created (``check_spec``).

:func:`~altar.backends.local.render.render_request` already refuses what no engine can be asked
for (reserved labels, GPUs above ``gpu_devices``, a CPU quota below 0.01). This adds the limits
the engine checks: its CPU count and Docker's smallest memory limit.
"""

from __future__ import annotations

from collections.abc import Callable

from altar.backends.local.runtime import ContainerRequest
from altar.execution import ContainerTaskSpec, UnsupportedCapabilityError

__all__ = ["MIN_MEMORY_BYTES", "check_request"]

#: Docker's smallest memory limit ("Minimum memory limit allowed is 6MB").
MIN_MEMORY_BYTES = 6 * 1024 * 1024


def check_request(
    spec: ContainerTaskSpec, request: ContainerRequest, engine_cpus: Callable[[], int]
) -> None:
    """Raise UnsupportedCapabilityError for a limit the engine refuses; ``engine_cpus`` (an
    engine request) is called only for a request with a CPU limit."""
    if request.memory_bytes is not None and request.memory_bytes < MIN_MEMORY_BYTES:
        raise UnsupportedCapabilityError(
            f"task {spec.kind!r} asks for {spec.resources.memory_gb!r} GB of memory, but "
            "Docker cannot limit a container to less than 6 MB",
            capability="memory",
        )
    if request.nano_cpus is None:
        return
    cpus = engine_cpus()
    if cpus and request.nano_cpus > cpus * 1_000_000_000:
        raise UnsupportedCapabilityError(
            f"task {spec.kind!r} asks for {spec.resources.cpu!r} CPUs, but the Docker engine "
            f"has {cpus}",
            capability="cpu",
        )
