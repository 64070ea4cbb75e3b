"""Altar execution backend for a Docker engine: ``local`` in ``altar.execution_backends``."""

from altar.backends.local.__about__ import __version__
from altar.backends.local.backend import DATA_ROOT_ENV, LOG_TAIL_LINES, LocalDockerExecutionBackend
from altar.backends.local.docker_runtime import DockerSdkRuntime
from altar.backends.local.mapping import BACKEND_LABEL, TIMEOUT_LABEL, render_request
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
