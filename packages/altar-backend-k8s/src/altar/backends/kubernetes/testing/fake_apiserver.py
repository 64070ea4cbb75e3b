"""A fake Kubernetes API server for tests: Jobs and Pods over plain HTTP on 127.0.0.1.

It speaks enough of the real API for the official ``kubernetes`` client and ``kubectl`` to use
it through a kubeconfig: discovery, ``batch/v1`` Jobs (create, get, list with label selectors,
delete with uid/resourceVersion preconditions and propagation policies) and ``v1`` Pods (list,
get, log with ``tailLines``). Errors are ``Status`` bodies with the real reasons: a taken name
is 409 ``AlreadyExists`` (with the ``object is being deleted:`` prefix while a Job is in
foreground deletion), a failed precondition is 409 ``Conflict``, a missing object 404
``NotFound``.

There is no scheduler or kubelet. Creating a Job creates its one Pod (pending, counted in
``status.active``) as the Job controller would; tests then drive outcomes with
:meth:`FakeApiServer.finish_job`, :meth:`expire_job`, :meth:`fail_verification`,
:meth:`oom_kill` and :meth:`evict`, which set container states and Job conditions the way
Kubernetes 1.31+ does (``FailureTarget``/``SuccessCriteriaMet`` first, then
``Failed``/``Complete``).
Every request is recorded in :attr:`FakeApiServer.requests`.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import re
import secrets
import socket
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = [
    "FakeApiServer",
    "RecordedRequest",
    "matches_selector",
    "parse_selector",
    "running_fake_apiserver",
]

JsonDict = dict[str, Any]

_JOB_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
_JOBS_PATH = re.compile(r"^/apis/batch/v1/namespaces/([^/]+)/jobs(?:/([^/]+))?$")
_PODS_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/pods(?:/([^/]+)(/log)?)?$")
# apimachinery's validation patterns (pkg/util/validation), as the real API server applies them
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_VALUE_RULE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
_QUALIFIED_NAME_RULE = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
    "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
    "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
_SUBDOMAIN_RULE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_UID_LABELS = ("batch.kubernetes.io/controller-uid", "controller-uid")
_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- label selectors ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        if self.op == "exists":
            return self.key in labels
        if self.op == "!":
            return self.key not in labels
        if self.op in ("=", "in"):
            return labels.get(self.key) in self.values
        # "!=" and "notin" also match objects without the key (Kubernetes semantics)
        return labels.get(self.key) not in self.values


def _split_top_level(selector: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def parse_selector(selector: str) -> list[_Requirement]:
    """Parse a label selector (``k=v``, ``k==v``, ``k!=v``, ``k``, ``!k``, ``k in (a,b)``,
    ``k notin (a,b)``); raise ValueError for anything else."""
    requirements = []
    for part in _split_top_level(selector):
        set_match = re.fullmatch(r"(\S+)\s+(in|notin)\s+\((.*)\)", part)
        if set_match:
            values = tuple(v.strip() for v in set_match.group(3).split(",") if v.strip())
            requirements.append(_Requirement(set_match.group(1), set_match.group(2), values))
        elif "!=" in part:
            key, value = part.split("!=", 1)
            requirements.append(_Requirement(key.strip(), "!=", (value.strip(),)))
        elif "=" in part:
            key, value = re.split(r"==?", part, maxsplit=1)
            requirements.append(_Requirement(key.strip(), "=", (value.strip(),)))
        elif part.startswith("!"):
            requirements.append(_Requirement(part[1:].strip(), "!"))
        elif re.fullmatch(r"[A-Za-z0-9._/-]+", part):
            requirements.append(_Requirement(part, "exists"))
        else:
            raise ValueError(f"unable to parse requirement: {part!r}")
    return requirements


def matches_selector(labels: dict[str, str] | None, selector: str | None) -> bool:
    if not selector:
        return True
    return all(r.matches(labels or {}) for r in parse_selector(selector))


# --- errors ---------------------------------------------------------------------------------


class _ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: JsonDict | None = None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def body(self) -> JsonDict:
        status: JsonDict = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            status["details"] = self.details
        return status


def _details(name: str, kind: str, group: str) -> JsonDict:
    details: JsonDict = {"name": name, "kind": kind}
    if group:
        details["group"] = group
    return details


# --- the server -----------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: dict[str, list[str]]


@dataclass
class _Fault:
    code: int
    remaining: int
    retry_after: int | None
    methods: frozenset[str] | None


@dataclass
class _Store:
    jobs: dict[tuple[str, str], JsonDict] = field(default_factory=dict)
    pods: dict[tuple[str, str], JsonDict] = field(default_factory=dict)
    logs: dict[tuple[str, str, str], str] = field(default_factory=dict)  # ns, pod, container


class FakeApiServer:
    """A threaded HTTP server faking the parts of kube-apiserver Altar uses.

    Use as a context manager, or call :meth:`start` and :meth:`stop`. ``deletion_delay_s`` is
    how long a foreground deletion keeps a Job visible (with ``deletionTimestamp`` and the
    ``foregroundDeletion`` finalizer) before it completes; None keeps it until
    :meth:`collect_garbage` is called. Background deletion removes the Job at once and leaves
    its Pods until :meth:`collect_garbage`; a delete without a policy orphans them (the
    batch/v1 default). With ``honour_ttl`` a finished Job and its pods are deleted
    ``ttlSecondsAfterFinished`` seconds after it finished, as the TTL controller does.
    """

    def __init__(
        self,
        *,
        deletion_delay_s: float | None = 0.2,
        minor_version: str = "32",
        honour_ttl: bool = False,
    ) -> None:
        self.deletion_delay_s = deletion_delay_s
        self.honour_ttl = honour_ttl
        self.minor_version = minor_version
        self.requests: list[RecordedRequest] = []
        self._store = _Store()
        self._lock = threading.RLock()
        self._resource_version = 1000
        self._faults: list[_Fault] = []
        self._timers: list[threading.Timer] = []
        self._httpd: ThreadingHTTPServer | None = None
        self._connections: set[socket.socket] = set()
        self._thread: threading.Thread | None = None

    # -- lifecycle --

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("the fake apiserver is not running; call start() first")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FakeApiServer:
        handler = type("_BoundHandler", (_Handler,), {"fake": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        for timer in self._timers:
            timer.cancel()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        with self._lock:
            connections, self._connections = self._connections, set()
        for connection in connections:  # keep-alive connections of clients not yet closed
            with suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
            connection.close()

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def write_kubeconfig(self, path: str | Path, *, namespace: str = "default") -> Path:
        """Write a kubeconfig (JSON is YAML) pointing at this server with a token user."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake-user", "user": {"token": "fake-token"}}],
            "contexts": [
                {
                    "name": "fake",
                    "context": {"cluster": "fake", "user": "fake-user", "namespace": namespace},
                }
            ],
            "current-context": "fake",
        }
        target = Path(path)
        target.write_text(json.dumps(config, indent=2))
        target.chmod(0o600)
        return target

    # -- request accounting and fault injection --

    def reset_requests(self) -> None:
        with self._lock:
            self.requests.clear()

    def count_requests(self, method: str | None = None, path_contains: str = "") -> int:
        with self._lock:
            return sum(
                1
                for r in self.requests
                if (method is None or r.method == method) and path_contains in r.path
            )

    def inject_error(
        self,
        code: int,
        *,
        times: int = 1,
        retry_after: int | None = None,
        methods: set[str] | None = None,
    ) -> None:
        """Answer the next ``times`` API requests (of ``methods``) with ``code``."""
        with self._lock:
            self._faults.append(
                _Fault(code, times, retry_after, frozenset(methods) if methods else None)
            )

    def _take_fault(self, method: str) -> _Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.remaining > 0 and (fault.methods is None or method in fault.methods):
                    fault.remaining -= 1
                    return fault
            return None

    # -- object helpers --

    def _next_version(self) -> str:
        self._resource_version += 1
        return str(self._resource_version)

    def _find_job(self, namespace: str, name: str, uid: str | None) -> JsonDict:
        job = self._store.jobs.get((namespace, name))
        if job is None or (uid is not None and job["metadata"]["uid"] != uid):
            raise KeyError(f"no job {name} (uid {uid}) in namespace {namespace}")
        return job

    def job(self, name: str, *, namespace: str = "default") -> JsonDict | None:
        """A copy of the stored Job, or None."""
        with self._lock:
            job = self._store.jobs.get((namespace, name))
            return copy.deepcopy(job) if job else None

    def jobs(self, *, namespace: str = "default") -> list[JsonDict]:
        with self._lock:
            return [copy.deepcopy(j) for (ns, _), j in self._store.jobs.items() if ns == namespace]

    def pods_of(self, uid: str, *, namespace: str = "default") -> list[JsonDict]:
        with self._lock:
            return [
                copy.deepcopy(p)
                for (ns, _), p in self._store.pods.items()
                if ns == namespace and p["metadata"]["labels"].get(_UID_LABELS[0]) == uid
            ]

    # -- the job controller, driven by tests --

    def _pod_for(self, job: JsonDict) -> JsonDict:
        namespace = job["metadata"]["namespace"]
        uid = job["metadata"]["uid"]
        for (ns, _), pod in self._store.pods.items():
            if ns == namespace and pod["metadata"]["labels"].get(_UID_LABELS[0]) == uid:
                return pod
        raise KeyError(f"job {job['metadata']['name']} has no pod")

    def _create_pod(self, job: JsonDict) -> None:
        meta = job["metadata"]
        template = job["spec"].get("template", {})
        labels = dict(template.get("metadata", {}).get("labels") or {})
        for key in _UID_LABELS:
            labels[key] = meta["uid"]
        for key in _NAME_LABELS:
            labels[key] = meta["name"]
        pod_spec = copy.deepcopy(template.get("spec") or {})
        name = f"{meta['name']}-{secrets.token_hex(3)[:5]}"
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": meta["namespace"],
                "uid": str(uuid.uuid4()),
                "resourceVersion": self._next_version(),
                "creationTimestamp": _now(),
                "labels": labels,
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": pod_spec,
            "status": {"phase": "Pending"},
        }
        self._store.pods[(meta["namespace"], name)] = pod
        job["status"] = {"active": 1, "ready": 0, "startTime": _now()}

    def start_job(self, name: str, *, namespace: str = "default", uid: str | None = None) -> None:
        """Mark the Job's pod running (all init containers done)."""
        with self._lock:
            job = self._find_job(namespace, name, uid)
            pod = self._pod_for(job)
            spec = pod["spec"]
            pod["status"] = {
                "phase": "Running",
                "startTime": _now(),
                "initContainerStatuses": [
                    _container_status(c["name"], _terminated(0, "Completed"))
                    for c in spec.get("initContainers") or []
                ],
                "containerStatuses": [
                    _container_status(c["name"], {"running": {"startedAt": _now()}})
                    for c in spec.get("containers") or []
                ],
            }
            job["status"]["ready"] = 1
            pod["metadata"]["resourceVersion"] = self._next_version()
            job["metadata"]["resourceVersion"] = self._next_version()

    def _terminate_pod(
        self, job: JsonDict, *, init: JsonDict | None, main: JsonDict | None, phase: str
    ) -> None:
        pod = self._pod_for(job)
        spec = pod["spec"]
        init_state = init if init is not None else _terminated(0, "Completed")
        main_state = main if main is not None else {"waiting": {"reason": "PodInitializing"}}
        inits = [_container_status(c["name"], init_state) for c in spec.get("initContainers") or []]
        mains = [_container_status(c["name"], main_state) for c in spec.get("containers") or []]
        pod["status"] = {
            "phase": phase,
            "initContainerStatuses": inits,
            "containerStatuses": mains,
        }
        pod["metadata"]["resourceVersion"] = self._next_version()

    def _set_terminal(
        self, job: JsonDict, *, succeeded: bool, reason: str, message: str, settled: bool
    ) -> None:
        status = job["status"]
        status["active"] = 0
        status["ready"] = 0
        status["succeeded" if succeeded else "failed"] = 1
        first = "SuccessCriteriaMet" if succeeded else "FailureTarget"
        final = "Complete" if succeeded else "Failed"
        conditions = [_condition(first, reason, message)]
        if settled:
            conditions.append(_condition(final, reason, message))
            status["completionTime" if succeeded else "failedTime"] = _now()
        status["conditions"] = conditions
        job["metadata"]["resourceVersion"] = self._next_version()
        ttl = job["spec"].get("ttlSecondsAfterFinished")
        if settled and ttl is not None and self.honour_ttl:
            # the TTL-after-finished controller: cascading delete of this exact Job
            meta = job["metadata"]
            timer = threading.Timer(
                float(ttl), self._finish_foreground, (meta["namespace"], meta["name"], meta["uid"])
            )
            timer.daemon = True
            self._timers.append(timer)
            timer.start()

    def finish_job(
        self,
        name: str,
        *,
        exit_code: int = 0,
        namespace: str = "default",
        uid: str | None = None,
        reason: str | None = None,
        message: str | None = None,
        settled: bool = True,
    ) -> None:
        """The main container exits with ``exit_code``; the Job completes or fails.

        ``settled=False`` stops at ``SuccessCriteriaMet``/``FailureTarget`` (pods still
        terminating), as Kubernetes 1.31+ shows for a moment.
        """
        with self._lock:
            job = self._find_job(namespace, name, uid)
            term_reason = reason or ("Completed" if exit_code == 0 else "Error")
            self._terminate_pod(
                job,
                init=None,
                main=_terminated(exit_code, term_reason, message),
                phase="Succeeded" if exit_code == 0 else "Failed",
            )
            if exit_code == 0:
                self._set_terminal(
                    job,
                    succeeded=True,
                    reason="CompletionsReached",
                    message="Reached expected number of succeeded pods",
                    settled=settled,
                )
            else:
                self._set_terminal(
                    job,
                    succeeded=False,
                    reason="BackoffLimitExceeded",
                    message="Job has reached the specified backoff limit",
                    settled=settled,
                )

    def oom_kill(self, name: str, *, namespace: str = "default", uid: str | None = None) -> None:
        """The main container is killed for its memory limit (exit 137, ``OOMKilled``)."""
        self.finish_job(name, exit_code=137, namespace=namespace, uid=uid, reason="OOMKilled")

    def fail_verification(
        self,
        name: str,
        *,
        namespace: str = "default",
        uid: str | None = None,
        message: str = "",
        exit_code: int = 1,
    ) -> None:
        """The ``verify-inputs`` init container exits non-zero; the Job fails."""
        with self._lock:
            job = self._find_job(namespace, name, uid)
            self._terminate_pod(
                job,
                init=_terminated(exit_code, "Error", message or None),
                main=None,
                phase="Failed",
            )
            self._set_terminal(
                job,
                succeeded=False,
                reason="BackoffLimitExceeded",
                message="Job has reached the specified backoff limit",
                settled=True,
            )

    def expire_job(self, name: str, *, namespace: str = "default", uid: str | None = None) -> None:
        """The Job runs past ``activeDeadlineSeconds``: its pod is killed, the Job fails."""
        with self._lock:
            job = self._find_job(namespace, name, uid)
            self._terminate_pod(job, init=None, main=_terminated(137, "Error"), phase="Failed")
            self._set_terminal(
                job,
                succeeded=False,
                reason="DeadlineExceeded",
                message="Job was active longer than specified deadline",
                settled=True,
            )

    def evict(
        self,
        name: str,
        *,
        namespace: str = "default",
        uid: str | None = None,
        init_running: bool = False,
    ) -> None:
        """The kubelet evicts the Job's pod under node pressure; the Job fails.

        As the eviction manager does: the pod's phase becomes ``Failed`` with reason
        ``Evicted``, a message and a ``DisruptionTarget`` condition, and its containers are
        killed (exit 137, reason ``Error``). ``init_running`` evicts it while ``verify-inputs``
        still runs, so the init container is the one killed.
        """
        with self._lock:
            job = self._find_job(namespace, name, uid)
            killed = _terminated(137, "Error")
            if init_running:
                self._terminate_pod(job, init=killed, main=None, phase="Failed")
            else:
                self._terminate_pod(job, init=None, main=killed, phase="Failed")
            pod = self._pod_for(job)
            message = "The node was low on resource: memory. Threshold quantity: 100Mi."
            pod["status"].update(
                reason="Evicted",
                message=message,
                conditions=[
                    {
                        "type": "DisruptionTarget",
                        "status": "True",
                        "reason": "TerminationByKubelet",
                        "message": message,
                        "lastTransitionTime": _now(),
                    }
                ],
            )
            self._set_terminal(
                job,
                succeeded=False,
                reason="BackoffLimitExceeded",
                message="Job has reached the specified backoff limit",
                settled=True,
            )

    def fail_without_pods(
        self, name: str, *, namespace: str = "default", uid: str | None = None
    ) -> None:
        """The Job fails and its pod is gone (evicted and garbage-collected)."""
        with self._lock:
            job = self._find_job(namespace, name, uid)
            pod = self._pod_for(job)
            del self._store.pods[(namespace, pod["metadata"]["name"])]
            self._set_terminal(
                job,
                succeeded=False,
                reason="BackoffLimitExceeded",
                message="Job has reached the specified backoff limit",
                settled=True,
            )

    def write_log(
        self,
        name: str,
        text: str,
        *,
        container: str = "main",
        namespace: str = "default",
        uid: str | None = None,
    ) -> None:
        """Set the log of a container of the Job's pod."""
        with self._lock:
            pod = self._pod_for(self._find_job(namespace, name, uid))
            self._store.logs[(namespace, pod["metadata"]["name"], container)] = text

    def remove_job(self, name: str, *, namespace: str = "default") -> None:
        """Delete a Job and its pods outright (as TTL-after-finished would)."""
        with self._lock:
            job = self._store.jobs.pop((namespace, name), None)
            if job is not None:
                self._remove_pods_of(namespace, job["metadata"]["uid"])

    def collect_garbage(self) -> None:
        """Finish foreground deletions and remove pods whose Job is gone."""
        with self._lock:
            for key, job in list(self._store.jobs.items()):
                if job["metadata"].get("deletionTimestamp"):
                    self._remove_pods_of(key[0], job["metadata"]["uid"])
                    del self._store.jobs[key]
            live = {j["metadata"]["uid"] for j in self._store.jobs.values()}
            for key, pod in list(self._store.pods.items()):
                owner = pod["metadata"].get("ownerReferences") or []
                if owner and owner[0]["uid"] not in live:
                    del self._store.pods[key]

    def _remove_pods_of(self, namespace: str, uid: str) -> None:
        for key, pod in list(self._store.pods.items()):
            if key[0] == namespace and pod["metadata"]["labels"].get(_UID_LABELS[0]) == uid:
                del self._store.pods[key]

    def _finish_foreground(self, namespace: str, name: str, uid: str) -> None:
        with self._lock:
            job = self._store.jobs.get((namespace, name))
            if job is not None and job["metadata"]["uid"] == uid:
                self._remove_pods_of(namespace, uid)
                del self._store.jobs[(namespace, name)]

    # -- API operations (called by the handler with the lock held) --

    def api_create_job(self, namespace: str, body: JsonDict) -> JsonDict:
        meta = body.setdefault("metadata", {})
        if not meta.get("name"):
            if meta.get("generateName"):
                meta["name"] = meta["generateName"] + secrets.token_hex(3)[:5]
            else:
                raise _ApiError(
                    422,
                    "Invalid",
                    'Job.batch "" is invalid: metadata.name: Required value: name or '
                    "generateName is required",
                    _details("", "Job", "batch"),
                )
        name = meta["name"]
        uid = str(uuid.uuid4())
        _validate_job(body, uid)
        if meta.get("namespace") not in (None, namespace):
            raise _ApiError(
                400,
                "BadRequest",
                "the namespace of the provided object does not match the namespace sent on "
                "the request",
            )
        existing = self._store.jobs.get((namespace, name))
        if existing is not None:
            message = f'jobs.batch "{name}" already exists'
            if existing["metadata"].get("deletionTimestamp"):
                message = f"object is being deleted: {message}"
            raise _ApiError(409, "AlreadyExists", message, _details(name, "jobs", "batch"))
        job = copy.deepcopy(body)
        job["apiVersion"] = "batch/v1"
        job["kind"] = "Job"
        meta = job["metadata"]
        meta.update(
            namespace=namespace,
            uid=uid,
            resourceVersion=self._next_version(),
            generation=1,
            creationTimestamp=_now(),
        )
        spec = job.setdefault("spec", {})
        spec.setdefault("backoffLimit", 6)
        spec.setdefault("completions", 1)
        spec.setdefault("parallelism", 1)
        job["status"] = {}
        self._store.jobs[(namespace, name)] = job
        self._create_pod(job)
        return copy.deepcopy(job)

    def api_get_job(self, namespace: str, name: str) -> JsonDict:
        job = self._store.jobs.get((namespace, name))
        if job is None:
            raise _ApiError(
                404, "NotFound", f'jobs.batch "{name}" not found', _details(name, "jobs", "batch")
            )
        return copy.deepcopy(job)

    def api_list(self, kind: str, namespace: str, selector: str | None) -> JsonDict:
        try:
            parse_selector(selector or "")
        except ValueError as error:
            raise _ApiError(400, "BadRequest", f"unable to parse requirement: {error}") from error
        objects = self._store.jobs if kind == "JobList" else self._store.pods
        items = [
            copy.deepcopy(obj)
            for (ns, _), obj in sorted(objects.items())
            if ns == namespace and matches_selector(obj["metadata"].get("labels"), selector)
        ]
        return {
            "kind": kind,
            "apiVersion": "batch/v1" if kind == "JobList" else "v1",
            "metadata": {"resourceVersion": str(self._resource_version)},
            "items": items,
        }

    def api_delete_job(self, namespace: str, name: str, options: JsonDict) -> JsonDict:
        job = self._store.jobs.get((namespace, name))
        if job is None:
            raise _ApiError(
                404, "NotFound", f'jobs.batch "{name}" not found', _details(name, "jobs", "batch")
            )
        meta = job["metadata"]
        preconditions = options.get("preconditions") or {}
        for field_name, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
            wanted = preconditions.get(field_name)
            if wanted and wanted != meta[field_name]:
                raise _ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on jobs.batch "{name}": Precondition '
                    f"failed: {label} in precondition: {wanted}, {label} in object meta: "
                    f"{meta[field_name]}",
                    _details(name, "jobs", "batch"),
                )
        policy = options.get("propagationPolicy")
        if options.get("orphanDependents") is True:
            policy = "Orphan"
        if policy == "Foreground":
            if not meta.get("deletionTimestamp"):
                meta["deletionTimestamp"] = _now()
                meta["deletionGracePeriodSeconds"] = 0
                meta["finalizers"] = [*(meta.get("finalizers") or []), "foregroundDeletion"]
                meta["resourceVersion"] = self._next_version()
                if self.deletion_delay_s is not None:
                    timer = threading.Timer(
                        self.deletion_delay_s,
                        self._finish_foreground,
                        (namespace, name, meta["uid"]),
                    )
                    timer.daemon = True
                    self._timers.append(timer)
                    timer.start()
            return copy.deepcopy(job)
        del self._store.jobs[(namespace, name)]
        if policy in (None, "Orphan"):
            for key, pod in self._store.pods.items():
                if (
                    key[0] == namespace
                    and pod["metadata"]["labels"].get(_UID_LABELS[0]) == meta["uid"]
                ):
                    pod["metadata"]["ownerReferences"] = []
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {"name": name, "group": "batch", "kind": "jobs", "uid": meta["uid"]},
        }

    def api_get_pod(self, namespace: str, name: str) -> JsonDict:
        pod = self._store.pods.get((namespace, name))
        if pod is None:
            raise _ApiError(404, "NotFound", f'pods "{name}" not found', _details(name, "pods", ""))
        return copy.deepcopy(pod)

    def api_pod_log(self, namespace: str, name: str, query: dict[str, list[str]]) -> str:
        pod = self.api_get_pod(namespace, name)
        names = [c["name"] for c in pod["spec"].get("containers") or []]
        names += [c["name"] for c in pod["spec"].get("initContainers") or []]
        container = _first(query, "container")
        if container is None:
            if len(pod["spec"].get("containers") or []) != 1:
                raise _ApiError(
                    400,
                    "BadRequest",
                    f"a container name must be specified for pod {name}, choose one of: {names}",
                )
            container = names[0]
        if container not in names:
            raise _ApiError(400, "BadRequest", f"container {container} is not valid for pod {name}")
        text = self._store.logs.get((namespace, name, container), "")
        tail = _first(query, "tailLines")
        if tail is not None:
            lines = text.splitlines(keepends=True)
            text = "".join(lines[-int(tail) :]) if int(tail) > 0 else ""
        return text


def _label_errors(field_path: str, labels: Any) -> list[str]:
    errors = []
    for key, value in (labels or {}).items():
        prefix, slash, name = str(key).rpartition("/")
        if slash and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(prefix)):
            errors.append(f'{field_path}: Invalid value: "{key}": prefix part {_SUBDOMAIN_RULE}')
        if len(name) > 63:
            errors.append(
                f'{field_path}: Invalid value: "{key}": name part must be no more than 63 '
                "characters"
            )
        elif not _QUALIFIED_NAME.fullmatch(name):
            errors.append(f'{field_path}: Invalid value: "{key}": {_QUALIFIED_NAME_RULE}')
        text = str(value)
        if len(text) > 63:
            errors.append(
                f'{field_path}: Invalid value: "{text}": must be no more than 63 characters'
            )
        elif not _LABEL_VALUE.fullmatch(text):
            errors.append(f'{field_path}: Invalid value: "{text}": {_LABEL_VALUE_RULE}')
    return errors


def _validate_job(body: JsonDict, uid: str) -> None:
    """422 ``Invalid`` for what the real API server refuses in the parts Altar sets."""
    meta = body.get("metadata") or {}
    name = str(meta.get("name") or "")
    errors = []
    template_labels = (((body.get("spec") or {}).get("template") or {}).get("metadata") or {}).get(
        "labels"
    ) or {}
    # The Job controller's own pod labels: the API server adds them, and a template that sets
    # one already must hold the exact value (batch validation's ValidateHasLabel).
    for key, expected in (*((k, uid) for k in _UID_LABELS), *((k, name) for k in _NAME_LABELS)):
        if key in template_labels and template_labels[key] != expected:
            errors.append(
                f"spec.template.metadata.labels[{key}]: Invalid value: "
                f"\"{template_labels[key]}\": must be '{expected}'"
            )
    if len(name) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(name):
        errors.append(f'metadata.name: Invalid value: "{name}": {_SUBDOMAIN_RULE}')
    elif len(name) > 63:
        # the Job controller copies the name into the pods' job-name label
        errors.append(
            f'spec.template.labels: Invalid value: "{name}": must be no more than 63 characters'
        )
    errors += _label_errors("metadata.labels", meta.get("labels"))
    template = ((body.get("spec") or {}).get("template") or {}).get("metadata") or {}
    errors += _label_errors("spec.template.labels", template.get("labels"))
    if errors:
        joined = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
        raise _ApiError(
            422,
            "Invalid",
            f'Job.batch "{name}" is invalid: {joined}',
            _details(name, "Job", "batch"),
        )


def _first(query: dict[str, list[str]], key: str) -> str | None:
    values = query.get(key)
    return values[0] if values else None


def _terminated(exit_code: int, reason: str, message: str | None = None) -> JsonDict:
    state: JsonDict = {
        "exitCode": exit_code,
        "reason": reason,
        "startedAt": _now(),
        "finishedAt": _now(),
    }
    if message:
        state["message"] = message
    return {"terminated": state}


def _container_status(name: str, state: JsonDict) -> JsonDict:
    return {
        "name": name,
        "state": state,
        "ready": "running" in state,
        "restartCount": 0,
        "image": "",
        "imageID": "",
    }


def _condition(kind: str, reason: str, message: str) -> JsonDict:
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastProbeTime": _now(),
        "lastTransitionTime": _now(),
    }


def _discovery(path: str, minor: str) -> JsonDict | None:
    if path == "/version":
        return {
            "major": "1",
            "minor": minor,
            "gitVersion": f"v1.{minor}.0-altar-fake",
            "platform": "linux/amd64",
        }
    if path == "/api":
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}],
        }
    if path == "/apis":
        batch = {"groupVersion": "batch/v1", "version": "v1"}
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [{"name": "batch", "versions": [batch], "preferredVersion": batch}],
        }
    if path == "/api/v1":
        return {
            "kind": "APIResourceList",
            "groupVersion": "v1",
            "resources": [
                {
                    "name": "pods",
                    "singularName": "pod",
                    "namespaced": True,
                    "kind": "Pod",
                    "verbs": ["get", "list", "watch"],
                    "shortNames": ["po"],
                },
                {
                    "name": "pods/log",
                    "singularName": "",
                    "namespaced": True,
                    "kind": "Pod",
                    "verbs": ["get"],
                },
            ],
        }
    if path == "/apis/batch/v1":
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": "batch/v1",
            "resources": [
                {
                    "name": "jobs",
                    "singularName": "job",
                    "namespaced": True,
                    "kind": "Job",
                    "verbs": _JOB_VERBS,
                    "categories": ["all"],
                }
            ],
        }
    return None


class _Handler(BaseHTTPRequestHandler):
    fake: FakeApiServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # quiet test output
        pass

    def setup(self) -> None:
        super().setup()
        # headers and body go out in separate writes; without this, Nagle's algorithm and
        # the client's delayed ACK add ~40 ms to every keep-alive request
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.fake._lock:
            self.fake._connections.add(self.connection)

    def finish(self) -> None:
        with self.fake._lock:
            self.fake._connections.discard(self.connection)
        super().finish()

    def _send(self, code: int, body: JsonDict | str, headers: dict[str, str] | None = None) -> None:
        if isinstance(body, str):
            payload, ctype = body.encode(), "text/plain"
        else:
            payload, ctype = json.dumps(body).encode(), "application/json"
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(payload)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(payload)

    def _body(self) -> JsonDict:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return {}
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as error:
            raise _ApiError(400, "BadRequest", f"invalid JSON body: {error}") from error
        if not isinstance(value, dict):
            raise _ApiError(400, "BadRequest", "the request body must be a JSON object")
        return value

    def _handle(self, method: str) -> None:
        parts = urlsplit(self.path)
        path, query = parts.path.rstrip("/") or "/", parse_qs(parts.query)
        fake = self.fake
        with fake._lock:
            fake.requests.append(RecordedRequest(method, path, query))
        body = self._body() if method in ("POST", "DELETE", "PUT", "PATCH") else {}
        fault = fake._take_fault(method) if path.startswith(("/api/v1/", "/apis/batch/")) else None
        if fault is not None:
            headers = {"Retry-After": str(fault.retry_after)} if fault.retry_after else None
            reason = {409: "Conflict", 429: "TooManyRequests", 503: "ServiceUnavailable"}.get(
                fault.code, "InternalError"
            )
            error = _ApiError(fault.code, reason, f"injected {fault.code} from the fake apiserver")
            self._send(fault.code, error.body(), headers)
            return
        try:
            code, result = self._route(method, path, query, body)
        except _ApiError as error:
            self._send(error.code, error.body())
            return
        self._send(code, result)

    def _route(
        self, method: str, path: str, query: dict[str, list[str]], body: JsonDict
    ) -> tuple[int, JsonDict | str]:
        fake = self.fake
        discovery = _discovery(path, fake.minor_version)
        if discovery is not None:
            if method != "GET":
                raise _ApiError(405, "MethodNotAllowed", f"method {method} is not allowed")
            return 200, discovery
        selector = _first(query, "labelSelector")
        jobs = _JOBS_PATH.match(path)
        pods = _PODS_PATH.match(path)
        with fake._lock:
            if jobs:
                namespace, name = jobs.group(1), jobs.group(2)
                if name is None and method == "GET":
                    return 200, fake.api_list("JobList", namespace, selector)
                if name is None and method == "POST":
                    return 201, fake.api_create_job(namespace, body)
                if name is not None and method == "GET":
                    return 200, fake.api_get_job(namespace, name)
                if name is not None and method == "DELETE":
                    options = dict(body)
                    for key in ("propagationPolicy", "gracePeriodSeconds"):
                        if key in query and key not in options:
                            options[key] = query[key][0]
                    result = fake.api_delete_job(namespace, name, options)
                    return (202 if result.get("kind") == "Job" else 200), result
            elif pods:
                namespace, name, log = pods.group(1), pods.group(2), pods.group(3)
                if name is None and method == "GET":
                    return 200, fake.api_list("PodList", namespace, selector)
                if name is not None and log and method == "GET":
                    return 200, fake.api_pod_log(namespace, name, query)
                if name is not None and method == "GET":
                    return 200, fake.api_get_pod(namespace, name)
            else:
                raise _ApiError(404, "NotFound", "the server could not find the requested resource")
        raise _ApiError(405, "MethodNotAllowed", f"the server does not allow this method: {method}")

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")


@contextmanager
def running_fake_apiserver(**options: Any) -> Iterator[FakeApiServer]:
    """``with running_fake_apiserver() as fake: ...``"""
    fake = FakeApiServer(**options)
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()
