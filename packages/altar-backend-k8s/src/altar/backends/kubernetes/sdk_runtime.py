"""The real runtime: the official ``kubernetes`` client (blocking; called from threads).

The client is imported on first use, never at import time: ``altar backends`` and the pure
modules load without it.

Responses are read as raw JSON (``_preload_content=False``) and parsed here, so the backend
depends on the API's wire format, not on the client's model classes, which changed shape in
client 37 (pydantic models; ``delete_namespaced_job`` returns a dict).
"""

from __future__ import annotations

import importlib.util
import json
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from altar.backends.kubernetes.values import (
    K8sApiError,
    K8sConfigError,
    K8sJobExistsError,
    K8sJobInfo,
    K8sPodInfo,
    PropagationPolicy,
    ResourceQuotaInfo,
)
from altar.backends.kubernetes.wire import (
    job_info_from_object,
    pod_info_from_object,
    quota_info_from_object,
)
from altar.execution import BackendImportError, BackendUnavailableError, ProviderLimitError

__all__ = ["ClientRuntime"]

_BEING_DELETED = "object is being deleted:"


def _status_body(error: Any) -> dict[str, Any]:
    body = getattr(error, "body", None)
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    if isinstance(body, str) and body:
        try:
            value = json.loads(body)
        except json.JSONDecodeError:
            return {"message": body[:500]}
        return value if isinstance(value, dict) else {}
    return {}


def _retry_after_s(error: Any) -> float | None:
    headers = getattr(error, "headers", None) or {}
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None  # an HTTP date: the runner's own growing pause will do
    return seconds if seconds is not None and seconds > 0 else None


def _client_installed() -> bool:
    try:
        return importlib.util.find_spec("kubernetes") is not None
    except ValueError:  # imported already, without a spec (a stand-in module)
        return True


class ClientRuntime:
    """:class:`~altar.backends.kubernetes.runtime.KubernetesRuntime` on the ``kubernetes``
    client.

    Configuration is loaded on first use: ``kubeconfig`` (and ``context``) if given, else the
    in-cluster service account, else the default kubeconfig (``$KUBECONFIG`` or
    ``~/.kube/config``). ``api_client`` injects a ready ``kubernetes.client.ApiClient``.
    A 429 answer is retried after its ``Retry-After`` (at most ``max_throttle_retries``
    times), then raises ProviderLimitError with the server's last ``Retry-After``; 5xx
    answers and connection failures raise BackendUnavailableError.
    """

    def __init__(
        self,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        api_client: Any = None,
        request_timeout_s: tuple[float, float] = (5.0, 30.0),
        max_throttle_retries: int = 5,
        max_throttle_wait_s: float = 10.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        # The client is imported on first use; a missing one is said here, with the fix, rather
        # than as a bare ModuleNotFoundError from a worker thread on the first request.
        if not _client_installed():
            raise BackendImportError(
                "backend 'kubernetes' needs the kubernetes client, which is not installed; "
                "pip install altar-backend-k8s"
            )
        self._kubeconfig = kubeconfig
        self._context = context
        self._api_client = api_client
        self._timeout = request_timeout_s
        self._max_throttle_retries = max_throttle_retries
        self._max_throttle_wait_s = max_throttle_wait_s
        self._sleep = sleep
        self._lock = threading.Lock()

    def close(self) -> None:
        """Close the client's connections (a new one is opened on next use)."""
        with self._lock:
            api_client, self._api_client = self._api_client, None
        if api_client is not None:
            api_client.close()

    # -- plumbing --

    def _client(self) -> Any:
        with self._lock:
            if self._api_client is None:
                self._api_client = self._load_client()
            return self._api_client

    def _load_client(self) -> Any:
        import yaml  # type: ignore[import-untyped]
        from urllib3.util import Retry

        from kubernetes import client, config

        configuration = client.Configuration()
        # Retry connection setup only; this class owns the 429/5xx policy (urllib3 would
        # otherwise sleep through Retry-After on its own, unbounded by our limits).
        configuration.retries = Retry(
            total=2, connect=2, read=0, status=0, redirect=0, respect_retry_after_header=False
        )
        if self._kubeconfig is None and self._context is None:
            try:
                config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            except config.ConfigException:
                pass
            else:
                return client.ApiClient(configuration)
        try:
            return config.new_client_from_config(  # type: ignore[no-untyped-call]
                config_file=self._kubeconfig,
                context=self._context,
                client_configuration=configuration,
            )
        except (
            config.ConfigException,
            OSError,
            yaml.YAMLError,
            # a file that parses but is not a kubeconfig (e.g. `clusters: 5`)
            ValueError,
            TypeError,
            KeyError,
            AttributeError,
        ) as error:
            where = self._kubeconfig or "$KUBECONFIG or ~/.kube/config"
            raise K8sConfigError(
                f"cannot load a Kubernetes configuration from {where} (and not running in a "
                f"cluster): {error}"
            ) from error

    def _batch(self) -> Any:
        from kubernetes import client

        return client.BatchV1Api(self._client())

    def _core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self._client())

    def _request(self, what: str, call: Callable[[], Any]) -> Any:
        """Run one API call; return its decoded body. Maps transport and server errors."""
        from urllib3.exceptions import HTTPError

        from kubernetes.client.exceptions import ApiException

        attempt = 0
        while True:
            try:
                response = call()
            except ApiException as error:
                status = int(error.status or 0)
                if status == 429 and attempt < self._max_throttle_retries:
                    attempt += 1
                    self._sleep(self._throttle_wait(error, attempt))
                    continue
                if status == 429:
                    # Still throttled after our own waits: the runner holds its submits back
                    # (the server's Retry-After, when it sent one) instead of failing them.
                    raise ProviderLimitError(
                        f"Kubernetes API {what} still throttled (HTTP 429) after "
                        f"{attempt} retries; retry later",
                        limit="Kubernetes API rate limit (HTTP 429)",
                        retry_after_s=_retry_after_s(error),
                    ) from error
                if status >= 500 or status == 0:
                    body = _status_body(error)
                    raise BackendUnavailableError(
                        f"Kubernetes API {what} failed with HTTP {status}: "
                        f"{body.get('message') or error.reason}; retry later"
                    ) from error
                raise
            except HTTPError as error:
                raise BackendUnavailableError(
                    f"Kubernetes API unreachable during {what}: {error}; check the kubeconfig's "
                    "server address and that the cluster is up"
                ) from error
            data = response.data if hasattr(response, "data") else response
            return data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data

    def _request_json(self, what: str, call: Callable[[], Any]) -> Any:
        data = self._request(what, call)
        if isinstance(data, str):
            try:
                return json.loads(data)
            except json.JSONDecodeError as error:
                raise BackendUnavailableError(
                    f"Kubernetes API {what} answered with something that is not JSON: "
                    f"{data[:200]!r}"
                ) from error
        return data

    def _throttle_wait(self, error: Any, attempt: int) -> float:
        headers = getattr(error, "headers", None) or {}
        retry_after = headers.get("Retry-After") if hasattr(headers, "get") else None
        try:
            wait = float(retry_after) if retry_after is not None else 0.0
        except ValueError:
            wait = 0.0
        if wait <= 0:
            wait = min(2.0 ** (attempt - 1), self._max_throttle_wait_s)
        return min(wait, self._max_throttle_wait_s) + random.uniform(0, 0.1)  # noqa: S311

    @staticmethod
    def _error_of(error: Any) -> tuple[int, str, str]:
        body = _status_body(error)
        return (
            int(getattr(error, "status", 0) or 0),
            str(body.get("reason") or ""),
            str(body.get("message") or getattr(error, "reason", "") or ""),
        )

    def _api_error(self, what: str, error: Any) -> K8sApiError:
        status, reason, message = self._error_of(error)
        return K8sApiError(
            f"Kubernetes API {what} refused (HTTP {status} {reason}): {message}",
            status=status,
            reason=reason or None,
        )

    # -- operations --

    def create_job(self, manifest: dict[str, Any], *, namespace: str) -> K8sJobInfo:
        from kubernetes.client.exceptions import ApiException

        name = str(manifest.get("metadata", {}).get("name", ""))
        body = self._job_body(manifest)
        conflicts = 0
        while True:
            try:
                created = self._request_json(
                    f"create job {name}",
                    lambda: self._batch().create_namespaced_job(
                        namespace,
                        body,
                        _preload_content=False,
                        _request_timeout=self._timeout,
                    ),
                )
            except ApiException as error:
                status, reason, message = self._error_of(error)
                if status == 409 and reason == "AlreadyExists":
                    raise K8sJobExistsError(
                        name,
                        namespace=namespace,
                        detail=message,
                        being_deleted=message.startswith(_BEING_DELETED),
                    ) from error
                if status == 409 and conflicts < 3:
                    # Conflict on create: a ResourceQuota update race; retry with jitter.
                    conflicts += 1
                    self._sleep(random.uniform(0.05, 0.5))  # noqa: S311
                    continue
                raise self._api_error(f"create job {name}", error) from error
            return job_info_from_object(created)

    @staticmethod
    def _job_body(manifest: dict[str, Any]) -> Any:
        # Client 37 validates the body as a V1Job model; older clients take the dict as is.
        from kubernetes.client import V1Job

        from_dict = getattr(V1Job, "from_dict", None)
        if callable(from_dict) and hasattr(V1Job, "model_validate"):
            return from_dict(manifest)
        return manifest

    def read_job(self, name: str, *, namespace: str) -> K8sJobInfo | None:
        from kubernetes.client.exceptions import ApiException

        try:
            job = self._request_json(
                f"read job {name}",
                lambda: self._batch().read_namespaced_job(
                    name, namespace, _preload_content=False, _request_timeout=self._timeout
                ),
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise self._api_error(f"read job {name}", error) from error
        return job_info_from_object(job)

    def list_jobs(self, *, namespace: str, label_selector: str | None = None) -> list[K8sJobInfo]:
        items = self._list(
            "jobs", lambda: self._batch().list_namespaced_job, namespace, label_selector
        )
        return [job_info_from_object(item) for item in items]

    def delete_job(
        self,
        name: str,
        *,
        namespace: str,
        uid: str | None = None,
        propagation_policy: PropagationPolicy = "Background",
    ) -> bool:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        options = client.V1DeleteOptions(
            propagation_policy=propagation_policy,
            preconditions=client.V1Preconditions(uid=uid) if uid else None,
        )
        try:
            self._request(
                f"delete job {name}",
                lambda: self._batch().delete_namespaced_job(
                    name,
                    namespace,
                    body=options,
                    _preload_content=False,
                    _request_timeout=self._timeout,
                ),
            )
        except ApiException as error:
            status, reason, _ = self._error_of(error)
            if status == 404:
                return False
            if status == 409 and reason == "Conflict" and uid:
                return False  # the name now belongs to a newer attempt: leave it alone
            raise self._api_error(f"delete job {name}", error) from error
        return True

    def list_pods(self, *, namespace: str, label_selector: str | None = None) -> list[K8sPodInfo]:
        items = self._list(
            "pods", lambda: self._core().list_namespaced_pod, namespace, label_selector
        )
        return [pod_info_from_object(item) for item in items]

    def _list(
        self,
        kind: str,
        method: Callable[[], Callable[..., Any]],
        namespace: str,
        label_selector: str | None,
    ) -> list[Any]:
        """The ``items`` of one namespaced list call (``method()`` gives the API method)."""
        from kubernetes.client.exceptions import ApiException

        kwargs: dict[str, Any] = {"_preload_content": False, "_request_timeout": self._timeout}
        if label_selector:
            kwargs["label_selector"] = label_selector
        try:
            listing = self._request_json(f"list {kind}", lambda: method()(namespace, **kwargs))
        except ApiException as error:
            raise self._api_error(f"list {kind}", error) from error
        return list(listing.get("items") or [])

    def list_resource_quotas(self, *, namespace: str) -> list[ResourceQuotaInfo] | None:
        """The namespace's ResourceQuotas; None when the credentials may not list them."""
        try:
            items = self._list(
                "resourcequotas",
                lambda: self._core().list_namespaced_resource_quota,
                namespace,
                None,
            )
        except K8sApiError as error:
            if error.status in (401, 403, 404):
                return None
            raise
        return [quota_info_from_object(item) for item in items]

    def read_log_tail(
        self, pod_name: str, *, namespace: str, container: str, lines: int
    ) -> str | None:
        from kubernetes.client.exceptions import ApiException

        try:
            text = self._request(
                f"read log of {pod_name}",
                lambda: self._core().read_namespaced_pod_log(
                    pod_name,
                    namespace,
                    container=container,
                    tail_lines=lines,
                    _preload_content=False,
                    _request_timeout=self._timeout,
                ),
            )
        except ApiException as error:
            if error.status in (400, 404):
                return None
            raise self._api_error(f"read log of {pod_name}", error) from error
        return text if isinstance(text, str) else None

    # -- pre-flight (read-only; ``altar check``) --

    def _exists(self, what: str, call: Callable[[], Any]) -> bool | None:
        """True, False on 404, None on 403 (this identity may not read it: cannot tell)."""
        from kubernetes.client.exceptions import ApiException

        try:
            self._request_json(what, call)
        except ApiException as error:
            if error.status == 404:
                return False
            if error.status == 403:
                return None
            raise self._api_error(what, error) from error
        return True

    def namespace_exists(self, name: str) -> bool | None:
        return self._exists(
            f"read namespace {name}",
            lambda: self._core().read_namespace(
                name, _preload_content=False, _request_timeout=self._timeout
            ),
        )

    def claim_exists(self, name: str, *, namespace: str) -> bool | None:
        return self._exists(
            f"read persistentvolumeclaim {name}",
            lambda: self._core().read_namespaced_persistent_volume_claim(
                name, namespace, _preload_content=False, _request_timeout=self._timeout
            ),
        )

    def may_create_jobs(self, *, namespace: str) -> tuple[bool, str]:
        """(allowed, the authorizer's reason) from one SelfSubjectAccessReview."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        review: dict[str, Any] = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {
                "resourceAttributes": {
                    "namespace": namespace,
                    "verb": "create",
                    "group": "batch",
                    "resource": "jobs",
                }
            },
        }
        model = client.V1SelfSubjectAccessReview
        body: Any = model.from_dict(review) if hasattr(model, "model_validate") else review
        api = client.AuthorizationV1Api(self._client())
        try:
            answer = self._request_json(
                "review access to create jobs",
                lambda: api.create_self_subject_access_review(
                    body, _preload_content=False, _request_timeout=self._timeout
                ),
            )
        except ApiException as error:
            raise self._api_error("review access to create jobs", error) from error
        status = answer.get("status") or {}
        reason = status.get("reason") or status.get("evaluationError") or ""
        return bool(status.get("allowed")), str(reason)
