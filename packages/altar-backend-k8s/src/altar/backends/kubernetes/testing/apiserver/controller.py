"""The cluster state and the controllers that drive it (job controller, garbage collector, TTL).

There is no scheduler or kubelet: tests drive outcomes with the methods here.
"""

from __future__ import annotations

import copy
import secrets
import threading
import uuid
from dataclasses import dataclass, field
from fractions import Fraction

from altar.backends.kubernetes.testing.apiserver.objects import (
    JsonDict,
    condition,
    container_status,
    now,
    terminated,
)
from altar.backends.kubernetes.testing.apiserver.quota import (
    amount,
    format_amount,
    pod_needs,
    refusal,
)
from altar.backends.kubernetes.testing.apiserver.status import NAME_LABELS, UID_LABELS

__all__ = ["JobController"]


@dataclass
class _Store:
    jobs: dict[tuple[str, str], JsonDict] = field(default_factory=dict)
    pods: dict[tuple[str, str], JsonDict] = field(default_factory=dict)
    logs: dict[tuple[str, str, str], str] = field(default_factory=dict)  # ns, pod, container
    quotas: dict[tuple[str, str], JsonDict] = field(default_factory=dict)
    # usage the quota counts that is not ours (other users' pods), per quota
    elsewhere: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    events: list[JsonDict] = field(default_factory=list)


class JobController:
    """Jobs and Pods in memory, and the test-driven controllers acting on them."""

    def __init__(self, *, deletion_delay_s: float | None, honour_ttl: bool) -> None:
        self.deletion_delay_s = deletion_delay_s
        self.honour_ttl = honour_ttl
        self._store = _Store()
        self._lock = threading.RLock()
        self._resource_version = 1000
        self._timers: list[threading.Timer] = []

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
                if ns == namespace and p["metadata"]["labels"].get(UID_LABELS[0]) == uid
            ]

    # -- the job controller, driven by tests --

    def _pod_for(self, job: JsonDict) -> JsonDict:
        namespace = job["metadata"]["namespace"]
        uid = job["metadata"]["uid"]
        for (ns, _), pod in self._store.pods.items():
            if ns == namespace and pod["metadata"]["labels"].get(UID_LABELS[0]) == uid:
                return pod
        raise KeyError(f"job {job['metadata']['name']} has no pod")

    def _create_pod(self, job: JsonDict) -> None:
        meta = job["metadata"]
        template = job["spec"].get("template", {})
        name = f"{meta['name']}-{secrets.token_hex(3)[:5]}"
        refused = self._quota_refusal(
            meta["namespace"], f'pods "{name}"', template.get("spec") or {}, pod=True
        )
        if refused is not None:
            # The Job controller's create is refused: the Job stays without pods (active 0)
            # and the refusal is only an event; the controller tries again later.
            job["status"] = {**(job.get("status") or {}), "ready": 0}
            job["status"].setdefault("startTime", now())
            job["status"].pop("active", None)
            self._event(job, "FailedCreate", f"Error creating: {refused}")
            return
        labels = dict(template.get("metadata", {}).get("labels") or {})
        for key in UID_LABELS:
            labels[key] = meta["uid"]
        for key in NAME_LABELS:
            labels[key] = meta["name"]
        pod_spec = copy.deepcopy(template.get("spec") or {})
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": meta["namespace"],
                "uid": str(uuid.uuid4()),
                "resourceVersion": self._next_version(),
                "creationTimestamp": now(),
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
        start = (job.get("status") or {}).get("startTime") or now()
        job["status"] = {"active": 1, "ready": 0, "startTime": start}
        self._event(job, "SuccessfulCreate", f"Created pod: {name}")

    # -- ResourceQuota admission and the events the controllers record --

    def set_quota(
        self,
        name: str,
        hard: dict[str, str],
        *,
        namespace: str = "default",
        used_elsewhere: dict[str, str] | None = None,
        scopes: list[str] | None = None,
    ) -> None:
        """Create or update ResourceQuota ``name``; ``used_elsewhere`` is what other work in
        the namespace already uses of it. The Job controller then retries the pods quota
        refused before (as its resync does)."""
        with self._lock:
            key = (namespace, name)
            spec: JsonDict = {"hard": dict(hard)}
            if scopes:
                spec["scopes"] = list(scopes)
            old = self._store.quotas.get(key)
            self._store.quotas[key] = {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "uid": old["metadata"]["uid"] if old else str(uuid.uuid4()),
                    "resourceVersion": self._next_version(),
                    "creationTimestamp": old["metadata"]["creationTimestamp"] if old else now(),
                },
                "spec": spec,
            }
            self._store.elsewhere[key] = dict(used_elsewhere or {})
            self._retry_refused_pods()

    def remove_quota(self, name: str, *, namespace: str = "default") -> None:
        """Delete ResourceQuota ``name``; refused pods are created on the resync."""
        with self._lock:
            self._store.quotas.pop((namespace, name), None)
            self._store.elsewhere.pop((namespace, name), None)
            self._retry_refused_pods()

    def quota(self, name: str, *, namespace: str = "default") -> JsonDict | None:
        """The ResourceQuota with its ``status`` (``hard``, ``used``) as the controller keeps it."""
        with self._lock:
            quota = self._store.quotas.get((namespace, name))
            return self._with_status(quota) if quota else None

    def events(self, *, namespace: str = "default") -> list[JsonDict]:
        with self._lock:
            return [
                copy.deepcopy(e)
                for e in self._store.events
                if e["metadata"]["namespace"] == namespace
            ]

    def _with_status(self, quota: JsonDict) -> JsonDict:
        out = copy.deepcopy(quota)
        namespace, name = out["metadata"]["namespace"], out["metadata"]["name"]
        hard = out["spec"]["hard"]
        used = self._quota_used(namespace, name)
        out["status"] = {
            "hard": dict(hard),
            "used": {k: format_amount(k, used.get(k, amount(0))) for k in hard},
        }
        return out

    def _quota_used(self, namespace: str, name: str) -> dict[str, Fraction]:
        """What the namespace uses of each key of quota ``name``: live (non-terminal) pods,
        every Job (object count), and the usage of others."""
        hard = self._store.quotas[(namespace, name)]["spec"]["hard"]
        used = {k: amount(v) for k, v in self._store.elsewhere.get((namespace, name), {}).items()}
        for key in hard:
            total = used.get(key, amount(0))
            if key == "count/jobs.batch":
                total += sum(1 for (ns, _) in self._store.jobs if ns == namespace)
            else:
                for (ns, _), pod in self._store.pods.items():
                    if ns != namespace or pod["status"].get("phase") in ("Succeeded", "Failed"):
                        continue
                    needs = pod_needs(pod["spec"], key)
                    total += needs if needs is not None else 0
            used[key] = total
        return used

    def _quota_refusal(
        self, namespace: str, what: str, pod_spec: JsonDict, *, pod: bool
    ) -> str | None:
        """The quota plugin's refusal of one more pod (``pod``) or Job, or None."""
        for (ns, name), quota in sorted(self._store.quotas.items()):
            if ns != namespace or quota["spec"].get("scopes"):
                continue
            hard = {k: amount(v) for k, v in quota["spec"]["hard"].items()}
            used = self._quota_used(namespace, name)
            needs: dict[str, Fraction] = {}
            for key in hard:
                if pod:
                    need = pod_needs(pod_spec, key)
                else:
                    need = amount(1) if key == "count/jobs.batch" else None
                if need is not None and need > 0:
                    needs[key] = need
            over = sorted(k for k, v in needs.items() if used.get(k, 0) + v > hard[k])
            if over:
                return refusal(what, name, over, needs, used, hard)
        return None

    def _retry_refused_pods(self) -> None:
        """The Job controller's resync: Jobs that should have a pod and have none get one."""
        for job in self._store.jobs.values():
            status = job.get("status") or {}
            if job["metadata"].get("deletionTimestamp") or status.get("conditions"):
                continue
            uid = job["metadata"]["uid"]
            if any(
                p["metadata"]["labels"].get(UID_LABELS[0]) == uid for p in self._store.pods.values()
            ):
                continue
            self._create_pod(job)
            job["metadata"]["resourceVersion"] = self._next_version()

    def _event(self, job: JsonDict, reason: str, message: str) -> None:
        meta = job["metadata"]
        self._store.events.append(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {
                    "name": f"{meta['name']}.{secrets.token_hex(8)}",
                    "namespace": meta["namespace"],
                    "resourceVersion": self._next_version(),
                },
                "involvedObject": {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": meta["name"],
                    "namespace": meta["namespace"],
                    "uid": meta["uid"],
                },
                "reason": reason,
                "message": message,
                "type": "Warning" if reason.startswith("Failed") else "Normal",
                "source": {"component": "job-controller"},
                "firstTimestamp": now(),
                "lastTimestamp": now(),
                "count": 1,
            }
        )

    def start_job(self, name: str, *, namespace: str = "default", uid: str | None = None) -> None:
        """Mark the Job's pod running (all init containers done)."""
        with self._lock:
            job = self._find_job(namespace, name, uid)
            pod = self._pod_for(job)
            spec = pod["spec"]
            pod["status"] = {
                "phase": "Running",
                "startTime": now(),
                "initContainerStatuses": [
                    container_status(c["name"], terminated(0, "Completed"))
                    for c in spec.get("initContainers") or []
                ],
                "containerStatuses": [
                    container_status(c["name"], {"running": {"startedAt": now()}})
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
        init_state = init if init is not None else terminated(0, "Completed")
        main_state = main if main is not None else {"waiting": {"reason": "PodInitializing"}}
        inits = [container_status(c["name"], init_state) for c in spec.get("initContainers") or []]
        mains = [container_status(c["name"], main_state) for c in spec.get("containers") or []]
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
        conditions = [condition(first, reason, message)]
        if settled:
            conditions.append(condition(final, reason, message))
            status["completionTime" if succeeded else "failedTime"] = now()
        status["conditions"] = conditions
        job["metadata"]["resourceVersion"] = self._next_version()
        self._retry_refused_pods()  # the ended pod no longer counts against a quota
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

    def _fail_backoff(self, job: JsonDict, *, settled: bool) -> None:
        """The Job controller's verdict once the Job's pods failed past its backoff limit."""
        self._set_terminal(
            job,
            succeeded=False,
            reason="BackoffLimitExceeded",
            message="Job has reached the specified backoff limit",
            settled=settled,
        )

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
                main=terminated(exit_code, term_reason, message),
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
                self._fail_backoff(job, settled=settled)

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
                init=terminated(exit_code, "Error", message or None),
                main=None,
                phase="Failed",
            )
            self._fail_backoff(job, settled=True)

    def expire_job(self, name: str, *, namespace: str = "default", uid: str | None = None) -> None:
        """The Job runs past ``activeDeadlineSeconds``: its pod is killed, the Job fails."""
        with self._lock:
            job = self._find_job(namespace, name, uid)
            self._terminate_pod(job, init=None, main=terminated(137, "Error"), phase="Failed")
            self._set_terminal(
                job,
                succeeded=False,
                reason="DeadlineExceeded",
                message="Job was active longer than specified deadline",
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
            self._fail_backoff(job, settled=True)

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
            if key[0] == namespace and pod["metadata"]["labels"].get(UID_LABELS[0]) == uid:
                del self._store.pods[key]

    def _finish_foreground(self, namespace: str, name: str, uid: str) -> None:
        with self._lock:
            job = self._store.jobs.get((namespace, name))
            if job is not None and job["metadata"]["uid"] == uid:
                self._remove_pods_of(namespace, uid)
                del self._store.jobs[(namespace, name)]
