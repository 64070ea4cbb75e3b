"""The runtime seam: the few Kubernetes API operations the backend needs.

:class:`KubernetesRuntime` is a synchronous protocol over plain values; the backend calls it
from worker threads. :class:`~altar.backends.kubernetes.client.ClientRuntime` implements it
with the official ``kubernetes`` client; tests use it against the fake API server, and a
custom runtime only has to honour the rules below.

- ``create_job`` raises :class:`K8sJobExistsError` when the name is taken (the API's 409 with
  reason ``AlreadyExists``), with ``being_deleted=True`` when the holder is being deleted.
- ``read_job``/``list_jobs`` report every Job's annotations and uid; a missing Job is None.
- ``delete_job`` with a ``uid`` deletes only that exact object (a precondition), never a
  newer Job of the same name; deleting a missing Job is not an error.
- API unreachable or a server error → :class:`~altar.execution.BackendUnavailableError`.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from altar.backends.kubernetes.jobs import K8sJobInfo, K8sPodInfo

__all__ = ["K8sApiError", "K8sJobExistsError", "KubernetesRuntime", "PropagationPolicy"]

PropagationPolicy = Literal["Background", "Foreground"]


class K8sJobExistsError(Exception):
    """A Job of this name exists and could not be adopted or replaced."""

    def __init__(
        self,
        name: str,
        *,
        namespace: str,
        detail: str | None = None,
        being_deleted: bool = False,
    ) -> None:
        message = f"job {name} already exists in namespace {namespace}"
        if detail:
            message += f": {detail}"
        super().__init__(message)
        self.name = name
        self.namespace = namespace
        self.detail = detail
        self.being_deleted = being_deleted


class K8sApiError(RuntimeError):
    """The API server refused a request for a reason retrying will not fix (4xx)."""

    def __init__(self, message: str, *, status: int, reason: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


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
