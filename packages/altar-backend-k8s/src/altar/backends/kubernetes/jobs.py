"""What the backend reads from Jobs and Pods, and how it turns that into Altar states.

The runtime reports plain values (:class:`K8sJobInfo`, :class:`K8sPodInfo`); the functions
here are pure, so the state mapping and failure classification are tested directly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from altar.backends.kubernetes.manifest import MAIN_CONTAINER, VERIFY_INPUTS_CONTAINER
from altar.execution import TaskFailure, TaskState

__all__ = [
    "ContainerExit",
    "JobCondition",
    "K8sJobInfo",
    "K8sPodInfo",
    "classify_failure",
    "job_info_from_object",
    "job_state",
    "pod_info_from_object",
]

_UID_LABELS = ("batch.kubernetes.io/controller-uid", "controller-uid")
_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")


@dataclass(frozen=True)
class JobCondition:
    type: str
    status: str
    reason: str | None = None
    message: str | None = None


@dataclass(frozen=True)
class K8sJobInfo:
    """One Job as the backend needs it.

    ``state`` follows the earliest terminal signal (``FailureTarget``/``SuccessCriteriaMet``);
    ``finished`` is True only once ``Failed``/``Complete`` say every pod has terminated, which
    is when a Job may be replaced. ``deleting`` is True while ``deletionTimestamp`` is set.
    """

    name: str
    state: TaskState
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    uid: str | None = None
    finished: bool | None = None  # None: derive from state (custom runtimes)
    deleting: bool = False
    conditions: tuple[JobCondition, ...] = ()

    @property
    def replaceable(self) -> bool:
        return self.state.is_terminal if self.finished is None else self.finished


@dataclass(frozen=True)
class ContainerExit:
    """A terminated container: ``state.terminated`` of its status."""

    name: str
    exit_code: int
    reason: str | None = None
    message: str | None = None


@dataclass(frozen=True)
class K8sPodInfo:
    """One Pod of a Job. ``disruption`` is set when the pod was stopped from outside (evicted
    by the kubelet, preempted, or a ``DisruptionTarget`` condition): its reason and message."""

    name: str
    job_uid: str | None
    job_name: str | None
    created: str = ""
    init_exits: tuple[ContainerExit, ...] = ()
    container_exits: tuple[ContainerExit, ...] = ()
    disruption: str | None = None


def _true(conditions: Sequence[JobCondition], *types: str) -> JobCondition | None:
    for condition in conditions:
        if condition.type in types and condition.status == "True":
            return condition
    return None


def job_state(conditions: Sequence[JobCondition], active: int) -> TaskState:
    if _true(conditions, "Complete", "SuccessCriteriaMet"):
        return TaskState.SUCCEEDED
    if _true(conditions, "Failed", "FailureTarget"):
        return TaskState.FAILED
    return TaskState.RUNNING if active else TaskState.PENDING


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
    finished = _true(conditions, "Complete", "Failed") is not None
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


def _detail(message: str | None, fallback: str) -> str:
    text = (message or "").strip()
    return text[-2000:] if text else fallback


def classify_failure(job: K8sJobInfo, pods: Sequence[K8sPodInfo]) -> TaskFailure:
    """Why a failed Job failed, from its conditions and its pods' terminated containers.

    First match wins: deadline → ``timeout``; the newest pod was evicted or preempted (and
    not OOM-killed) → ``job_failed``; the verifier exited non-zero →
    ``input_digest_mismatch``; the main container was OOM-killed → ``oom_killed``; it exited
    non-zero → ``exit_<n>``; otherwise ``job_failed``. Pods are read newest first.
    """
    failed = _true(job.conditions, "Failed", "FailureTarget")
    if failed is not None and failed.reason == "DeadlineExceeded":
        return TaskFailure(
            "timeout",
            detail=_detail(failed.message, f"job {job.name} exceeded its activeDeadlineSeconds"),
        )
    ordered = sorted(pods, key=lambda p: p.created, reverse=True)
    newest = ordered[0] if ordered else None
    if (
        newest is not None
        and newest.disruption is not None
        and not any(e.reason == "OOMKilled" for e in newest.container_exits)
    ):
        # Evicted or preempted: the kill code (137/143) of its containers says nothing about
        # the command or its inputs, and another node may well run it.
        return TaskFailure(
            "job_failed",
            detail=_detail(
                None, f"job {job.name}: pod {newest.name} was stopped ({newest.disruption})"
            ),
        )
    for pod in ordered:
        for exit_ in pod.init_exits:
            if exit_.name == VERIFY_INPUTS_CONTAINER and exit_.exit_code != 0:
                return TaskFailure(
                    "input_digest_mismatch",
                    detail=_detail(
                        exit_.message, "an input did not match its declared sha256 digest"
                    ),
                    deterministic=True,
                    exit_code=exit_.exit_code,
                )
    for pod in ordered:
        mains = [e for e in pod.container_exits if e.name == MAIN_CONTAINER] or list(
            pod.container_exits[:1]
        )
        for exit_ in mains:
            if exit_.reason == "OOMKilled":
                return TaskFailure(
                    "oom_killed",
                    detail=_detail(
                        exit_.message,
                        f"container {exit_.name} of pod {pod.name} was killed for exceeding "
                        "its memory limit",
                    ),
                    exit_code=exit_.exit_code,
                )
            if exit_.reason == "ContainerStatusUnknown":
                # the kubelet lost the container (its node went away): 137 is its placeholder
                return TaskFailure(
                    "job_failed",
                    detail=_detail(
                        exit_.message,
                        f"container {exit_.name} of pod {pod.name} was lost with its node",
                    ),
                )
            if exit_.exit_code != 0:
                return TaskFailure(
                    f"exit_{exit_.exit_code}",
                    detail=_detail(
                        exit_.message,
                        f"container {exit_.name} of pod {pod.name} exited with code "
                        f"{exit_.exit_code}",
                    ),
                    deterministic=True,
                    exit_code=exit_.exit_code,
                )
    fallback = "job failed without a container exit status (evicted, or its pods are gone)"
    if failed is not None:
        fallback = failed.message or failed.reason or fallback
    return TaskFailure("job_failed", detail=f"job {job.name}: {fallback}")
