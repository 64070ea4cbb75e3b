"""How the backend calls a runtime: ours (blocking) or one written for altar 0.3.0 (async).

Each method is inspected on its own: a coroutine function is awaited on the event loop, a
plain function runs in a worker thread. Where a 0.3.0 runtime has a different method set or
return type, :class:`RuntimeCalls` bridges it:

- ``create_job`` returning the Job's name (0.3.0) instead of a :class:`K8sJobInfo`: the Job is
  read back once to learn its uid (without one, the handle is the bare name, as in 0.3.0);
- no ``read_job``: the Job is found in ``list_jobs`` (0.3.0's default);
- ``delete_job`` without ``propagation_policy`` and returning None: called without it, and
  None means "requested";
- no ``list_pods``: a failed Job is explained by ``describe_failure`` (or the legacy
  ``diagnose``), one call per newly failed Job, and ``read_log_tail`` takes the Job's name;
- a built-in ``ConnectionError`` or ``TimeoutError`` from any method, or an exception with an
  HTTP ``status`` of 5xx (the clients' ``ApiException``), becomes
  ``BackendUnavailableError``; a 429 becomes ``ProviderLimitError`` (with ``Retry-After``);
- a 403 on ``create_job`` whose message says ``exceeded quota`` becomes
  ``ProviderLimitError`` (or a ``ValueError`` when the task alone exceeds the quota);
- no ``list_resource_quotas``: the backend does not check quotas before a create.

A method inherited unchanged from the :class:`KubernetesRuntime` protocol (a 0.3.0 runtime
that subclasses it after changing imports) counts as absent.

Outside the common anatomy because only Kubernetes had altar 0.3.0 runtimes written by users
(sync or async) that must keep working; the backend calls every runtime through this bridge.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

from altar.backends.kubernetes.quota import refusal_error
from altar.backends.kubernetes.runtime import KubernetesRuntime
from altar.backends.kubernetes.values import (
    K8sJobInfo,
    K8sPodInfo,
    PropagationPolicy,
    ResourceQuotaInfo,
)
from altar.execution import BackendUnavailableError, ProviderLimitError, TaskFailure, TaskState

__all__ = ["RuntimeCalls"]


class RuntimeCalls:
    """Async access to a runtime's operations, whatever style the runtime is written in."""

    def __init__(self, runtime: object, *, namespace: str) -> None:
        self.runtime = runtime
        self.namespace = namespace
        self.lists_pods = self._method("list_pods") is not None
        tail = self._method("read_log_tail")
        # Ours reads one pod's container; 0.3.0's takes the Job name and picks the pod itself.
        self._tail_per_pod = tail is not None and _accepts(tail, "container")

    def _method(self, name: str) -> Callable[..., Any] | None:
        method = getattr(self.runtime, name, None)
        if not callable(method):
            return None
        if getattr(type(self.runtime), name, None) is getattr(KubernetesRuntime, name, object()):
            return None  # the protocol's empty stub, inherited by a subclass
        return method  # type: ignore[no-any-return]

    async def _invoke(self, name: str, /, *args: Any, **kwargs: Any) -> Any:
        method = self._method(name)
        if method is None:
            raise TypeError(
                f"{type(self.runtime).__name__} has no {name}() method; a KubernetesRuntime "
                "needs create_job, list_jobs and delete_job"
            )
        try:
            if inspect.iscoroutinefunction(method):
                return await method(*args, **kwargs)
            result = await asyncio.to_thread(method, *args, **kwargs)
            if inspect.isawaitable(result):  # e.g. a partial over a coroutine function
                result = await result
            return result
        except BackendUnavailableError:
            raise
        except (ConnectionError, TimeoutError) as error:
            # The API could not be asked: transient, never a missing Job.
            raise BackendUnavailableError(
                f"Kubernetes API unreachable during {name}: {error}"
            ) from error
        except Exception as error:
            status = _http_status(error)
            if status is None or not (status == 429 or status >= 500):
                raise
            # A 0.3.0 runtime on kubernetes(_asyncio) lets the client's ApiException escape:
            # throttling and server errors are transient too.
            reason = getattr(error, "reason", None) or type(error).__name__
            if status == 429:
                raise ProviderLimitError(
                    f"Kubernetes API {name} throttled (HTTP 429 {reason}); retry later",
                    limit="Kubernetes API rate limit (HTTP 429)",
                    retry_after_s=_retry_after(error),
                ) from error
            raise BackendUnavailableError(
                f"Kubernetes API {name} failed with HTTP {status} ({reason}); retry later"
            ) from error

    # -- pre-flight: optional runtime methods (``altar check``) --

    def offers(self, name: str) -> bool:
        """Whether the runtime has ``name`` (the pre-flight reads are optional)."""
        return self._method(name) is not None

    async def preflight(self, name: str, /, *args: Any, **kwargs: Any) -> Any:
        """One of the runtime's optional read-only checks, errors mapped as for the others."""
        return await self._invoke(name, *args, **kwargs)

    # -- jobs --

    async def create_job(self, manifest: dict[str, Any]) -> K8sJobInfo:
        try:
            created = await self._invoke("create_job", manifest, namespace=self.namespace)
        except Exception as error:
            if _http_status(error) != 403:
                raise
            # A namespace ResourceQuota on Jobs (count/jobs.batch) refuses the create itself.
            mapped = refusal_error(_error_text(error), namespace=self.namespace)
            if mapped is None:
                raise
            raise mapped from error
        if isinstance(created, K8sJobInfo):
            return created
        name = str(created or manifest["metadata"]["name"])
        job = await self.read_job(name)  # 0.3.0 returns only the name: learn the uid
        if job is not None:
            return job
        return K8sJobInfo(name=name, state=TaskState.PENDING)

    async def list_jobs(self, label_selector: str | None) -> list[K8sJobInfo]:
        jobs = await self._invoke(
            "list_jobs", namespace=self.namespace, label_selector=label_selector
        )
        return list(jobs)

    async def read_job(self, name: str) -> K8sJobInfo | None:
        if self._method("read_job") is not None:
            job: K8sJobInfo | None = await self._invoke("read_job", name, namespace=self.namespace)
            return job
        jobs = await self.list_jobs(None)
        return next((job for job in jobs if job.name == name), None)

    async def delete_job(
        self, name: str, *, uid: str | None, propagation_policy: PropagationPolicy
    ) -> bool:
        """Delete the Job (only attempt ``uid`` if given); False if nothing was deleted."""
        kwargs: dict[str, Any] = {"namespace": self.namespace, "uid": uid}
        method = self._method("delete_job")
        if method is not None and _accepts(method, "propagation_policy"):
            kwargs["propagation_policy"] = propagation_policy
        deleted = await self._invoke("delete_job", name, **kwargs)
        return deleted is not False  # 0.3.0 returns None: the delete was requested

    @property
    def lists_quotas(self) -> bool:
        return self._method("list_resource_quotas") is not None

    async def list_resource_quotas(self) -> list[ResourceQuotaInfo] | None:
        """The namespace's ResourceQuotas; None when the runtime may not read them."""
        quotas = await self._invoke("list_resource_quotas", namespace=self.namespace)
        return None if quotas is None else list(quotas)

    # -- pods, failures, logs --

    async def list_pods(self, label_selector: str | None) -> list[K8sPodInfo]:
        pods = await self._invoke(
            "list_pods", namespace=self.namespace, label_selector=label_selector
        )
        return list(pods)

    async def describe_failure(self, job: K8sJobInfo) -> TaskFailure | None:
        """0.3.0's per-Job explanation, or None when the runtime offers none."""
        if self._method("describe_failure") is not None:
            failure: TaskFailure = await self._invoke(
                "describe_failure", job.name, namespace=self.namespace
            )
            return failure
        if self._method("diagnose") is not None:
            deterministic, error = await self._invoke(
                "diagnose", job.name, namespace=self.namespace
            )
            return TaskFailure("job_failed", error, deterministic=bool(deterministic))
        return None

    @property
    def reads_pod_logs(self) -> bool:
        return self.lists_pods and self._tail_per_pod

    async def read_pod_log_tail(self, pod: str, *, container: str, lines: int) -> str | None:
        text: str | None = await self._invoke(
            "read_log_tail", pod, namespace=self.namespace, container=container, lines=lines
        )
        return text

    async def read_job_log_tail(self, name: str, *, lines: int) -> str | None:
        if self._method("read_log_tail") is None or self._tail_per_pod:
            return None
        text: str | None = await self._invoke(
            "read_log_tail", name, namespace=self.namespace, lines=lines
        )
        return text


def _http_status(error: BaseException) -> int | None:
    """The HTTP status of a client ``ApiException`` (``kubernetes`` or ``kubernetes_asyncio``)."""
    status = getattr(error, "status", None)
    return status if isinstance(status, int) and not isinstance(status, bool) else None


def _error_text(error: BaseException) -> str:
    """The API's message in an error: our K8sApiError's text, or an ApiException's body."""
    body = getattr(error, "body", None)
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    return f"{error} {body}" if isinstance(body, str) and body not in str(error) else str(error)


def _retry_after(error: BaseException) -> float | None:
    headers: Any = getattr(error, "headers", None)
    value = headers.get("Retry-After") if headers is not None and hasattr(headers, "get") else None
    try:
        seconds = float(value) if value is not None else None
    except (TypeError, ValueError):
        return None
    return seconds if seconds is not None and seconds > 0 else None


def _accepts(method: Callable[..., Any], keyword: str) -> bool:
    try:
        parameters = inspect.signature(method).parameters
    except (TypeError, ValueError):
        return False
    return keyword in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )
