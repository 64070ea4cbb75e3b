"""The API operations on Jobs and Pods (called by the HTTP handler with the lock held)."""

from __future__ import annotations

import copy
import secrets
import threading
import uuid

from altar.backends.kubernetes.testing.apiserver.disruption import Disruptions
from altar.backends.kubernetes.testing.apiserver.objects import JsonDict, now
from altar.backends.kubernetes.testing.apiserver.selectors import matches_selector, parse_selector
from altar.backends.kubernetes.testing.apiserver.status import (
    UID_LABELS,
    ApiError,
    details,
    validate_job,
)

__all__ = ["ApiOperations"]


class ApiOperations(Disruptions):
    """What each API request does to the cluster state."""

    def api_create_job(self, namespace: str, body: JsonDict) -> JsonDict:
        meta = body.setdefault("metadata", {})
        if not meta.get("name"):
            if meta.get("generateName"):
                meta["name"] = meta["generateName"] + secrets.token_hex(3)[:5]
            else:
                raise ApiError(
                    422,
                    "Invalid",
                    'Job.batch "" is invalid: metadata.name: Required value: name or '
                    "generateName is required",
                    details("", "Job", "batch"),
                )
        name = meta["name"]
        uid = str(uuid.uuid4())
        validate_job(body, uid)
        if meta.get("namespace") not in (None, namespace):
            raise ApiError(
                400,
                "BadRequest",
                "the namespace of the provided object does not match the namespace sent on "
                "the request",
            )
        # quota admission runs before storage: a full Job count refuses even a taken name
        refused = self._quota_refusal(namespace, f'jobs.batch "{name}"', {}, pod=False)
        if refused is not None:
            raise ApiError(403, "Forbidden", refused, details(name, "jobs", "batch"))
        existing = self._store.jobs.get((namespace, name))
        if existing is not None:
            message = f'jobs.batch "{name}" already exists'
            if existing["metadata"].get("deletionTimestamp"):
                message = f"object is being deleted: {message}"
            raise ApiError(409, "AlreadyExists", message, details(name, "jobs", "batch"))
        job = copy.deepcopy(body)
        job["apiVersion"] = "batch/v1"
        job["kind"] = "Job"
        meta = job["metadata"]
        meta.update(
            namespace=namespace,
            uid=uid,
            resourceVersion=self._next_version(),
            generation=1,
            creationTimestamp=now(),
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
            raise ApiError(
                404, "NotFound", f'jobs.batch "{name}" not found', details(name, "jobs", "batch")
            )
        return copy.deepcopy(job)

    def api_list(self, kind: str, namespace: str, selector: str | None) -> JsonDict:
        try:
            parse_selector(selector or "")
        except ValueError as error:
            raise ApiError(400, "BadRequest", f"unable to parse requirement: {error}") from error
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
            raise ApiError(
                404, "NotFound", f'jobs.batch "{name}" not found', details(name, "jobs", "batch")
            )
        meta = job["metadata"]
        preconditions = options.get("preconditions") or {}
        for field_name, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
            wanted = preconditions.get(field_name)
            if wanted and wanted != meta[field_name]:
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on jobs.batch "{name}": Precondition '
                    f"failed: {label} in precondition: {wanted}, {label} in object meta: "
                    f"{meta[field_name]}",
                    details(name, "jobs", "batch"),
                )
        policy = options.get("propagationPolicy")
        if options.get("orphanDependents") is True:
            policy = "Orphan"
        if policy == "Foreground":
            if not meta.get("deletionTimestamp"):
                meta["deletionTimestamp"] = now()
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
                    and pod["metadata"]["labels"].get(UID_LABELS[0]) == meta["uid"]
                ):
                    pod["metadata"]["ownerReferences"] = []
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {"name": name, "group": "batch", "kind": "jobs", "uid": meta["uid"]},
        }

    def api_list_quotas(self, namespace: str) -> JsonDict:
        items = [
            self._with_status(quota)
            for (ns, _), quota in sorted(self._store.quotas.items())
            if ns == namespace
        ]
        meta = {"resourceVersion": str(self._resource_version)}
        return {"kind": "ResourceQuotaList", "apiVersion": "v1", "metadata": meta, "items": items}

    def api_list_events(self, namespace: str) -> JsonDict:
        items = [
            copy.deepcopy(e) for e in self._store.events if e["metadata"]["namespace"] == namespace
        ]
        meta = {"resourceVersion": str(self._resource_version)}
        return {"kind": "EventList", "apiVersion": "v1", "metadata": meta, "items": items}

    def api_get_pod(self, namespace: str, name: str) -> JsonDict:
        pod = self._store.pods.get((namespace, name))
        if pod is None:
            raise ApiError(404, "NotFound", f'pods "{name}" not found', details(name, "pods", ""))
        return copy.deepcopy(pod)

    def api_pod_log(self, namespace: str, name: str, query: dict[str, list[str]]) -> str:
        pod = self.api_get_pod(namespace, name)
        names = [c["name"] for c in pod["spec"].get("containers") or []]
        names += [c["name"] for c in pod["spec"].get("initContainers") or []]
        container = first(query, "container")
        if container is None:
            if len(pod["spec"].get("containers") or []) != 1:
                raise ApiError(
                    400,
                    "BadRequest",
                    f"a container name must be specified for pod {name}, choose one of: {names}",
                )
            container = names[0]
        if container not in names:
            raise ApiError(400, "BadRequest", f"container {container} is not valid for pod {name}")
        text = self._store.logs.get((namespace, name, container), "")
        tail = first(query, "tailLines")
        if tail is not None:
            lines = text.splitlines(keepends=True)
            text = "".join(lines[-int(tail) :]) if int(tail) > 0 else ""
        return text


def first(query: dict[str, list[str]], key: str) -> str | None:
    values = query.get(key)
    return values[0] if values else None
