"""Deprecated module name, kept for one release: import from
``altar.backends.local.sdk_runtime``.

Importing it warns (``DeprecationWarning``); it is removed in the release after next.
"""

from __future__ import annotations

import warnings

from altar.backends.local.sdk_runtime import DockerSdkRuntime, describe_engine

__all__ = ["DockerSdkRuntime", "describe_engine"]

warnings.warn(
    "altar.backends.local.docker_runtime is deprecated; "
    "import from altar.backends.local.sdk_runtime",
    DeprecationWarning,
    stacklevel=2,
)
