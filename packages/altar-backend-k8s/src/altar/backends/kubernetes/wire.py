"""Reading Job and Pod objects (the API's JSON) into the plain values of :mod:`.values`.

Only wire format lives here; what a Job's conditions mean is :mod:`.classify`'s concern.

Outside the common anatomy because the Kubernetes API's JSON is large enough to need its own
parsers; the real runtime and the fake API server's clients both produce it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from altar.backends.kubernetes.classify import job_state, true_condition
from altar.backends.kubernetes.values import (
    ContainerExit,
    JobCondition,
    K8sJobInfo,
    K8sPodInfo,
    ResourceQuotaInfo,
)

__all__ = ["job_info_from_object", "pod_info_from_object", "quota_info_from_object"]

_UID_LABELS = ("batch.kubernetes.io/controller-uid", "controller-uid")
_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")


def _str_map(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in (value or {}).items()}


def job_info_from_object(job: Mapping[str, Any]) -> K8sJobInfo:
    """Read a Job object (API JSON) into a K8sJobInfo."""
    meta = job.get("metadata") or {}
    status = job.get("status") or {}
    conditions = tuple(
        JobCondition(
            type=str(c.get("type", "")),
            status=str(c.get("status", "")),
            reason=c.get("reason"),
            message=c.get("message"),
        )
        for c in status.get("conditions") or []
    )
    finished = true_condition(conditions, "Complete", "Failed") is not None
    return K8sJobInfo(
        name=str(meta.get("name", "")),
        state=job_state(conditions, int(status.get("active") or 0)),
        labels=_str_map(meta.get("labels")),
        annotations=_str_map(meta.get("annotations")),
        uid=meta.get("uid"),
        finished=finished,
        deleting=bool(meta.get("deletionTimestamp")),
        conditions=conditions,
        start_time=_time(status.get("startTime")),
        end_time=_time(status.get("completionTime")) or _failed_time(status),
    )


def _time(value: Any) -> float | None:
    """An RFC 3339 time of the API (``2026-12-01T22:00:00Z``) as epoch seconds."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _failed_time(status: Mapping[str, Any]) -> float | None:
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Failed" and condition.get("status") == "True":
            return _time(condition.get("lastTransitionTime"))
    return None


def _exits(statuses: Any) -> tuple[ContainerExit, ...]:
    exits = []
    for status in statuses or []:
        terminated = (status.get("state") or {}).get("terminated")
        if terminated is None:
            continue
        exits.append(
            ContainerExit(
                name=str(status.get("name", "")),
                exit_code=int(terminated.get("exitCode") or 0),
                reason=terminated.get("reason"),
                message=terminated.get("message"),
            )
        )
    return tuple(exits)


def pod_info_from_object(pod: Mapping[str, Any]) -> K8sPodInfo:
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    status = pod.get("status") or {}
    uid = next((labels[k] for k in _UID_LABELS if k in labels), None)
    if uid is None:
        owners = [o for o in meta.get("ownerReferences") or [] if o.get("kind") == "Job"]
        uid = owners[0].get("uid") if owners else None
    return K8sPodInfo(
        name=str(meta.get("name", "")),
        job_uid=uid,
        job_name=next((labels[k] for k in _NAME_LABELS if k in labels), None),
        created=str(meta.get("creationTimestamp") or ""),
        init_exits=_exits(status.get("initContainerStatuses")),
        container_exits=_exits(status.get("containerStatuses")),
        disruption=_disruption(status),
        disruption_reason=_target_reason(status),
        status_reason=status.get("reason"),
    )


def _target_reason(status: Mapping[str, Any]) -> str | None:
    for c in status.get("conditions") or []:
        if c.get("type") == "DisruptionTarget" and c.get("status") == "True":
            return str(c.get("reason") or "DisruptionTarget")
    return None


# A pod's status.reason when something outside it stopped it: the kubelet's node-pressure
# eviction, its graceful node shutdown (``Terminated``; ``Shutdown`` before 1.22), and the
# node controller's mark on pods of an unreachable node before 1.26 (``NodeLost``).
_OUTSIDE_REASONS = frozenset({"Evicted", "Terminated", "Shutdown", "NodeLost"})


def _disruption(status: Mapping[str, Any]) -> str | None:
    """Why the pod was stopped from outside (eviction, preemption), or None."""
    target = next(
        (
            c
            for c in status.get("conditions") or []
            if c.get("type") == "DisruptionTarget" and c.get("status") == "True"
        ),
        None,
    )
    if status.get("reason") in _OUTSIDE_REASONS or target is not None:
        reason = status.get("reason") or (target or {}).get("reason") or "DisruptionTarget"
        message = status.get("message") or (target or {}).get("message") or ""
        return f"{reason}: {message}" if message else str(reason)
    return None


def quota_info_from_object(quota: Mapping[str, Any]) -> ResourceQuotaInfo:
    """Read a ResourceQuota object (API JSON); ``hard`` falls back to the spec's."""
    meta = quota.get("metadata") or {}
    spec = quota.get("spec") or {}
    status = quota.get("status") or {}
    return ResourceQuotaInfo(
        name=str(meta.get("name", "")),
        hard=_str_map(status.get("hard") or spec.get("hard")),
        used=_str_map(status.get("used")),
        scoped=bool(spec.get("scopes") or spec.get("scopeSelector")),
    )
