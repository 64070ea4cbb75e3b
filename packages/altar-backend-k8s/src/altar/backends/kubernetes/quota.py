"""Namespace ResourceQuotas: what a Job's pod would use, and whether a quota refuses it.

Pure functions over manifests, :class:`~.values.ResourceQuotaInfo` and the API server's own
refusal text (``pods "x" is forbidden: exceeded quota: compute, requested: requests.cpu=2,
used: requests.cpu=8, limited: requests.cpu=8``), so the backend can tell a quota that is
full *for now* (:class:`~altar.execution.ProviderLimitError`: wait and submit again) from one
the task can never fit (a ``ValueError``: refused, deterministic).

Only what the quota admission plugin computes from the pod itself is predicted: ``pods``,
``count/pods``, ``count/jobs.batch``, CPU and memory requests and limits, and extended
resources (``requests.nvidia.com/gpu``). A resource the pod does not set (a LimitRange may
default it) and scoped quotas are left to the API server.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from altar.backends.kubernetes.values import ResourceQuotaInfo
from altar.execution import ProviderLimitError

__all__ = [
    "QuotaRefusal",
    "add_usage",
    "check_quotas",
    "parse_quantity",
    "parse_refusal",
    "pod_usage",
    "refusal_error",
]

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_QUANTITY = re.compile(r"([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]?)")


def parse_quantity(text: str) -> Decimal:
    """A Kubernetes quantity (``500m``, ``16Gi``, ``2``, ``1e3``) as a number."""
    match = _QUANTITY.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    number, suffix = match.groups()
    try:
        value = Decimal(number)
    except InvalidOperation as error:
        raise ValueError(f"not a Kubernetes quantity: {text!r}") from error
    return value * (_BINARY[suffix] if suffix in _BINARY else _DECIMAL[suffix])


def _containers(manifest: Mapping[str, Any]) -> tuple[list[Any], list[Any]]:
    pod = ((manifest.get("spec") or {}).get("template") or {}).get("spec") or {}
    return list(pod.get("containers") or []), list(pod.get("initContainers") or [])


def _amount(container: Mapping[str, Any], kind: str, resource: str) -> Decimal | None:
    resources = container.get("resources") or {}
    value = (resources.get(kind) or {}).get(resource)
    if value is None and kind == "requests" and resource not in ("cpu", "memory"):
        value = (resources.get("limits") or {}).get(resource)  # extended: request = limit
    return None if value is None else parse_quantity(str(value))


def _pod_amount(manifest: Mapping[str, Any], kind: str, resource: str) -> Decimal | None:
    """The pod's effective amount: max(sum of its containers, largest init container)."""
    containers, inits = _containers(manifest)
    amounts = [_amount(c, kind, resource) for c in containers]
    if not containers or any(a is None for a in amounts):
        return None  # unset somewhere: a LimitRange may default it; the API server decides
    total = sum((a for a in amounts if a is not None), Decimal(0))
    for init in inits:
        amount = _amount(init, kind, resource)
        if amount is not None:
            total = max(total, amount)
    return total


def pod_usage(manifest: Mapping[str, Any], keys: Iterable[str]) -> dict[str, Decimal]:
    """What creating the Job (and its one pod) adds to each quota key of ``keys`` it can
    predict."""
    usage: dict[str, Decimal] = {}
    for key in keys:
        if key in ("pods", "count/pods", "count/jobs.batch"):
            usage[key] = Decimal(1)
            continue
        kind, dot, resource = key.partition(".")
        if not dot:
            kind, resource = "requests", key  # "cpu" and "memory" mean their requests
        if kind not in ("requests", "limits") or (
            kind == "limits" and resource not in ("cpu", "memory")
        ):
            continue
        amount = _pod_amount(manifest, kind, resource)
        if amount is not None:
            usage[key] = amount
    return usage


def _show(value: Decimal) -> str:
    text = format(value.normalize(), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def check_quotas(
    manifest: Mapping[str, Any], quotas: Sequence[ResourceQuotaInfo], *, namespace: str
) -> None:
    """Raise when a quota would refuse the Job's pod: a ``ValueError`` when the task alone
    asks for more than a quota's hard limit (it never fits), else ProviderLimitError when
    the quota is full for now. Scoped quotas and unknown quantities are skipped."""
    name = str((manifest.get("metadata") or {}).get("name", ""))
    for quota in quotas:
        if quota.scoped:
            continue
        try:
            hard = {k: parse_quantity(v) for k, v in quota.hard.items()}
            used = {k: parse_quantity(v) for k, v in quota.used.items()}
        except ValueError:
            continue
        usage = pod_usage(manifest, hard)
        never = sorted(k for k, v in usage.items() if v > hard[k])
        if never:
            asked = ", ".join(f"{k}={_show(usage[k])}" for k in never)
            allowed = ", ".join(f"{k}={_show(hard[k])}" for k in never)
            raise ValueError(
                f"job {name} asks for {asked} but ResourceQuota {quota.name} in namespace "
                f"{namespace} allows at most {allowed}: it can never run there; ask for less "
                "or have the quota raised"
            )
        over = sorted(k for k, v in usage.items() if used.get(k, Decimal(0)) + v > hard[k])
        if over:

            def listed(values: Mapping[str, Decimal], keys: list[str] = over) -> str:
                return ",".join(f"{k}={_show(values.get(k, Decimal(0)))}" for k in keys)

            raise ProviderLimitError(
                f"job {name} would exceed ResourceQuota {quota.name} in namespace {namespace} "
                f"(requested: {listed(usage)}, used: {listed(used)}, limited: {listed(hard)}); "
                "waiting until running work frees it",
                limit=f"ResourceQuota {quota.name}",
            )


@dataclass(frozen=True)
class QuotaRefusal:
    """The API server's ``exceeded quota`` refusal, read from its message."""

    quota: str
    requested: dict[str, str]
    used: dict[str, str]
    limited: dict[str, str]

    def never_fits(self) -> list[str]:
        """The resources the request alone asks more of than the quota's hard limit."""
        out = []
        for key, value in self.requested.items():
            try:
                if key in self.limited and parse_quantity(value) > parse_quantity(
                    self.limited[key]
                ):
                    out.append(key)
            except ValueError:
                continue
        return sorted(out)


_REFUSAL = re.compile(
    r"exceeded quota: (?P<quota>[^,\s]+), requested: (?P<requested>.*?), "
    r"used: (?P<used>.*?), limited: (?P<limited>[^\s\"]*)",
    re.IGNORECASE,
)


def _pairs(text: str) -> dict[str, str]:
    return dict(p.split("=", 1) for p in text.split(",") if "=" in p)


def parse_refusal(message: str) -> QuotaRefusal | None:
    """The quota refusal in an API message (a 403 ``Forbidden`` body), or None."""
    match = _REFUSAL.search(message)
    if match is None:
        return None
    return QuotaRefusal(
        quota=match["quota"],
        requested=_pairs(match["requested"]),
        used=_pairs(match["used"]),
        limited=_pairs(match["limited"]),
    )


def refusal_error(message: str, *, namespace: str) -> Exception | None:
    """What a 403 on create means for the runner: ProviderLimitError for a full quota,
    ``ValueError`` for one the task can never fit (``failed quota: must specify``
    included), None when the 403 is not about a quota (RBAC, admission webhooks)."""
    refusal = parse_refusal(message)
    if refusal is not None:
        never = refusal.never_fits()
        if never:
            asked = ", ".join(f"{k}={refusal.requested[k]}" for k in never)
            allowed = ", ".join(f"{k}={refusal.limited[k]}" for k in never)
            return ValueError(
                f"the task asks for {asked} but ResourceQuota {refusal.quota} in namespace "
                f"{namespace} allows at most {allowed}: it can never run there ({message})"
            )
        return ProviderLimitError(
            f"ResourceQuota {refusal.quota} in namespace {namespace} is full: {message}; "
            "waiting until running work frees it",
            limit=f"ResourceQuota {refusal.quota}",
        )
    if "failed quota:" in message:
        return ValueError(
            f"a ResourceQuota in namespace {namespace} refuses the task whatever its usage: "
            f"{message}"
        )
    return None


def add_usage(
    quotas: Sequence[ResourceQuotaInfo], manifests: Sequence[Mapping[str, Any]]
) -> list[ResourceQuotaInfo]:
    """``quotas`` with the usage of ``manifests`` (Jobs created since they were read) added."""
    if not manifests:
        return list(quotas)
    out = []
    for quota in quotas:
        try:
            used = {k: parse_quantity(v) for k, v in quota.used.items()}
        except ValueError:
            out.append(quota)
            continue
        for manifest in manifests:
            for key, amount in pod_usage(manifest, quota.hard).items():
                used[key] = used.get(key, Decimal(0)) + amount
        out.append(
            ResourceQuotaInfo(
                quota.name, dict(quota.hard), {k: _show(v) for k, v in used.items()}, quota.scoped
            )
        )
    return out
