"""Rendering a ContainerTaskSpec as a batch/v1 Job manifest (pure functions).

The rendered Job is what the backend creates and what its manifest digest covers. Rendering
raises UnsupportedCapabilityError, before any API call, for anything the options cannot
express: a label Kubernetes would refuse, a GPU pool that is not configured, a
content-addressed input no volume of the task mounts.
"""

from __future__ import annotations

import copy
import hashlib
import json
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from altar.backends.kubernetes.naming import (
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    is_valid_label,
    job_name,
    split_identity,
    validate_label_key,
    validate_labels,
)
from altar.backends.kubernetes.values import MAIN_CONTAINER, VERIFY_INPUTS_CONTAINER
from altar.execution import (
    CONTAINER_MOUNT_ROOT,
    ContainerTaskSpec,
    PathResolver,
    UnsupportedCapabilityError,
    verify_files_script,
)

__all__ = [
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

MANIFEST_DIGEST_ANNOTATION = "altar.kundajelab.org/manifest-sha256"
POOL_ANNOTATION = "altar.kundajelab.org/pool"
GPU_RESOURCE_KEY = "nvidia.com/gpu"
DEFAULT_DIGEST_VERIFIER_IMAGE = (
    "busybox:1.36@sha256:73aaf090f3d85aa34ee199857f03fa3a95c8ede2ffd4cc2cdb5b94e566b11662"
)
CPU_POOL = "cpu"
_VOLUME_NAME = "main-volume"
_ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")


@dataclass(frozen=True)
class PoolConfig:
    """Where one pool's tasks run: node selector, tolerations and (GPU pools) resource key."""

    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: Sequence[Mapping[str, Any]] = ()
    resource_key: str | None = None  # None: ManifestOptions.gpu_resource_key

    @classmethod
    def coerce(cls, pool: str, value: PoolConfig | Mapping[str, Any]) -> PoolConfig:
        """Accept a PoolConfig or a plain mapping (as written in a run spec's options)."""
        if isinstance(value, PoolConfig):
            return value
        unknown = set(value) - {"node_selector", "tolerations", "resource_key"}
        if unknown:
            raise ValueError(
                f"pool {pool!r}: unknown option(s) {sorted(unknown)}; use node_selector, "
                "tolerations and resource_key"
            )
        return cls(
            node_selector=dict(value.get("node_selector") or {}),
            tolerations=tuple(dict(t) for t in value.get("tolerations") or ()),
            resource_key=value.get("resource_key"),
        )


@dataclass(frozen=True)
class ManifestOptions:
    """Everything besides the spec that shapes a Job manifest."""

    mount_root: str = CONTAINER_MOUNT_ROOT
    pvc_name: str | None = None
    image_pull_policy: str = "IfNotPresent"
    backoff_limit: int = 0
    job_ttl_seconds_after_finished: int | None = 86400
    run_as_user: int | None = None
    run_as_group: int | None = None
    fs_group: int | None = None
    run_as_non_root: bool | None = None
    gpu_resource_key: str = GPU_RESOURCE_KEY
    pools: Mapping[str, PoolConfig] = field(default_factory=dict)
    pool_node_selectors: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    digest_verifier_image: str = DEFAULT_DIGEST_VERIFIER_IMAGE
    trust_verification_records: bool = True
    termination_message_policy: Literal["File", "FallbackToLogsOnError"] = "FallbackToLogsOnError"

    def __post_init__(self) -> None:
        if self.job_ttl_seconds_after_finished is not None and (
            self.job_ttl_seconds_after_finished < 0
        ):
            raise ValueError(
                "job_ttl_seconds_after_finished must be zero or more seconds, got "
                f"{self.job_ttl_seconds_after_finished}"
            )
        if self.backoff_limit < 0:
            raise ValueError(f"backoff_limit must be zero or more, got {self.backoff_limit}")
        if not posixpath.isabs(self.mount_root):
            raise ValueError(f"mount_root must be an absolute path, got {self.mount_root!r}")


def _quantity_memory(memory_gb: float) -> str:
    mebibytes = round(memory_gb * 1024)
    if mebibytes < 1:
        raise UnsupportedCapabilityError(
            f"memory_gb={memory_gb} is below 1 MiB, the smallest memory Kubernetes is asked for",
            capability="memory",
        )
    return f"{mebibytes}Mi"


def _quantity_cpu(cpu: float) -> str:
    millicores = round(cpu * 1000)
    if millicores < 1:
        raise UnsupportedCapabilityError(
            f"cpu={cpu} is below one millicore, the smallest CPU request Kubernetes accepts",
            capability="cpu",
        )
    return f"{millicores}m"


def _pool_config(spec: ContainerTaskSpec, options: ManifestOptions) -> PoolConfig:
    gpu = spec.resources.gpu
    pool = gpu or CPU_POOL
    config = options.pools.get(pool)
    if (
        gpu is not None
        and config is None
        and options.pools
        and gpu not in (options.pool_node_selectors)
    ):
        configured = ", ".join(sorted(p for p in options.pools if p != CPU_POOL)) or "none"
        raise UnsupportedCapabilityError(
            f"GPU pool {gpu!r} is not configured for this Kubernetes backend (configured GPU "
            f"pools: {configured}); add it to the backend's pools option, or request one of "
            "those pools",
            capability="gpu",
        )
    if config is not None and gpu is None and config.resource_key is not None:
        raise ValueError("pool 'cpu' configures CPU-only tasks and cannot set a resource_key")
    legacy = options.pool_node_selectors.get(gpu or "")
    selector = {**(legacy or {}), **(config.node_selector if config else {})}
    return PoolConfig(
        node_selector=selector,
        tolerations=tuple(config.tolerations) if config else (),
        resource_key=(config.resource_key if config else None) or options.gpu_resource_key,
    )


def _env(spec: ContainerTaskSpec) -> list[dict[str, str]]:
    for name in spec.env:
        if not _ENV_NAME.fullmatch(name):
            raise UnsupportedCapabilityError(
                f"environment variable name {name!r} is not accepted by every Kubernetes "
                "version: it must start with a letter, '_', '-' or '.' and contain only "
                "letters, digits, '_', '-' and '.'",
                capability="env",
            )
    # sorted: the manifest digest must not depend on the order a dict was built in
    return [{"name": name, "value": spec.env[name]} for name in sorted(spec.env)]


def build_job_manifest(
    spec: ContainerTaskSpec, options: ManifestOptions, *, name: str | None = None
) -> dict[str, Any]:
    """The Job for ``spec`` without input verification or the manifest digest annotation."""
    identity, user_labels = split_identity(spec.labels)
    validate_labels(user_labels)
    for key in identity:
        validate_label_key(key)
    # The runner's identity (run, task, attempt, submission key) goes where a label selector
    # finds it when the value is label-safe, and into an annotation otherwise (a run or task
    # id may hold characters or a length labels refuse).
    safe = {k: v for k, v in identity.items() if is_valid_label(k, v)}
    unsafe = {k: v for k, v in identity.items() if k not in safe}
    pool = _pool_config(spec, options)
    labels = {**user_labels, **safe, MANAGED_BY_LABEL: MANAGED_BY_VALUE}
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    if spec.resources.cpu is not None:
        requests["cpu"] = limits["cpu"] = _quantity_cpu(spec.resources.cpu)
    if spec.resources.memory_gb is not None:
        requests["memory"] = limits["memory"] = _quantity_memory(spec.resources.memory_gb)
    if spec.resources.gpu is not None:
        assert pool.resource_key is not None
        limits[pool.resource_key] = str(spec.resources.count)
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    container: dict[str, Any] = {
        "name": MAIN_CONTAINER,
        "image": spec.image,
        "imagePullPolicy": options.image_pull_policy,
        "args": list(spec.command),  # args, not command: the image's ENTRYPOINT is kept
        "terminationMessagePolicy": options.termination_message_policy,
    }
    if spec.env:
        container["env"] = _env(spec)
    if resources:
        container["resources"] = resources
    pod_spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    if options.pvc_name:
        container["volumeMounts"] = [{"name": _VOLUME_NAME, "mountPath": options.mount_root}]
        pod_spec["volumes"] = [
            {"name": _VOLUME_NAME, "persistentVolumeClaim": {"claimName": options.pvc_name}}
        ]
    security = {
        key: value
        for key, value in (
            ("runAsUser", options.run_as_user),
            ("runAsGroup", options.run_as_group),
            ("fsGroup", options.fs_group),
            ("runAsNonRoot", options.run_as_non_root),
        )
        if value is not None
    }
    if security:
        pod_spec["securityContext"] = security
    if pool.node_selector:
        pod_spec["nodeSelector"] = dict(pool.node_selector)
    if pool.tolerations:
        pod_spec["tolerations"] = [dict(t) for t in pool.tolerations]
    if spec.avoid_hosts:
        pod_spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "kubernetes.io/hostname",
                                    "operator": "NotIn",
                                    "values": sorted(set(spec.avoid_hosts)),
                                }
                            ]
                        }
                    ]
                }
            }
        }
    job_spec: dict[str, Any] = {
        "backoffLimit": options.backoff_limit,
        "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
    }
    if spec.timeout_s is not None:
        job_spec["activeDeadlineSeconds"] = spec.timeout_s
    if options.job_ttl_seconds_after_finished is not None:
        job_spec["ttlSecondsAfterFinished"] = options.job_ttl_seconds_after_finished
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name or job_name(spec),
            "labels": labels,
            "annotations": {POOL_ANNOTATION: spec.resources.gpu or CPU_POOL, **unsafe},
        },
        "spec": job_spec,
    }


def _main_container(manifest: Mapping[str, Any]) -> dict[str, Any]:
    containers = manifest["spec"]["template"]["spec"]["containers"]
    for container in containers:
        if container.get("name") == MAIN_CONTAINER:
            return dict(container)
    return dict(containers[0])


def _mounted(path: str, mounts: Sequence[Mapping[str, Any]]) -> bool:
    for mount in mounts:
        root = posixpath.normpath(str(mount.get("mountPath", "")))
        if path == root or path.startswith(root.rstrip("/") + "/"):
            return True
    return False


def add_input_verification(
    manifest: dict[str, Any], spec: ContainerTaskSpec, options: ManifestOptions
) -> dict[str, Any]:
    """Prepend the ``verify-inputs`` init container when ``spec`` has content-addressed inputs.

    It runs :func:`verify_files_script` on the mounted path of every input with a digest and
    mounts every volume the main container mounts. An input no such volume covers cannot be
    verified, so it is refused here instead of failing every task at run time.
    """
    resolver = PathResolver(options.mount_root)
    main = _main_container(manifest)
    mounts = list(main.get("volumeMounts") or [])
    lines: list[str] = []
    for transfer in spec.inputs:
        if transfer.digest is None:
            continue
        try:
            path = resolver.resolve(transfer.logical_path)
        except ValueError as error:
            raise UnsupportedCapabilityError(
                f"input {transfer.logical_path!r} carries a digest, but {error}, so no volume "
                "of the task holds it and the task cannot verify it",
                capability="input_digest_verification",
            ) from error
        if not _mounted(path, mounts):
            raise UnsupportedCapabilityError(
                f"input {transfer.logical_path!r} carries a digest, so the task must verify it "
                f"at {path}, but no volume of the task is mounted there; set pvc_name (or "
                "ALTAR_K8S_PVC) so the input's volume is mounted at the mount root",
                capability="input_digest_verification",
            )
        if "\n" in path:
            raise UnsupportedCapabilityError(
                f"input path {path!r} contains a newline, which the in-task digest check "
                "cannot name",
                capability="input_digest_verification",
            )
        line = f"{transfer.digest.removeprefix('sha256:')}  {path}"
        if line not in lines:
            lines.append(line)
    if not lines:
        return manifest
    script = verify_files_script(trust_records=options.trust_verification_records)
    verifier: dict[str, Any] = {
        "name": VERIFY_INPUTS_CONTAINER,
        "image": options.digest_verifier_image,
        "imagePullPolicy": options.image_pull_policy,
        "command": ["sh", "-c", script, VERIFY_INPUTS_CONTAINER, *lines],
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": copy.deepcopy(mounts),
    }
    # The pod's effective request is the max of its init and app containers, so giving the
    # verifier the main container's CPU and memory costs nothing and satisfies quotas that
    # require limits on every container.
    main_resources = main.get("resources") or {}
    verifier_resources = {
        kind: {k: v for k, v in values.items() if k in ("cpu", "memory")}
        for kind, values in main_resources.items()
        if kind in ("requests", "limits")
    }
    verifier_resources = {k: v for k, v in verifier_resources.items() if v}
    if verifier_resources:
        verifier["resources"] = verifier_resources
    pod_spec = manifest["spec"]["template"]["spec"]
    pod_spec["initContainers"] = [verifier, *(pod_spec.get("initContainers") or [])]
    return manifest


def plain_json(value: Any, path: str = "manifest") -> Any:
    """``value`` as plain JSON data; Kubernetes SDK model objects become camelCase dicts."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, Mapping):
        return {str(k): plain_json(v, f"{path}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_json(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if hasattr(value, "to_dict") and type(value).__module__.startswith("kubernetes."):
        from kubernetes.client import ApiClient  # the SDK's own camelCase serializer

        return plain_json(ApiClient().sanitize_for_serialization(value), path)  # type: ignore[no-untyped-call]
    raise TypeError(
        "build_manifest must return JSON-serializable data or Kubernetes SDK model objects; "
        f"{path} is a {type(value).__name__}"
    )


def manifest_digest(manifest: Mapping[str, Any]) -> str:
    """``sha256:<hex>`` of the canonical manifest JSON, as altar 0.3.0 computed it.

    Excluded: the digest annotation itself (an emptied annotations map is dropped),
    ``spec.ttlSecondsAfterFinished``, and the node affinity rendered from ``avoid_hosts``
    (advisory, and not part of the Job name either).
    """
    data = copy.deepcopy(plain_json(manifest))
    annotations = data.get("metadata", {}).get("annotations")
    if isinstance(annotations, dict):
        annotations.pop(MANIFEST_DIGEST_ANNOTATION, None)
        if not annotations:
            del data["metadata"]["annotations"]
    job_spec = data.get("spec", {})
    job_spec.pop("ttlSecondsAfterFinished", None)
    pod_spec = job_spec.get("template", {}).get("spec", {})
    affinity = pod_spec.get("affinity")
    if isinstance(affinity, dict) and affinity.get("nodeAffinity") is not None:
        node = affinity["nodeAffinity"].get("requiredDuringSchedulingIgnoredDuringExecution")
        terms = (node or {}).get("nodeSelectorTerms") or []
        if len(terms) == 1 and all(
            e.get("key") == "kubernetes.io/hostname" and e.get("operator") == "NotIn"
            for e in terms[0].get("matchExpressions") or []
        ):
            del pod_spec["affinity"]
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def annotate_manifest_digest(manifest: dict[str, Any]) -> str:
    """Set the manifest digest annotation on ``manifest`` and return the digest."""
    digest = manifest_digest(manifest)
    manifest.setdefault("metadata", {}).setdefault("annotations", {})[
        MANIFEST_DIGEST_ANNOTATION
    ] = digest
    return digest


def render_manifest(spec: ContainerTaskSpec, options: ManifestOptions) -> dict[str, Any]:
    """The complete Job the backend creates for ``spec`` (verification and digest included)."""
    manifest = build_job_manifest(spec, options)
    add_input_verification(manifest, spec, options)
    annotate_manifest_digest(manifest)
    return manifest
