"""Creating a task's Job: create it, or adopt or replace the Job that holds its name.

The decision for a name already taken is :func:`~altar.backends.kubernetes.adoption.decide`'s
(pure); this module makes the calls it implies, waiting out a Job that is being deleted.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from altar.backends.kubernetes.adoption import decide, refusal
from altar.backends.kubernetes.values import K8sJobExistsError, K8sJobInfo
from altar.execution import ProviderLimitError, TaskState

if TYPE_CHECKING:
    from altar.backends.kubernetes.backend import KubernetesExecutionBackend

__all__ = ["create_or_adopt"]


async def create_or_adopt(
    self: KubernetesExecutionBackend, manifest: dict[str, Any], digest: str, key: str | None
) -> K8sJobInfo:
    """Create the Job, or adopt or replace the one holding its name (the rules above)."""
    name = manifest["metadata"]["name"]
    last: K8sJobExistsError | None = None
    for pause in (None, *self._recreate_waits_s):
        if pause:
            await asyncio.sleep(pause)
        limited: ProviderLimitError | None = None
        try:
            return await self._calls.create_job(manifest)
        except K8sJobExistsError as conflict:
            last = conflict
            if conflict.being_deleted:
                continue
        except ProviderLimitError as error:
            if not (error.limit or "").startswith("ResourceQuota"):
                raise  # throttled: asking again now would be throttled too
            limited = error  # a full Job-count quota refuses even a taken name
        existing = await self._calls.read_job(name)
        decision = decide(existing, key=key, digest=digest)
        if decision == "adopt" and existing is not None:
            return existing  # adopting takes no more of any quota
        if limited is not None:
            raise limited
        if decision == "refuse" and existing is not None:
            raise refusal(existing, namespace=self.namespace, digest=digest)
        if decision != "replace" or existing is None:
            continue  # create again, or wait for its pods to terminate
        # Finished: delete exactly this attempt (a newer one by another driver survives).
        if existing.state is TaskState.SUCCEEDED and existing.uid:
            self._remember_outcome((name, existing.uid), None)
        await self._calls.delete_job(
            name, uid=existing.uid, propagation_policy=self.delete_propagation
        )
    total = sum(self._recreate_waits_s)
    raise K8sJobExistsError(
        name,
        namespace=self.namespace,
        detail=f"it was not replaced within {total:g} s; last conflict: {last}",
    )
