"""Reading Job and Pod objects (the API's JSON) into the plain values of :mod:`.values`.

Only wire format lives here; what a Job's conditions mean is :mod:`.classify`'s concern.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from altar.backends.kubernetes.classify import job_state, true_condition
from altar.backends.kubernetes.values import (
    ContainerExit,
    JobCondition,
    K8sJobInfo,
    K8sPodInfo,
)

__all__ = ["job_info_from_object", "pod_info_from_object"]

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
    )


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
    )


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
    if status.get("reason") == "Evicted" or target is not None:
        reason = status.get("reason") or (target or {}).get("reason") or "DisruptionTarget"
        message = status.get("message") or (target or {}).get("message") or ""
        return f"{reason}: {message}" if message else str(reason)
    return None
