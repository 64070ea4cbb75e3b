"""An in-memory Kubernetes API behind the runtime seam, for unit tests.

It behaves like the API server and its controllers, not like the backend: a taken name is
:class:`K8sJobExistsError` (``being_deleted`` while the holder is in foreground deletion),
every Job gets a fresh uid and one Pod (active at once) labelled as the Job controller labels it,
list calls honour label selectors (the fake API server's parser), a delete with a ``uid``
precondition spares a newer Job of the same name, a foreground delete keeps the Job visible
(``deleting``) until :meth:`FakeKubernetesRuntime.collect_garbage`, and a label the API server
would refuse is a 422. Tests script outcomes with :meth:`finish`,
:meth:`expire` and :meth:`fail_verification`, make the API unreachable with ``down``, and with
:meth:`drop_created_answers` accept a create but lose its answer (the connection drops after
the server stored the Job). ``calls`` counts requests per operation.
"""

from __future__ import annotations

import collections
import copy
import itertools
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from altar.backends.kubernetes.naming import is_valid_label
from altar.backends.kubernetes.testing.apiserver.selectors import matches_selector
from altar.backends.kubernetes.values import (
    MAIN_CONTAINER,
    VERIFY_INPUTS_CONTAINER,
    ContainerExit,
    JobCondition,
    K8sApiError,
    K8sJobExistsError,
    K8sJobInfo,
    K8sPodInfo,
    PropagationPolicy,
)
from altar.execution import BackendUnavailableError, TaskState

__all__ = ["FakeKubernetesRuntime"]


@dataclass
class _Pod:
    info: K8sPodInfo
    labels: dict[str, str]
    logs: dict[str, str] = field(default_factory=dict)


class FakeKubernetesRuntime:
    """:class:`~altar.backends.kubernetes.runtime.KubernetesRuntime` with a cluster in memory."""

    def __init__(self) -> None:
        self.jobs: dict[tuple[str, str], K8sJobInfo] = {}
        self.manifests: dict[str, dict[str, Any]] = {}  # uid -> the manifest as created
        self.pods: dict[tuple[str, str], _Pod] = {}
        self.calls: collections.Counter[str] = collections.Counter()
        self.down = False
        self._drop_answers = 0
        self._clock = itertools.count(1)

    # -- the seam --

    def _call(self, operation: str) -> None:
        self.calls[operation] += 1
        if self.down:
            raise BackendUnavailableError(f"Kubernetes API unreachable during {operation}")

    def create_job(self, manifest: dict[str, Any], *, namespace: str) -> K8sJobInfo:
        self._call("create_job")
        meta = manifest.get("metadata") or {}
        name = str(meta.get("name") or "")
        template = ((manifest.get("spec") or {}).get("template") or {}).get("metadata") or {}
        labels = dict(meta.get("labels") or {})
        if not name:
            raise K8sApiError('Job.batch "" is invalid: metadata.name: Required', status=422)
        for key, value in [*labels.items(), *(template.get("labels") or {}).items()]:
            if not is_valid_label(key, str(value)):
                raise K8sApiError(
                    f'Job.batch "{name}" is invalid: label {key}={value!r}', status=422
                )
        held = self.jobs.get((namespace, name))
        if held is not None:
            message = f'jobs.batch "{name}" already exists'
            raise K8sJobExistsError(
                name,
                namespace=namespace,
                detail=f"object is being deleted: {message}" if held.deleting else message,
                being_deleted=held.deleting,
            )
        uid = str(uuid.uuid4())
        job = K8sJobInfo(
            name=name,
            # the Job controller creates its pod at once and counts it in status.active
            state=TaskState.RUNNING,
            labels=labels,
            annotations=dict(meta.get("annotations") or {}),
            uid=uid,
            finished=False,
        )
        self.jobs[(namespace, name)] = job
        self.manifests[uid] = copy.deepcopy(manifest)  # the server keeps its own copy
        pod_name = f"{name}-{uid[:5]}"
        pod_labels = {**(template.get("labels") or {}), "controller-uid": uid, "job-name": name}
        self.pods[(namespace, pod_name)] = _Pod(
            K8sPodInfo(pod_name, uid, name, created=f"{next(self._clock):08d}"), pod_labels
        )
        if self._drop_answers:
            self._drop_answers -= 1  # stored, but the answer never reaches the client
            raise BackendUnavailableError(
                f"Kubernetes API unreachable during create job {name}: connection dropped"
            )
        return job

    def read_job(self, name: str, *, namespace: str) -> K8sJobInfo | None:
        self._call("read_job")
        return self.jobs.get((namespace, name))

    def list_jobs(self, *, namespace: str, label_selector: str | None = None) -> list[K8sJobInfo]:
        self._call("list_jobs")
        return [
            job
            for (ns, _), job in sorted(self.jobs.items())
            if ns == namespace and matches_selector(job.labels, label_selector)
        ]

    def delete_job(
        self,
        name: str,
        *,
        namespace: str,
        uid: str | None = None,
        propagation_policy: PropagationPolicy = "Background",
    ) -> bool:
        self._call("delete_job")
        job = self.jobs.get((namespace, name))
        if job is None or (uid is not None and job.uid != uid):
            return False  # 404, or 409 Conflict on the uid precondition
        if propagation_policy == "Foreground":
            self.jobs[(namespace, name)] = replace(job, deleting=True)
        else:
            del self.jobs[(namespace, name)]  # its pods go with the garbage collector
        return True

    def list_pods(self, *, namespace: str, label_selector: str | None = None) -> list[K8sPodInfo]:
        self._call("list_pods")
        return [
            pod.info
            for (ns, _), pod in sorted(self.pods.items())
            if ns == namespace and matches_selector(pod.labels, label_selector)
        ]

    def read_log_tail(
        self, pod_name: str, *, namespace: str, container: str, lines: int
    ) -> str | None:
        self._call("read_log_tail")
        pod = self.pods.get((namespace, pod_name))
        text = pod.logs.get(container) if pod is not None else None
        if text is None:
            return None
        return "".join(text.splitlines(keepends=True)[-lines:]) if lines > 0 else ""

    # -- the controllers, driven by tests --

    def drop_created_answers(self, times: int = 1) -> None:
        """The next ``times`` creates are stored, then fail as a dropped connection."""
        self._drop_answers += times

    def _pod_of(self, job: K8sJobInfo, namespace: str) -> _Pod:
        return next(
            p for (ns, _), p in self.pods.items() if ns == namespace and p.info.job_uid == job.uid
        )

    def job(self, name: str, namespace: str = "default") -> K8sJobInfo:
        return self.jobs[(namespace, name)]

    def finish(
        self,
        name: str,
        *,
        exit_code: int = 0,
        reason: str | None = None,
        settled: bool = True,
        namespace: str = "default",
        log: str | None = None,
    ) -> None:
        """The main container exits; the Job completes or fails (as Kubernetes 1.31+ shows)."""
        job = self.job(name, namespace)
        pod = self._pod_of(job, namespace)
        exit_reason = reason or ("Completed" if exit_code == 0 else "Error")
        pod.info = replace(
            pod.info, container_exits=(ContainerExit(MAIN_CONTAINER, exit_code, exit_reason),)
        )
        if log is not None:
            pod.logs[MAIN_CONTAINER] = log
        self._terminal(job, namespace, exit_code == 0, "BackoffLimitExceeded", settled)

    def fail_verification(self, name: str, *, namespace: str = "default", log: str = "") -> None:
        """The ``verify-inputs`` init container exits 1; the Job fails."""
        job = self.job(name, namespace)
        pod = self._pod_of(job, namespace)
        pod.info = replace(
            pod.info, init_exits=(ContainerExit(VERIFY_INPUTS_CONTAINER, 1, "Error"),)
        )
        pod.logs[VERIFY_INPUTS_CONTAINER] = log
        self._terminal(job, namespace, False, "BackoffLimitExceeded", True)

    def write_log(
        self, name: str, text: str, *, container: str = MAIN_CONTAINER, namespace: str = "default"
    ) -> None:
        """Set the log of a container of the Job's pod."""
        self._pod_of(self.job(name, namespace), namespace).logs[container] = text

    def expire(self, name: str, *, namespace: str = "default") -> None:
        """The Job outlives ``activeDeadlineSeconds``; it fails with ``DeadlineExceeded``."""
        self._terminal(self.job(name, namespace), namespace, False, "DeadlineExceeded", True)

    def _terminal(
        self, job: K8sJobInfo, namespace: str, succeeded: bool, reason: str, settled: bool
    ) -> None:
        kinds = ("SuccessCriteriaMet", "Complete") if succeeded else ("FailureTarget", "Failed")
        why = "CompletionsReached" if succeeded else reason
        conditions = tuple(JobCondition(kind, "True", why) for kind in kinds[: 2 if settled else 1])
        state = TaskState.SUCCEEDED if succeeded else TaskState.FAILED
        self.jobs[(namespace, job.name)] = replace(
            job, state=state, finished=settled, conditions=conditions
        )

    def collect_garbage(self) -> None:
        """Finish foreground deletions; remove pods whose Job is gone."""
        self.jobs = {key: job for key, job in self.jobs.items() if not job.deleting}
        live = {job.uid for job in self.jobs.values()}
        self.pods = {key: pod for key, pod in self.pods.items() if pod.info.job_uid in live}

    def remove(self, name: str, *, namespace: str = "default") -> None:
        """The TTL-after-finished controller deletes the Job and its pods."""
        self.jobs.pop((namespace, name), None)
        self.collect_garbage()
