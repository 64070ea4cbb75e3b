"""ResourceQuota admission as kube-apiserver's quota plugin applies it (a subset).

The fake's own arithmetic, independent of the backend's :mod:`altar.backends.kubernetes.quota`
(a fake that reused the code under test would agree with its bugs). Tracked: ``pods``,
``count/pods``, ``count/jobs.batch``, ``cpu``/``requests.cpu``, ``memory``/
``requests.memory``, ``limits.cpu``, ``limits.memory`` and ``requests.<extended>``.
A refusal is the real message: ``<kind> "<name>" is forbidden: exceeded quota: <quota>,
requested: <k>=<v>, used: <k>=<v>, limited: <k>=<v>``.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from altar.backends.kubernetes.testing.apiserver.objects import JsonDict

__all__ = ["amount", "format_amount", "pod_needs", "refusal"]

_SUFFIXES = {
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "m": Fraction(1, 1000),
    "k": Fraction(1000),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
}


def amount(text: Any) -> Fraction:
    value = str(text).strip()
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if value.endswith(suffix):
            return Fraction(value[: -len(suffix)]) * _SUFFIXES[suffix]
    return Fraction(value)


def format_amount(key: str, value: Fraction) -> str:
    """As the quota controller writes ``status.used``: ``1500m``, ``3Gi``, ``2``."""
    if value.denominator == 1:
        whole = int(value)
        if "memory" in key and whole and whole % 2**30 == 0:
            return f"{whole // 2**30}Gi"
        if "memory" in key and whole and whole % 2**20 == 0:
            return f"{whole // 2**20}Mi"
        return str(whole)
    return f"{int(value * 1000)}m"


def _containers_total(pod_spec: JsonDict, kind: str, resource: str) -> Fraction:
    def of(container: JsonDict) -> Fraction:
        resources = container.get("resources") or {}
        value = (resources.get(kind) or {}).get(resource)
        if value is None and kind == "requests" and resource not in ("cpu", "memory"):
            value = (resources.get("limits") or {}).get(resource)
        return amount(value) if value is not None else Fraction(0)

    total = sum((of(c) for c in pod_spec.get("containers") or []), Fraction(0))
    for init in pod_spec.get("initContainers") or []:
        total = max(total, of(init))
    return total


def pod_needs(pod_spec: JsonDict, key: str) -> Fraction | None:
    """What one pod of ``pod_spec`` counts against quota key ``key`` (None: not a pod key)."""
    if key in ("pods", "count/pods"):
        return Fraction(1)
    if key == "count/jobs.batch":
        return None
    kind, dot, resource = key.partition(".")
    if not dot:
        kind, resource = "requests", key
    if kind not in ("requests", "limits"):
        return None
    return _containers_total(pod_spec, kind, resource)


def refusal(
    what: str,
    quota: str,
    over: list[str],
    needs: dict[str, Fraction],
    used: dict[str, Fraction],
    hard: dict[str, Fraction],
) -> str:
    def listed(values: dict[str, Fraction]) -> str:
        return ",".join(f"{k}={format_amount(k, values.get(k, Fraction(0)))}" for k in over)

    return (
        f"{what} is forbidden: exceeded quota: {quota}, requested: {listed(needs)}, "
        f"used: {listed(used)}, limited: {listed(hard)}"
    )
