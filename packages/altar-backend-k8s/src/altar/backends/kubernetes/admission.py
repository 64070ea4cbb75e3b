"""Quota admission before a create: refuse a Job a namespace ResourceQuota would refuse.

A quota refuses the Job controller's pod, not the Job: created anyway, the Job would wait
without a pod (its ``activeDeadlineSeconds`` running) or, when the task alone exceeds the
quota, forever. So a full quota is :class:`~altar.execution.ProviderLimitError` (the runner
holds its submits back) and one the task can never fit a ``ValueError``. Read-only: a kill
between any two lines leaves nothing behind.

Outside the common anatomy because only Kubernetes has namespace quotas the backend can
read before it submits.
"""

from __future__ import annotations

import time
from typing import Any

from altar.backends.kubernetes.adoption import decide
from altar.backends.kubernetes.calls import RuntimeCalls
from altar.backends.kubernetes.quota import add_usage, check_quotas
from altar.backends.kubernetes.values import ResourceQuotaInfo
from altar.execution import ProviderLimitError

__all__ = ["QuotaGate"]


class QuotaGate:
    """One reading of the namespace's quotas serves the submits of ``cache_s`` seconds; the
    Jobs created meanwhile are added to its ``used``, which the quota controller has not
    counted yet. Off when the runtime cannot list quotas or the credentials may not."""

    #: How long one reading of the namespace's ResourceQuotas serves further submits (s);
    #: a namespace without quotas is asked again only after ``empty_cache_s``.
    cache_s: float = 5.0
    empty_cache_s: float = 60.0

    def __init__(self, calls: RuntimeCalls, *, enabled: bool) -> None:
        self._calls = calls
        self._enabled = enabled and calls.lists_quotas
        self._read: tuple[float, list[ResourceQuotaInfo]] | None = None
        self._created_since: list[dict[str, Any]] = []

    async def admit(self, manifest: dict[str, Any], *, key: str | None, digest: str) -> None:
        """Raise ProviderLimitError or ``ValueError`` if a quota would refuse the pod, unless
        the Job holding the name is one this submit adopts (submission ``key``, ``digest``)."""
        if not self._enabled:
            return
        now = time.monotonic()
        if self._read is None or now - self._read[0] > (
            self.cache_s if self._read[1] else self.empty_cache_s
        ):
            quotas = await self._calls.list_resource_quotas()
            if quotas is None:
                self._enabled = False  # forbidden to read them: the API server decides
                return
            self._read, self._created_since = (now, quotas), []
        if not self._read[1]:
            return
        view = add_usage(self._read[1], self._created_since)
        try:
            check_quotas(manifest, view, namespace=self._calls.namespace)
        except ProviderLimitError:
            # The Job may exist already (a resubmit after a crash): adopting it takes nothing.
            held = await self._calls.read_job(manifest["metadata"]["name"])
            if held is not None and decide(held, key=key, digest=digest) == "adopt":
                return
            self._read = None  # when the runner tries again, ask the quota afresh
            raise

    def created(self, manifest: dict[str, Any]) -> None:
        """Count a Job just created (or adopted: counted too, erring on the safe side)."""
        if self._enabled:
            self._created_since.append(manifest)
