"""Checks of what the provider itself holds for a task: its image, CPUs and memory limit.

``launched_task`` reads back the *request* a backend made; these checks read what the provider
will act on (the image it pulls, the CPUs it reserves or enforces, the memory limit it
enforces), through the ``provider_task`` hook, which reads the fake provider's own record.
A field the provider cannot report is None, and its check skips with the reason.

Honouring a CPU request: a provider that enforces fractions (a cgroup quota, a Kubernetes
request) holds exactly the request; one that allocates or pins whole cores (Slurm's
``--cpus-per-task``, a cpuset) holds the next whole number, so 1.5 CPUs is 2 cores, never 1.
Either way the task gets at least what it asked for and at most ``ceil(request)``.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from altar.conformance.launched import GIB, MIB, ProviderTask
from altar.execution import (
    ContainerTaskSpec,
    ExecutionBackend,
    ResourceRequest,
    TaskHandle,
    UnsupportedCapabilityError,
)

__all__ = ["CPU_REQUEST", "MEMORY_REQUEST_GB", "ProviderChecks"]

CPU_REQUEST = 1.5
"""The fractional CPU request the suite submits."""

MEMORY_REQUEST_GB = 1.5
"""The memory request the suite submits, in GiB."""

asyncio_test = pytest.mark.asyncio


async def _submit_or_skip(
    backend: ExecutionBackend, spec: ContainerTaskSpec, what: str
) -> TaskHandle:
    try:
        return await backend.submit(spec)
    except UnsupportedCapabilityError as error:
        pytest.skip(f"backend refuses {what} explicitly (UnsupportedCapabilityError: {error})")


class ProviderChecks:
    """Mixed into :class:`~altar.conformance.ExecutionBackendContract`."""

    def provider_task(self, backend: ExecutionBackend, handle: TaskHandle) -> ProviderTask | None:
        """What the fake provider itself holds for ``handle`` (the image it will run, the CPUs
        it reserves or enforces, its memory limit), read from the fake's own record, never from
        the backend; None leaves these checks unchecked."""
        return None

    def _provider_task(
        self, backend: ExecutionBackend, handle: TaskHandle, what: str
    ) -> ProviderTask:
        held = self.provider_task(backend, handle)
        if held is None:
            pytest.skip(
                f"provider_task hook not implemented, so {what} at the provider is unchecked; "
                "return what the fake provider recorded for the task to check it"
            )
        assert isinstance(held, ProviderTask), (
            f"provider_task must return a ProviderTask, got {held!r}"
        )
        return held

    @asyncio_test
    async def test_the_spec_image_reaches_the_provider(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec, other_image: str
    ) -> None:
        handle = await backend.submit(spec)
        held = self._provider_task(backend, handle, "the image")
        if held.image is None:
            pytest.skip("provider_task reports no image: the provider cannot say what it runs")
        assert held.image == spec.image, (
            f"the provider holds image {held.image!r}, expected {spec.image!r} (the spec's): "
            "pass spec.image to the provider unchanged"
        )
        try:
            other = await backend.submit(replace(spec, image=other_image))
        except UnsupportedCapabilityError:
            return  # a host or single-image backend refuses it; the first image was checked
        seen = self._provider_task(backend, other, "the image").image
        assert seen == other_image, (
            f"the provider holds image {seen!r}, expected {other_image!r} (the second task's "
            "spec): the image comes from each spec, not from the backend"
        )

    @asyncio_test
    async def test_cpu_request_is_honoured_at_the_provider(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        request = replace(spec, resources=ResourceRequest(cpu=CPU_REQUEST))
        handle = await _submit_or_skip(backend, request, "a CPU request")
        held = self._provider_task(backend, handle, "the CPU limit")
        if held.cpu is None:
            pytest.skip("provider_task reports no CPUs: the provider cannot say what it reserves")
        most = math.ceil(CPU_REQUEST)
        assert CPU_REQUEST <= float(held.cpu) <= most, (
            f"{CPU_REQUEST} CPUs were requested and the provider holds {held.cpu}; expected "
            f"at least {CPU_REQUEST} and at most {most} (a provider that pins whole cores "
            "rounds up, never down)"
        )

    @asyncio_test
    async def test_memory_request_is_enforced_at_the_provider(
        self, backend: ExecutionBackend, spec: ContainerTaskSpec
    ) -> None:
        request = replace(spec, resources=ResourceRequest(memory_gb=MEMORY_REQUEST_GB))
        handle = await _submit_or_skip(backend, request, "a memory request")
        held = self._provider_task(backend, handle, "the memory limit")
        if held.memory_bytes is None:
            pytest.skip(
                "provider_task reports no memory limit: the provider cannot say what it enforces"
            )
        wanted = int(MEMORY_REQUEST_GB * GIB)
        assert wanted <= held.memory_bytes <= wanted + MIB, (
            f"memory_gb={MEMORY_REQUEST_GB} is {wanted} bytes (GiB) and the provider enforces "
            f"{held.memory_bytes}; expected at least {wanted} and at most {wanted + MIB} "
            "(rounded up to the provider's unit, at most 1 MiB)"
        )
