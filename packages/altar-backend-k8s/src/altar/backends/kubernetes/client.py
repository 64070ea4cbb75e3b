"""Import shim, kept for one release: the real runtime moved to :mod:`.sdk_runtime`.

This module will be removed in the next release.
"""

from altar.backends.kubernetes.sdk_runtime import ClientRuntime

__all__ = ["ClientRuntime"]
