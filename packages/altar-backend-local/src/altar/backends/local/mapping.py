"""Old name of :mod:`altar.backends.local.render`, kept for one release (altar 0.4).

Import from ``altar.backends.local.render`` instead. No warning is raised; the module goes away
in the release after next.
"""

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
