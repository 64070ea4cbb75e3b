"""Job names, handle ids and Kubernetes' label rules (pure functions)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence

from altar.execution import (
    RESERVED_LABEL_PREFIX,
    ContainerTaskSpec,
    UnsupportedCapabilityError,
    spec_to_dict,
)

__all__ = [
    "MANAGED_BY_LABEL",
    "MANAGED_BY_VALUE",
    "format_external_id",
    "identity_of",
    "is_identity_key",
    "job_name",
    "parse_external_id",
    "shared_selector",
    "split_identity",
    "validate_labels",
]

MANAGED_BY_LABEL = "altar.kundajelab.org/managed-by"
MANAGED_BY_VALUE = "altar"

_NAME_LIMIT = 63
_HASH_LENGTH = 12
_LABEL_NAME = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_UID = re.compile(r"[0-9a-fA-F-]{1,64}")

_VALUE_RULE = (
    "a label value must be at most 63 characters, empty or beginning and ending with a letter "
    "or digit, with only letters, digits, '-', '_' and '.' in between"
)
_NAME_RULE = (
    "the name part of a label key must be 1 to 63 characters, beginning and ending with a "
    "letter or digit, with only letters, digits, '-', '_' and '.' in between"
)
_PREFIX_RULE = (
    "a label key prefix (before '/') must be a DNS subdomain of at most 253 characters: "
    "lowercase letters, digits, '-' and '.', beginning and ending with a letter or digit"
)


def job_name(spec: ContainerTaskSpec) -> str:
    """The Job name for ``spec``: ``<kind part>-<12 hex of the spec hash>``, at most 63 chars.

    Same algorithm as altar 0.3.0, so a spec that uses no field added since (env, cpu) keeps
    its name. ``avoid_hosts`` is not part of the identity. The JSON form is canonical (sorted
    keys, fixed separators), so the name is the same in every process and Python version.
    """
    data = spec_to_dict(spec)
    data.pop("avoid_hosts", None)
    identity = json.dumps(data, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(identity.encode()).hexdigest()[:_HASH_LENGTH]
    limit = _NAME_LIMIT - _HASH_LENGTH - 1
    kind_part = re.sub(r"[^a-z0-9]+", "-", spec.kind.lower())[:limit].strip("-") or "task"
    return f"{kind_part}-{digest}"


def format_external_id(name: str, uid: str | None) -> str:
    """``<job name>/<job uid>``: names one attempt, not just the name (Job names hold no '/')."""
    return f"{name}/{uid}" if uid else name


def parse_external_id(external_id: str) -> tuple[str, str | None]:
    """Split a handle id into ``(name, uid)``; a 0.3.0 handle (bare name) has no uid."""
    name, sep, uid = external_id.partition("/")
    if not sep:
        return name, None
    if not name or not _UID.fullmatch(uid):
        raise ValueError(
            f"{external_id!r} is not a Kubernetes backend handle id (<job name>/<job uid>)"
        )
    return name, uid


def is_identity_key(key: str) -> bool:
    """Whether ``key`` is one of the runner's reserved identity labels (``altar.<name>``)."""
    # Our own keys share the prefix but carry a DNS part (altar.kundajelab.org/...).
    return key.startswith(RESERVED_LABEL_PREFIX) and "/" not in key


def split_identity(labels: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """``(identity, user)``: the runner's reserved labels apart from the plan's own."""
    identity = {k: v for k, v in labels.items() if is_identity_key(k)}
    return identity, {k: v for k, v in labels.items() if k not in identity}


def identity_of(labels: Mapping[str, str], annotations: Mapping[str, str]) -> dict[str, str]:
    """The identity a Job carries: as labels where label-safe, else as annotations."""
    found = {k: v for k, v in annotations.items() if is_identity_key(k)}
    found.update((k, v) for k, v in labels.items() if is_identity_key(k))
    return found


def _label_error(message: str) -> UnsupportedCapabilityError:
    return UnsupportedCapabilityError(message, capability="labels")


def validate_label_key(key: str) -> None:
    prefix, sep, name = key.rpartition("/")
    if sep and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        raise _label_error(f"label key {key!r} is not valid for Kubernetes: {_PREFIX_RULE}")
    if not name or len(name) > 63 or not _LABEL_NAME.fullmatch(name):
        raise _label_error(f"label key {key!r} is not valid for Kubernetes: {_NAME_RULE}")


def validate_label_value(key: str, value: str) -> None:
    if len(value) > 63 or not _LABEL_NAME.fullmatch(value):
        raise _label_error(
            f"label {key}={value!r} is not valid for Kubernetes: {_VALUE_RULE}; shorten or "
            "encode the value before submitting"
        )


# The Job controller sets these on every pod (to the Job's uid and name); the API server
# refuses a Job whose template holds any other value.
_JOB_CONTROLLER_LABELS = (
    "batch.kubernetes.io/controller-uid",
    "controller-uid",
    "batch.kubernetes.io/job-name",
    "job-name",
)


def validate_labels(labels: Mapping[str, str]) -> None:
    """Raise UnsupportedCapabilityError naming the rule a label breaks (before any API call)."""
    for key, value in labels.items():
        validate_label_key(key)
        validate_label_value(key, value)
        if key == MANAGED_BY_LABEL:
            raise _label_error(
                f"label key {key!r} is reserved: the Kubernetes backend sets it on every Job "
                "it creates; remove it from the spec's labels"
            )
        if key in _JOB_CONTROLLER_LABELS:
            raise _label_error(
                f"label key {key!r} is reserved: Kubernetes' Job controller sets it on every "
                "pod (to the Job's uid or name) and the API server refuses any other value; "
                "rename the label"
            )


def is_valid_label(key: str, value: str) -> bool:
    try:
        validate_label_key(key)
        validate_label_value(key, value)
    except UnsupportedCapabilityError:
        return False
    return True


def shared_selector(label_sets: Sequence[Mapping[str, str]], *, managed_only: bool) -> str | None:
    """A label selector matching every set: the label-safe labels all of them share.

    ``managed_only`` adds this backend's managed-by label (Jobs of 0.3.0 carry none).
    """
    shared: dict[str, str] | None = None
    for labels in label_sets:
        safe = {k: v for k, v in labels.items() if is_valid_label(k, v)}
        shared = safe if shared is None else {k: v for k, v in shared.items() if safe.get(k) == v}
    parts = [f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"] if managed_only else []
    parts += [f"{k}={v}" for k, v in sorted((shared or {}).items())]
    return ",".join(parts) or None
