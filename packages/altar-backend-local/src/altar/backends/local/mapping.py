"""Deprecated module name, kept for one release: import from
``altar.backends.local.render``.

Importing it warns (``DeprecationWarning``); it is removed in the release after next.
"""

from __future__ import annotations

import warnings

from altar.backends.local.render import (
    BACKEND_LABEL,
    BACKEND_LABEL_VALUE,
    RESERVED_LABELS,
    TIMEOUT_LABEL,
    contained_host_path,
    host_path,
    memory_bytes,
    nano_cpus,
    render_request,
    timeout_from_labels,
)

__all__ = [
    "BACKEND_LABEL",
    "BACKEND_LABEL_VALUE",
    "RESERVED_LABELS",
    "TIMEOUT_LABEL",
    "contained_host_path",
    "host_path",
    "memory_bytes",
    "nano_cpus",
    "render_request",
    "timeout_from_labels",
]

warnings.warn(
    "altar.backends.local.mapping is deprecated; import from altar.backends.local.render",
    DeprecationWarning,
    stacklevel=2,
)
