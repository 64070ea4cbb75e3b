"""Pure rendering: a :class:`~altar.execution.ContainerTaskSpec` → the Engine API create request.

:func:`render_request` maps a spec onto a :class:`~altar.backends.local.runtime.ContainerRequest`
(checking what the engine cannot be asked for); :func:`create_body` turns that into the exact JSON
body of ``POST /containers/create`` that the real runtime sends, so the tests compare it with a
saved reference file.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

from altar.backends.local.runtime import ContainerRequest
from altar.execution import CONTAINER_MOUNT_ROOT, ContainerTaskSpec, UnsupportedCapabilityError
from altar.execution.labels import (
    LABEL_ATTEMPT,
    LABEL_RUN,
    LABEL_SUBMISSION,
    LABEL_TASK,
    is_submission_key,
)

__all__ = [
    "ATTEMPT_LABEL",
    "BACKEND_LABEL",
    "BACKEND_LABEL_VALUE",
    "CONTAINER_NAME_PREFIX",
    "RESERVED_LABELS",
    "RUN_LABEL",
    "SUBMISSION_LABEL",
    "TASK_LABEL",
    "TIMEOUT_LABEL",
    "contained_host_path",
    "container_name",
    "create_body",
    "create_body_json",
    "host_path",
    "memory_bytes",
    "nano_cpus",
    "render_request",
    "timeout_from_labels",
]

#: Identity label on every container this backend starts (lists and events filter on it).
BACKEND_LABEL = "altar.backend"
BACKEND_LABEL_VALUE = "local"
#: The task's wall-clock limit in seconds (same key as altar 0.3.0, so its containers read too).
TIMEOUT_LABEL = "altar.timeout_s"
RESERVED_LABELS = frozenset({BACKEND_LABEL, TIMEOUT_LABEL})
#: The runner's identity labels (issue 13; altar-core's names), passed through unchanged.
RUN_LABEL = LABEL_RUN
TASK_LABEL = LABEL_TASK
ATTEMPT_LABEL = LABEL_ATTEMPT
SUBMISSION_LABEL = LABEL_SUBMISSION
#: A submission key names its container: ``altar-`` and the key's 32 lowercase hex characters.
CONTAINER_NAME_PREFIX = "altar-"

_GIB = 1024**3
_MIN_NANO_CPUS = 10_000_000  # 0.01 CPUs: the engine's and the kernel's CFS quota floor


def memory_bytes(memory_gb: float) -> int:
    """``memory_gb`` is GiB, as on every backend; Docker takes bytes."""
    return math.ceil(memory_gb * _GIB)


def nano_cpus(cpu: float) -> int:
    """Docker's CPU quota unit: 1e-9 CPUs."""
    return round(cpu * 1_000_000_000)


def host_path(data_root: str, logical_path: str) -> str:
    """Where a logical path's file lives on this host.

    Refuses a path that leaves the data root, and one that names the data root itself (a
    transfer is one file in it).
    """
    root = os.path.normpath(data_root)
    path = os.path.normpath(os.path.join(root, logical_path.lstrip("/")))
    if path == root:
        raise ValueError(
            f"logical path {logical_path!r} names the data root itself, not a file in it"
        )
    if not _inside(path, root):
        raise ValueError(f"logical path {logical_path!r} leaves the data root {data_root!r}")
    return path


def _inside(path: str, root: str) -> bool:
    """``path`` is below ``root`` (both normalised)."""
    return path.startswith(root.rstrip(os.sep) + os.sep)


def contained_host_path(data_root: str, logical_path: str, *, follow_last: bool = False) -> str:
    """:func:`host_path`, also refusing a path a symlink leads out of the data root.

    Tasks mount the data root read-write and run as its owner, so a task can replace a
    directory in it (or a file, which ``follow_last`` checks too) with a symlink to any host
    path; the backend must not then write, delete or read there on the task's behalf.
    """
    path = host_path(data_root, logical_path)
    lexical_root = os.path.normpath(data_root)
    root = os.path.realpath(data_root)
    probe = path if follow_last else os.path.dirname(path)
    while probe != lexical_root and not os.path.lexists(probe):
        probe = os.path.dirname(probe)  # only what exists can be a symlink
    real = os.path.realpath(probe)
    if real != root and not _inside(real, root):
        raise ValueError(
            f"logical path {logical_path!r} leads outside the data root {data_root!r} through "
            f"a symlink ({probe!r} resolves to {real!r}); a task may have made it"
        )
    return path


def timeout_from_labels(labels: dict[str, str]) -> int | None:
    """The limit a container carries, or None (no label, or not a positive integer)."""
    value = labels.get(TIMEOUT_LABEL, "")
    if value.isascii() and value.isdigit() and int(value) > 0:
        return int(value)
    return None


def container_name(labels: dict[str, str]) -> str | None:
    """The container's deterministic name for the spec's submission key, or None without one.

    One name per key makes a second create of the same submission fail with a conflict
    instead of starting a second container (issue 13). A key that is not 32 lowercase hex
    characters (what the runner mints) is refused, never folded into a name.
    """
    key = labels.get(SUBMISSION_LABEL)
    if key is None:
        return None
    if not is_submission_key(key):
        raise ValueError(
            f"label {SUBMISSION_LABEL!r} must be a submission key of 32 lowercase hex "
            f"characters (the runner's), got {key!r}"
        )
    return CONTAINER_NAME_PREFIX + key


def render_request(
    spec: ContainerTaskSpec,
    *,
    data_root: str,
    user: str | None,
    network_mode: str,
    gpu_devices: int | None,
) -> ContainerRequest:
    """The container that runs ``spec``: image and command unchanged, limits exact.

    Raises UnsupportedCapabilityError for what the engine cannot be asked for, and ValueError
    for a spec label that would override one of the backend's own labels.
    """
    clashes = sorted(RESERVED_LABELS.intersection(spec.labels))
    if clashes:
        raise ValueError(
            f"label(s) {', '.join(map(repr, clashes))} are reserved by the local backend "
            "(they carry its identity and the task's deadline); rename them in the spec"
        )
    gpu_count = 0
    if spec.resources.gpu is not None:
        gpu_count = spec.resources.count
        if gpu_devices is not None and gpu_count > gpu_devices:
            raise UnsupportedCapabilityError(
                f"task {spec.kind!r} asks for {gpu_count} GPU(s) in pool "
                f"{spec.resources.gpu!r}, but this Docker host has {gpu_devices}; a GPU task is "
                "never run on CPU instead",
                capability="gpu",
            )
    cpu_quota = nano_cpus(spec.resources.cpu) if spec.resources.cpu is not None else None
    if cpu_quota is not None and cpu_quota < _MIN_NANO_CPUS:
        # A quota of 0 reads as no limit at all, and the kernel refuses one below 1 ms per
        # 100 ms period: either way the request cannot be honoured as asked.
        raise UnsupportedCapabilityError(
            f"task {spec.kind!r} asks for {spec.resources.cpu!r} CPUs, but Docker cannot limit "
            "a container to fewer than 0.01 CPUs; ask for at least 0.01",
            capability="cpu",
        )
    labels = dict(spec.labels)
    labels[BACKEND_LABEL] = BACKEND_LABEL_VALUE
    # Always set, empty for no limit: the engine merges the image's labels into the
    # container's, so an image carrying this label (a `docker commit` of a task) would
    # otherwise impose its deadline on a task that has none.
    labels[TIMEOUT_LABEL] = str(spec.timeout_s) if spec.timeout_s is not None else ""
    return ContainerRequest(
        image=spec.image,
        command=list(spec.command),
        labels=labels,
        environment=dict(spec.env),
        user=user,
        nano_cpus=cpu_quota,
        memory_bytes=(
            memory_bytes(spec.resources.memory_gb) if spec.resources.memory_gb is not None else None
        ),
        gpu_count=gpu_count,
        binds={data_root: CONTAINER_MOUNT_ROOT},
        network_mode=network_mode,
        name=container_name(spec.labels),
    )


def create_body(request: ContainerRequest) -> dict[str, Any]:
    """The ``POST /containers/create`` body for ``request`` (what ``docker create`` would send).

    The command replaces the image's ``CMD`` and keeps its ``ENTRYPOINT``; memory swap equals
    the memory limit, so the limit is real; output streams are attached so the engine keeps the
    logs ``failure_detail`` reads.
    """
    host_config: dict[str, Any] = {
        "Mounts": [
            {"Target": target, "Source": source, "Type": "bind", "ReadOnly": False}
            for source, target in request.binds.items()
        ],
        "NetworkMode": request.network_mode,
    }
    if request.nano_cpus is not None:
        host_config["NanoCpus"] = request.nano_cpus
    if request.memory_bytes is not None:
        host_config["Memory"] = request.memory_bytes
        host_config["MemorySwap"] = request.memory_bytes
    if request.gpu_count:
        host_config["DeviceRequests"] = [
            {
                "Driver": "",
                "Count": request.gpu_count,
                "DeviceIDs": [],
                "Capabilities": [["gpu"]],
                "Options": {},
            }
        ]
    return {
        "Image": request.image,
        "Cmd": list(request.command),
        "Env": [f"{key}={value}" for key, value in request.environment.items()],
        "Labels": dict(request.labels),
        "User": request.user or "",
        "AttachStdout": True,
        "AttachStderr": True,
        "HostConfig": host_config,
    }


def create_body_json(request: ContainerRequest) -> str:
    """:func:`create_body` as stable, reviewable JSON text (the saved reference files), with
    the container name the request is sent with (``?name=``) under ``"//name"``."""
    body: dict[str, Any] = {"//name": request.name, **create_body(request)}
    return json.dumps(body, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
