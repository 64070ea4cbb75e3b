"""Pure rendering: a ``ContainerTaskSpec`` → the ``SandboxRequest`` for one ``Sandbox.create``.

Nothing here talks to Modal; a saved reference file (tests/references/) pins the output.
"""

from __future__ import annotations

import dataclasses
import json
import math
import posixpath
from collections.abc import Mapping

from altar.backends.modal.runtime import SandboxRequest
from altar.execution import (
    CONTAINER_MOUNT_ROOT,
    ContainerTaskSpec,
    UnsupportedCapabilityError,
)
from altar.execution.labels import LABEL_SUBMISSION, is_submission_key

__all__ = [
    "DEFAULT_POOL_ACCELERATORS",
    "MODAL_MAX_SANDBOX_TIMEOUT_S",
    "check_accelerators",
    "modal_gpu",
    "modal_timeout",
    "request_document",
    "sandbox_name",
    "sandbox_request",
    "submission_key_of",
    "volume_path",
]

MODAL_MAX_SANDBOX_TIMEOUT_S = 86400
"""Modal's maximum sandbox lifetime (24 hours). A spec without a limit gets exactly this."""

DEFAULT_POOL_ACCELERATORS: Mapping[str, str] = {"gpu": "A10G"}
"""Altar GPU pool name → Modal GPU type; pools not listed are refused."""


def modal_timeout(timeout_s: int | None) -> int:
    """The sandbox lifetime for a spec's ``timeout_s``: None → the 24 h maximum; never clamped."""
    if timeout_s is None:
        return MODAL_MAX_SANDBOX_TIMEOUT_S
    if timeout_s > MODAL_MAX_SANDBOX_TIMEOUT_S:
        raise UnsupportedCapabilityError(
            f"timeout_s={timeout_s} exceeds Modal's maximum sandbox lifetime of "
            f"{MODAL_MAX_SANDBOX_TIMEOUT_S}s (24 hours); lower the timeout or split the task",
            capability="timeout_s",
        )
    return timeout_s


def modal_gpu(pool: str | None, count: int, accelerators: Mapping[str, str]) -> str | None:
    """``"TYPE:COUNT"`` for a GPU pool, always with the exact count; None for CPU-only work."""
    if pool is None:
        return None
    accelerator = accelerators.get(pool)
    if accelerator is None:
        known = ", ".join(sorted(accelerators)) or "none"
        raise UnsupportedCapabilityError(
            f"GPU pool {pool!r} has no Modal GPU type; pass pool_accelerators={{{pool!r}: "
            f"'<Modal GPU type, e.g. A100-80GB>'}} to the Modal backend (mapped pools: {known})",
            capability="gpu",
        )
    return f"{accelerator}:{count}"


def check_accelerators(accelerators: Mapping[str, str]) -> None:
    for pool, accelerator in accelerators.items():
        if not isinstance(accelerator, str) or not accelerator.strip() or ":" in accelerator:
            raise ValueError(
                f"pool_accelerators[{pool!r}] must be a Modal GPU type such as 'A100' or 'H100!' "
                f"without a count (the spec's resources.count supplies it), got {accelerator!r}"
            )


def volume_path(logical_path: str) -> str:
    """Where a logical path lives on the volume (relative to its root); refuses ``..`` escapes."""
    normalized = posixpath.normpath(logical_path.lstrip("/") or ".")
    if normalized == "." or normalized == ".." or normalized.startswith("../"):
        raise ValueError(f"logical path {logical_path!r} does not name a file on the volume")
    return normalized


SANDBOX_NAME_PREFIX = "altar-"


def submission_key_of(spec: ContainerTaskSpec) -> str | None:
    """The spec's ``altar.submission`` key, or None when it carries none (or a malformed one)."""
    key = spec.labels.get(LABEL_SUBMISSION)
    return key if key is not None and is_submission_key(key) else None


def sandbox_name(key: str) -> str:
    """The sandbox name for a submission key: ``altar-<32 hex>``.

    Modal keeps a name unique among an app's running sandboxes and accepts letters, digits,
    ``-``, ``.`` and ``_`` up to 63 characters; this name is 38.
    """
    if not is_submission_key(key):
        raise ValueError(f"not a submission key: {key!r}")
    return SANDBOX_NAME_PREFIX + key


def sandbox_request(
    spec: ContainerTaskSpec,
    *,
    app_name: str,
    volume_name: str | None,
    accelerators: Mapping[str, str],
    mount_root: str = CONTAINER_MOUNT_ROOT,
) -> SandboxRequest:
    """Map a spec onto one ``Sandbox.create`` call, or raise for what Modal cannot represent.

    CPU and memory become ``(request, limit)`` pairs with request == limit, so the memory
    limit is enforced (a bare memory value would only be a request). Memory is rounded up to
    whole MiB. Labels become sandbox tags; the command is passed unchanged. A spec carrying an
    ``altar.submission`` key names its sandbox after the key (:func:`sandbox_name`).
    """
    resources = spec.resources
    cpu = (float(resources.cpu), float(resources.cpu)) if resources.cpu is not None else None
    memory: tuple[int, int] | None = None
    if resources.memory_gb is not None:
        mib = math.ceil(resources.memory_gb * 1024)
        memory = (mib, mib)
    return SandboxRequest(
        app_name=app_name,
        image=spec.image,
        command=tuple(spec.command),
        timeout_s=modal_timeout(spec.timeout_s),
        env=dict(spec.env),
        tags=dict(spec.labels),
        cpu=cpu,
        memory_mib=memory,
        gpu=modal_gpu(resources.gpu, resources.count, accelerators),
        volume_name=volume_name,
        mount_root=mount_root,
        name=sandbox_name(key) if (key := submission_key_of(spec)) is not None else None,
    )


def request_document(request: SandboxRequest) -> str:
    """The request as stable, reviewable JSON text (what the saved reference file holds)."""
    fields = dataclasses.asdict(request)
    return json.dumps(fields, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
