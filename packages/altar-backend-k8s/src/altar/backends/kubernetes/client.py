"""Deprecated module name, kept for one release: import from
``altar.backends.kubernetes.sdk_runtime``.

Importing it warns (``DeprecationWarning``); it is removed in the release after next.
"""

from __future__ import annotations

import warnings

from altar.backends.kubernetes.sdk_runtime import ClientRuntime

__all__ = ["ClientRuntime"]

warnings.warn(
    "altar.backends.kubernetes.client is deprecated; "
    "import from altar.backends.kubernetes.sdk_runtime",
    DeprecationWarning,
    stacklevel=2,
)
