"""Deprecated module name: the real runtime is :mod:`altar.backends.modal.sdk_runtime`.

Kept so code importing ``altar.backends.modal.sdk`` keeps working; removed in 0.3.
"""

from __future__ import annotations

import warnings

from altar.backends.modal.sdk_runtime import (
    VERIFIED_SDK_VERSIONS,
    ModalSdkRuntime,
    result_from_proto,
)

__all__ = ["VERIFIED_SDK_VERSIONS", "ModalSdkRuntime", "result_from_proto"]

warnings.warn(
    "altar.backends.modal.sdk is deprecated; import ModalSdkRuntime from "
    "altar.backends.modal.sdk_runtime",
    DeprecationWarning,
    stacklevel=2,
)
