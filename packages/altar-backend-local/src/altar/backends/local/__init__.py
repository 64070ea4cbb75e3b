"""Altar execution backend for a Docker engine: ``local`` in ``altar.execution_backends``.

The package is laid out like every Altar backend: :mod:`.runtime` (the seam: protocol, values,
errors), :mod:`.sdk_runtime` (the real one, on the docker SDK), :mod:`.render` (pure spec →
create request), :mod:`.classify` (pure container facts → task state), :mod:`.fake` (the seam's
in-memory engine) and :mod:`.backend`. The docker SDK is imported only when the real runtime is
built, so importing this package (and listing backends) costs no SDK import;
``DockerSdkRuntime`` is resolved on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from altar.backends.local.__about__ import __version__
from altar.backends.local.backend import DATA_ROOT_ENV, LOG_TAIL_LINES, LocalDockerExecutionBackend
from altar.backends.local.render import BACKEND_LABEL, TIMEOUT_LABEL, render_request
from altar.backends.local.runtime import (
    ContainerDetail,
    ContainerEvent,
    ContainerNotFoundError,
    ContainerRequest,
    ContainerSummary,
    DockerRuntime,
    EngineRefusedError,
)
from altar.backends.local.staging import StageAction

if TYPE_CHECKING:
    from altar.backends.local.sdk_runtime import DockerSdkRuntime

__all__ = [
    "BACKEND_LABEL",
    "DATA_ROOT_ENV",
    "LOG_TAIL_LINES",
    "TIMEOUT_LABEL",
    "ContainerDetail",
    "ContainerEvent",
    "ContainerNotFoundError",
    "ContainerRequest",
    "ContainerSummary",
    "DockerRuntime",
    "DockerSdkRuntime",
    "EngineRefusedError",
    "LocalDockerExecutionBackend",
    "StageAction",
    "__version__",
    "render_request",
]


def __getattr__(name: str) -> Any:
    """``DockerSdkRuntime`` on first access (it imports the docker SDK)."""
    if name == "DockerSdkRuntime":
        from altar.backends.local.sdk_runtime import DockerSdkRuntime

        return DockerSdkRuntime
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
