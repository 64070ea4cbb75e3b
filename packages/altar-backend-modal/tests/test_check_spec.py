"""``check_spec`` (``altar check``, ``altar run --dry-run``): what submit refuses, with no
Modal call (issue 15)."""

from __future__ import annotations

import pytest
from altar.backends.modal import ModalExecutionBackend
from altar.backends.modal.fake import FakeModalRuntime
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


@pytest.fixture
def fake() -> FakeModalRuntime:
    return FakeModalRuntime()


@pytest.fixture
def backend(fake: FakeModalRuntime) -> ModalExecutionBackend:
    return ModalExecutionBackend(runtime=fake, app_name="app", volume_name="vol")


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "bad",
    [spec(resources=ResourceRequest(gpu="tpu")), spec(timeout_s=86401)],
    ids=["gpu-pool", "timeout-cap"],
)
async def test_check_spec_refuses_what_submit_refuses_and_calls_nothing(
    backend: ModalExecutionBackend, fake: FakeModalRuntime, bad: ContainerTaskSpec
) -> None:
    with pytest.raises(UnsupportedCapabilityError):
        await backend.check_spec(bad)
    assert fake.calls == []
    with pytest.raises(UnsupportedCapabilityError):
        await backend.submit(bad)
    assert fake.sandboxes == {}


@pytest.mark.asyncio
async def test_check_spec_refuses_an_output_outside_the_volume(
    backend: ModalExecutionBackend, fake: FakeModalRuntime
) -> None:
    with pytest.raises(ValueError, match="volume"):
        await backend.check_spec(spec(outputs=[Transfer("out", "../escape")]))
    await backend.check_spec(spec(outputs=[Transfer("out", "jobs/a/out.txt")]))
    assert not fake.calls
