"""``check_spec`` (``altar check``, ``altar run --dry-run``): what submit refuses, with no
API call (issue 15)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from altar.backends.kubernetes import KubernetesExecutionBackend
from altar.backends.kubernetes.testing import FakeApiServer
from altar.execution import (
    ContainerTaskSpec,
    ResourceRequest,
    Transfer,
    UnsupportedCapabilityError,
)


def spec(**overrides: object) -> ContainerTaskSpec:
    values: dict[str, object] = {"kind": "k", "image": "busybox", "command": ["true"]}
    values.update(overrides)
    return ContainerTaskSpec(**values)  # type: ignore[arg-type]


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "bad",
    [
        spec(resources=ResourceRequest(gpu="h100")),  # no such pool configured
        spec(labels={"job-name": "mine"}),  # the Job controller's label
        spec(inputs=[Transfer("w", "models/w.bin", digest="sha256:" + "0" * 64)]),  # no PVC
    ],
    ids=["gpu-pool", "controller-label", "unverifiable-input"],
)
async def test_check_spec_refuses_what_submit_refuses_without_a_request(
    make_backend: Callable[..., KubernetesExecutionBackend],
    fake_apiserver: FakeApiServer,
    bad: ContainerTaskSpec,
) -> None:
    backend = make_backend(pvc_name=None, pools={"a100": {"node_selector": {"gpu": "a100"}}})
    fake_apiserver.reset_requests()
    with pytest.raises(UnsupportedCapabilityError):
        await backend.check_spec(bad)
    assert fake_apiserver.requests == []
    with pytest.raises(UnsupportedCapabilityError):
        await backend.submit(bad)


@pytest.mark.asyncio
async def test_check_spec_accepts_a_spec_submit_accepts(
    backend: KubernetesExecutionBackend, fake_apiserver: FakeApiServer
) -> None:
    fake_apiserver.reset_requests()
    await backend.check_spec(spec(resources=ResourceRequest(cpu=1, memory_gb=1)))
    assert fake_apiserver.requests == []
