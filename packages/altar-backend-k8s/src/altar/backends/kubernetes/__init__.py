"""Altar execution backend for Kubernetes Jobs (``altar.execution_backends: kubernetes``)."""

from altar.backends.kubernetes.__about__ import __version__
from altar.backends.kubernetes.backend import NAMESPACE_ENV, PVC_ENV, KubernetesExecutionBackend
from altar.backends.kubernetes.classify import classify_failure
from altar.backends.kubernetes.naming import (
    MANAGED_BY_LABEL,
    format_external_id,
    job_name,
    parse_external_id,
)
from altar.backends.kubernetes.render import (
    DEFAULT_DIGEST_VERIFIER_IMAGE,
    GPU_RESOURCE_KEY,
    MANIFEST_DIGEST_ANNOTATION,
    ManifestOptions,
    PoolConfig,
    manifest_digest,
    render_manifest,
)
from altar.backends.kubernetes.runtime import AsyncKubernetesRuntime, KubernetesRuntime
from altar.backends.kubernetes.values import (
    VERIFY_INPUTS_CONTAINER,
    ContainerExit,
    JobCondition,
    K8sApiError,
    K8sConfigError,
    K8sJobExistsError,
    K8sJobInfo,
    K8sPodInfo,
)
from altar.backends.kubernetes.wire import job_info_from_object, pod_info_from_object

__all__ = [
    "DEFAULT_DIGEST_VERIFIER_IMAGE",
    "GPU_RESOURCE_KEY",
    "MANAGED_BY_LABEL",
    "MANIFEST_DIGEST_ANNOTATION",
    "NAMESPACE_ENV",
    "PVC_ENV",
    "VERIFY_INPUTS_CONTAINER",
    "AsyncKubernetesRuntime",
    "ContainerExit",
    "JobCondition",
    "K8sApiError",
    "K8sConfigError",
    "K8sJobExistsError",
    "K8sJobInfo",
    "K8sPodInfo",
    "KubernetesExecutionBackend",
    "KubernetesRuntime",
    "ManifestOptions",
    "PoolConfig",
    "__version__",
    "classify_failure",
    "format_external_id",
    "job_info_from_object",
    "job_name",
    "manifest_digest",
    "parse_external_id",
    "pod_info_from_object",
    "render_manifest",
]
