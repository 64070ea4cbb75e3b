"""Import shim, kept for one release: the renderer moved to :mod:`.render`.

This module will be removed in the next release.
"""

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
