"""The runtime seam: the few Kubernetes API operations the backend needs.

:class:`KubernetesRuntime` is a synchronous protocol over the plain values of
:mod:`.values`; the backend calls it from worker threads.
:class:`~.sdk_runtime.ClientRuntime` implements it with the official ``kubernetes`` client
(tested against the fake API server of :mod:`.testing.apiserver`);
:class:`~.fake.FakeKubernetesRuntime` is the in-memory seam fake. A custom runtime only has
to honour the rules below. This module holds only the protocols: values and errors live in
:mod:`.values`.

A runtime written for altar 0.3.0 (``async def`` methods, 0.3.0's method set) works too:
:class:`AsyncKubernetesRuntime` is that base class, and the backend awaits each coroutine
method directly (see :mod:`altar.backends.kubernetes.calls`).

- ``create_job`` raises :class:`K8sJobExistsError` when the name is taken (the API's 409 with
  reason ``AlreadyExists``), with ``being_deleted=True`` when the holder is being deleted.
- ``read_job``/``list_jobs`` report every Job's annotations and uid; a missing Job is None.
- ``delete_job`` with a ``uid`` deletes only that exact object (a precondition), never a
  newer Job of the same name; deleting a missing Job is not an error.
- API unreachable or a server error → :class:`~altar.execution.BackendUnavailableError`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Protocol

# The errors and PropagationPolicy were defined here; re-exported so old imports work.
from altar.backends.kubernetes.values import (
    K8sApiError,
    K8sConfigError,
    K8sJobExistsError,
    K8sJobInfo,
    K8sPodInfo,
    PropagationPolicy,
)
from altar.execution import TaskFailure

__all__ = [
    "AsyncKubernetesRuntime",
    "K8sApiError",
    "K8sConfigError",
    "K8sJobExistsError",
    "KubernetesRuntime",
    "PropagationPolicy",
]


class KubernetesRuntime(Protocol):
    """Blocking Kubernetes operations over plain values (see the module docstring)."""

    def create_job(self, manifest: dict[str, Any], *, namespace: str) -> K8sJobInfo: ...

    def read_job(self, name: str, *, namespace: str) -> K8sJobInfo | None: ...

    def list_jobs(
        self, *, namespace: str, label_selector: str | None = None
    ) -> list[K8sJobInfo]: ...

    def delete_job(
        self,
        name: str,
        *,
        namespace: str,
        uid: str | None = None,
        propagation_policy: PropagationPolicy = "Background",
    ) -> bool:
        """Delete the Job; False if it was already gone or ``uid`` names an older attempt."""
        ...

    def list_pods(
        self, *, namespace: str, label_selector: str | None = None
    ) -> list[K8sPodInfo]: ...

    def read_log_tail(
        self, pod_name: str, *, namespace: str, container: str, lines: int
    ) -> str | None: ...


class AsyncKubernetesRuntime(ABC):
    """altar 0.3.0's runtime base class: ``async`` methods, no pod listing.

    The same rules apply as for :class:`KubernetesRuntime` (conflict → ``K8sJobExistsError``,
    annotations and uid reported, uid precondition on delete). Without ``list_pods`` the
    backend asks :meth:`describe_failure` once per newly failed Job. A subclass may add our
    ``list_pods`` and per-pod ``read_log_tail(pod, *, namespace, container, lines)`` as
    coroutines to get the two-request poll.
    """

    @abstractmethod
    async def create_job(self, manifest: dict[str, Any], *, namespace: str) -> str | K8sJobInfo:
        """Create the Job; return its name (the backend reads it back) or its K8sJobInfo."""

    @abstractmethod
    async def list_jobs(
        self, *, namespace: str, label_selector: str | None = None
    ) -> list[K8sJobInfo]: ...

    async def read_job(self, name: str, *, namespace: str) -> K8sJobInfo | None:
        """The Job, or None if it is missing or being deleted (default: scan ``list_jobs``)."""
        jobs = await self.list_jobs(namespace=namespace)
        return next((job for job in jobs if job.name == name), None)

    @abstractmethod
    async def delete_job(self, name: str, *, namespace: str, uid: str | None = None) -> bool | None:
        """Delete the Job (only the object ``uid`` if given); a missing Job is not an error."""

    async def read_log_tail(self, name: str, *, namespace: str, lines: int) -> str | None:
        """The last ``lines`` of the Job's failed container log (default: None)."""
        return None

    async def describe_failure(self, name: str, *, namespace: str) -> TaskFailure:
        """Why the Job failed (default: ``job_failed`` with :meth:`diagnose`'s answer)."""
        deterministic, error = await self.diagnose(name, namespace=namespace)
        return TaskFailure("job_failed", error, deterministic=deterministic)

    async def diagnose(self, name: str, *, namespace: str) -> tuple[bool, str | None]:
        """Legacy: ``(deterministic, error)``; only the default describe_failure calls it."""
        return (True, None)
