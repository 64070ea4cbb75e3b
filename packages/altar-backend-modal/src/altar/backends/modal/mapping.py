"""Deprecated module name: the renderer is :mod:`.render`, the classifier :mod:`.classify`.

Kept so code importing ``altar.backends.modal.mapping`` keeps working; removed in 0.3.
"""

from __future__ import annotations

import warnings

from altar.backends.modal.classify import status_from_result
from altar.backends.modal.render import (
    DEFAULT_POOL_ACCELERATORS,
    MODAL_MAX_SANDBOX_TIMEOUT_S,
    check_accelerators,
    modal_gpu,
    modal_timeout,
    sandbox_request,
    volume_path,
)

__all__ = [
    "DEFAULT_POOL_ACCELERATORS",
    "MODAL_MAX_SANDBOX_TIMEOUT_S",
    "check_accelerators",
    "modal_gpu",
    "modal_timeout",
    "sandbox_request",
    "status_from_result",
    "volume_path",
]

warnings.warn(
    "altar.backends.modal.mapping is deprecated; import from altar.backends.modal.render "
    "(spec → sandbox request) and altar.backends.modal.classify (result → status)",
    DeprecationWarning,
    stacklevel=2,
)
