"""Deprecated module name, kept for one release: import from
``altar.backends.kubernetes.render`` (and its siblings).

Importing it warns (``DeprecationWarning``); it is removed in the release after next.
"""

from __future__ import annotations

import warnings

from altar.backends.kubernetes.render import (
    CPU_POOL,
    DEFAULT_DIGEST_VERIFIER_IMAGE,
    GPU_RESOURCE_KEY,
    MANIFEST_DIGEST_ANNOTATION,
    POOL_ANNOTATION,
    ManifestOptions,
    PoolConfig,
    add_input_verification,
    annotate_manifest_digest,
    build_job_manifest,
    manifest_digest,
    plain_json,
    render_manifest,
)
from altar.backends.kubernetes.values import MAIN_CONTAINER, VERIFY_INPUTS_CONTAINER

__all__ = [
    "CPU_POOL",
    "DEFAULT_DIGEST_VERIFIER_IMAGE",
    "GPU_RESOURCE_KEY",
    "MAIN_CONTAINER",
    "MANIFEST_DIGEST_ANNOTATION",
    "POOL_ANNOTATION",
    "VERIFY_INPUTS_CONTAINER",
    "ManifestOptions",
    "PoolConfig",
    "add_input_verification",
    "annotate_manifest_digest",
    "build_job_manifest",
    "manifest_digest",
    "plain_json",
    "render_manifest",
]

warnings.warn(
    "altar.backends.kubernetes.manifest is deprecated; "
    "import from altar.backends.kubernetes.render and .values",
    DeprecationWarning,
    stacklevel=2,
)
