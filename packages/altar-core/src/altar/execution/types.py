"""Value types of the execution contract.

Field names, defaults and validation messages follow altar 0.3.0 so that code written for it
works after changing imports. Additions: ``ResourceRequest.cpu``, ``ContainerTaskSpec.env`` and
stricter validation: labels and env are ``str -> str`` (env names without ``=``), memory and
cpu positive and finite, ``gpu`` a non-empty pool name, ``kind``/``image``/``uri``/``logical_path``
non-empty strings. A wrong type raises TypeError, a wrong value ValueError; 0.3.0's messages
are kept word for word where it had one.
"""

from __future__ import annotations

import enum
import math
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CONTAINER_MOUNT_ROOT",
    "PROVIDER_ENDINGS",
    "Capacity",
    "ContainerTaskSpec",
    "GpuPool",
    "PathResolver",
    "ResourceRequest",
    "TaskFailure",
    "TaskHandle",
    "TaskLogs",
    "TaskState",
    "TaskStatus",
    "Transfer",
    "is_sha256_digest",
    "spec_from_dict",
    "spec_to_dict",
]

CONTAINER_MOUNT_ROOT = "/mnt/volume"
_SHA256_RE = re.compile(r"sha256:[0-9a-f]{64}")


def is_sha256_digest(value: object) -> bool:
    """True only for a ``str`` that is exactly ``sha256:`` followed by 64 lowercase hex digits."""
    return isinstance(value, str) and _SHA256_RE.fullmatch(value) is not None


def _check_text(value: object, field_name: str) -> None:
    if not isinstance(value, str) or not value:
        raise TypeError(f"{field_name} must be a non-empty string, got {value!r}")


def _check_str_map(value: object, field_name: str) -> None:
    if not isinstance(value, Mapping):
        raise TypeError(f"{field_name} must be a mapping of str to str, got {type(value).__name__}")
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise TypeError(
                f"{field_name} must map str to str; {key!r}: {item!r} is "
                f"{type(key).__name__} -> {type(item).__name__}"
            )


class GpuPool(enum.StrEnum):
    """Well-known accelerator pool names; ``ResourceRequest.gpu`` stays an open string."""

    NORMAL_GPU = "gpu"


@dataclass(frozen=True)
class ResourceRequest:
    """What one task needs: ``gpu`` names a pool (None = CPU only), ``count`` exact devices."""

    gpu: str | None = None
    count: int = 1
    memory_gb: float | None = None
    cpu: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int):
            raise TypeError(f"resource count must be an integer, got {self.count!r}")
        if self.count < 1:
            raise ValueError(f"resource count must be at least 1, got {self.count}")
        if self.gpu is not None and (not isinstance(self.gpu, str) or not self.gpu):
            raise ValueError(
                f"resources.gpu must be a non-empty pool name or None, got {self.gpu!r}"
            )
        for name in ("memory_gb", "cpu"):
            value = getattr(self, name)
            if value is None:
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not 0 < value < math.inf
            ):
                raise ValueError(
                    f"resources.{name} must be a positive number or None, got {value!r}"
                )


@dataclass(frozen=True)
class Transfer:
    """One input or output file: where it lives (``uri``) and where the task sees it."""

    uri: str
    logical_path: str
    locality_key: str | None = None
    digest: str | None = None

    def __post_init__(self) -> None:
        _check_text(self.uri, "uri")
        _check_text(self.logical_path, "logical_path")
        if self.locality_key is not None and not isinstance(self.locality_key, str):
            raise TypeError(f"locality_key must be a string or None, got {self.locality_key!r}")
        if self.digest is not None and not is_sha256_digest(self.digest):
            raise ValueError("transfer digest must be sha256:<64 lowercase hex>")


class PathResolver:
    """Maps a transfer's logical path to the path a task sees.

    With an empty ``mount_root`` the logical path is returned unchanged (0.3.0 behaviour).
    Otherwise the path is joined under the root; a path that would leave the root through
    ``..`` is refused instead of silently escaping it.
    """

    def __init__(self, mount_root: str = "") -> None:
        self.mount_root = mount_root

    def resolve(self, logical_path: str) -> str:
        if not self.mount_root:
            return logical_path
        root = posixpath.normpath(self.mount_root)
        resolved = posixpath.normpath(f"{root.rstrip('/')}/{logical_path.lstrip('/')}")
        if root != "/" and resolved != root and not resolved.startswith(root.rstrip("/") + "/"):
            raise ValueError(
                f"logical path {logical_path!r} leaves the mount root {self.mount_root!r}"
            )
        return resolved

    def __repr__(self) -> str:
        return f"PathResolver({self.mount_root!r})"


@dataclass(frozen=True)
class ContainerTaskSpec:
    """One container task: image, argv, resources, inputs/outputs, labels, env and limits."""

    kind: str
    image: str
    command: list[str]
    labels: dict[str, str] = field(default_factory=dict)
    inputs: list[Transfer] = field(default_factory=list)
    outputs: list[Transfer] = field(default_factory=list)
    resources: ResourceRequest = field(default_factory=ResourceRequest)
    timeout_s: int | None = None
    avoid_hosts: tuple[str, ...] = ()
    plugin_identity: Any = None
    env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.timeout_s is not None:
            if isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, int):
                raise TypeError(
                    f"timeout_s must be a whole number of seconds, got {self.timeout_s!r}"
                )
            if self.timeout_s < 1:
                raise ValueError(
                    f"timeout_s must be a positive number of seconds, got {self.timeout_s}"
                )
        _check_text(self.kind, "kind")
        _check_text(self.image, "image")
        if not isinstance(self.command, list) or not all(isinstance(a, str) for a in self.command):
            raise TypeError(f"command must be a list of str, got {self.command!r}")
        if not isinstance(self.avoid_hosts, tuple) or not all(
            isinstance(h, str) for h in self.avoid_hosts
        ):
            raise TypeError(f"avoid_hosts must be a tuple of str, got {self.avoid_hosts!r}")
        _check_str_map(self.labels, "labels")
        _check_str_map(self.env, "env")
        for key, value in self.env.items():
            if not key or "=" in key or "\0" in key or "\0" in value:
                raise ValueError(
                    f"env name {key!r} must be non-empty without '=' or NUL, and values without NUL"
                )
        for name in ("inputs", "outputs"):
            for item in getattr(self, name):
                if not isinstance(item, Transfer):
                    raise TypeError(f"{name} must hold Transfer objects, got {item!r}")
        if not isinstance(self.resources, ResourceRequest):
            raise TypeError(f"resources must be a ResourceRequest, got {self.resources!r}")
        check = getattr(self.plugin_identity, "assert_altar_compatible", None)
        if callable(check):
            check()


@dataclass(frozen=True)
class TaskHandle:
    """A durable reference to one submitted task; ``external_id`` is opaque to callers."""

    backend: str
    external_id: str
    labels: dict[str, str] = field(default_factory=dict)
    plugin_identity: Any = None


class TaskState(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"

    @property
    def is_terminal(self) -> bool:
        return self in (TaskState.SUCCEEDED, TaskState.FAILED)


#: What ``TaskFailure.provider_ending`` may say: the provider, not the task, ended the attempt.
PROVIDER_ENDINGS: dict[str, str] = {
    "preempted": "the scheduler preempted it for other work",
    "node_lost": "the node it ran on failed, was lost or failed to boot",
    "evicted": "the provider evicted it (node pressure, drain, disruption)",
    "engine_lost": "the container engine running it died or restarted",
    "spot_reclaimed": "its spot or preemptible capacity was reclaimed",
}


@dataclass(frozen=True)
class TaskFailure:
    """Why a task failed, with a stable ``reason`` code.

    Reason codes shared by every backend:

    - ``exit_<n>``: the command exited with code n (``exit_code`` set; deterministic);
    - ``timeout``: it ran past ``timeout_s``;
    - ``oom_killed``: killed for exceeding its memory limit;
    - ``input_digest_mismatch``: an input failed its in-task digest check (deterministic);
    - ``container_missing``: the provider can no longer find the task (terminal, retryable);
    - ``job_failed``: the provider failed it without finer detail;
    - ``cancelled``: cancelled by the caller.

    ``provider_ending`` (an addition to 0.3.0, None by default) says the infrastructure ended
    the attempt, not the task: one of :data:`PROVIDER_ENDINGS`. ``reason`` stays what the
    backend reported before the field existed (``job_failed``, ``container_missing``), so a
    consumer that reads only ``reason`` sees what it always saw; such a failure is never
    deterministic. The runner retries it from a budget of its own (``max_provider_retries``).
    """

    reason: str
    detail: str | None = None
    deterministic: bool = False
    exit_code: int | None = None
    provider_ending: str | None = None

    def __post_init__(self) -> None:
        if self.provider_ending is None:
            return
        if self.provider_ending not in PROVIDER_ENDINGS:
            known = ", ".join(PROVIDER_ENDINGS)
            raise ValueError(
                f"provider_ending must be one of {known}, got {self.provider_ending!r}"
            )
        if self.deterministic:
            raise ValueError("a failure the provider caused (provider_ending) is not deterministic")
        if self.reason.startswith("exit_"):
            raise ValueError(
                f"a failure the provider caused has no exit status reason, got {self.reason!r}"
            )


@dataclass(frozen=True)
class TaskStatus:
    """One poll result; ``failure`` is set if and only if ``state`` is FAILED.

    ``started_at`` and ``finished_at`` (optional, seconds since the epoch) are the provider's
    own times for when the task's process started and ended, where the provider records them
    (a container's ``State.StartedAt``, a Job's ``startTime``). The runner prefers them to the
    times it observes, which are late by a poll interval, and by a whole outage or restart.
    A backend that does not know them leaves them None (as 0.3.0 backends do).
    """

    handle: TaskHandle
    state: TaskState
    failure: TaskFailure | None = None
    started_at: float | None = None
    finished_at: float | None = None

    @property
    def deterministic_failure(self) -> bool:
        return self.failure is not None and self.failure.deterministic

    @property
    def error(self) -> str | None:
        return self.failure.detail if self.failure is not None else None


@dataclass(frozen=True)
class TaskLogs:
    """What one attempt wrote, as the provider kept it (see ``ExecutionBackend.task_logs``)."""

    stdout: str
    stderr: str


@dataclass(frozen=True)
class Capacity:
    """Free slots per pool (``"cpu"`` for CPU-only work); empty means autoscaling or unknown."""

    pools: dict[str, int] = field(default_factory=dict)

    def free_for(self, resources: ResourceRequest) -> int:
        return self.pools.get(resources.gpu or "cpu", 0)


def _transfer_to_dict(transfer: Transfer) -> dict[str, Any]:
    return {
        "uri": transfer.uri,
        "logical_path": transfer.logical_path,
        "locality_key": transfer.locality_key,
        "digest": transfer.digest,
    }


def spec_to_dict(spec: ContainerTaskSpec) -> dict[str, Any]:
    """JSON-ready form of a spec.

    Every field round-trips. ``env``, ``resources.cpu`` and ``avoid_hosts`` (which 0.3.0 never
    persisted) are written only when set, so a spec that uses none of them renders exactly as
    0.3.0 rendered it and keeps any name derived from this form (Kubernetes Job names).
    """
    resources: dict[str, Any] = {
        "gpu": spec.resources.gpu,
        "count": spec.resources.count,
        "memory_gb": spec.resources.memory_gb,
    }
    if spec.resources.cpu is not None:
        resources["cpu"] = spec.resources.cpu
    identity = spec.plugin_identity
    to_dict = getattr(identity, "to_dict", None)
    data: dict[str, Any] = {
        "kind": spec.kind,
        "image": spec.image,
        "command": list(spec.command),
        "labels": dict(spec.labels),
        "inputs": [_transfer_to_dict(t) for t in spec.inputs],
        "outputs": [_transfer_to_dict(t) for t in spec.outputs],
        "resources": resources,
        "timeout_s": spec.timeout_s,
        "plugin_identity": to_dict() if callable(to_dict) else identity,
    }
    if spec.env:
        data["env"] = dict(spec.env)
    if spec.avoid_hosts:
        data["avoid_hosts"] = list(spec.avoid_hosts)
    return data


def spec_from_dict(data: Mapping[str, Any]) -> ContainerTaskSpec:
    """Inverse of :func:`spec_to_dict`; unknown top-level keys are ignored (0.3.0 behaviour)."""
    if not isinstance(data, Mapping):
        raise TypeError(f"a task spec must be a mapping, got {type(data).__name__}")
    missing = [key for key in ("kind", "image", "command") if key not in data]
    if missing:
        raise ValueError(f"task spec is missing required field(s): {', '.join(missing)}")
    resources = data.get("resources") or {}
    return ContainerTaskSpec(
        kind=data["kind"],
        image=data["image"],
        command=list(data.get("command") or []),
        labels=dict(data.get("labels") or {}),
        inputs=[Transfer(**t) for t in data.get("inputs") or []],
        outputs=[Transfer(**t) for t in data.get("outputs") or []],
        resources=ResourceRequest(
            gpu=resources.get("gpu"),
            count=resources.get("count", 1),
            memory_gb=resources.get("memory_gb"),
            cpu=resources.get("cpu"),
        ),
        timeout_s=data.get("timeout_s"),
        plugin_identity=data.get("plugin_identity"),
        env=dict(data.get("env") or {}),
        avoid_hosts=tuple(data.get("avoid_hosts") or ()),
    )
