"""From what the API reports to Altar's states and failure reasons (pure functions).

Input is the plain values of :mod:`.values` (never API JSON: :mod:`.wire` reads that), so
the state mapping and failure classification are tested directly.
"""

from __future__ import annotations

from collections.abc import Sequence

from altar.backends.kubernetes.values import (
    MAIN_CONTAINER,
    VERIFY_INPUTS_CONTAINER,
    JobCondition,
    K8sJobInfo,
    K8sPodInfo,
)
from altar.execution import TaskFailure, TaskState

__all__ = [
    "classify_failure",
    "failure_without_pods",
    "job_state",
    "provider_ending_of",
    "true_condition",
]

# The DisruptionTarget condition's reasons (Kubernetes 1.26+, GA in 1.31) and who set them.
_TARGET_ENDINGS = {
    "PreemptionByScheduler": "preempted",  # the scheduler made room for a higher priority pod
    "PreemptionByKubeScheduler": "preempted",  # its name in 1.26
    "DeletionByTaintManager": "node_lost",  # a NoExecute taint: the node went unreachable
    "DeletionByPodGC": "node_lost",  # the pod's node no longer exists
    "EvictionByEvictionAPI": "evicted",  # a drain, or any client of the Eviction API
    "TerminationByKubelet": "evicted",  # node-pressure eviction (or a node shutdown, below)
}
# A pod's status.reason set by the kubelet or the node controller, without or with the
# condition: a graceful node shutdown (Terminated; Shutdown before 1.22) and the pre-1.26
# mark on pods of an unreachable node (NodeLost) mean the node went away.
_STATUS_ENDINGS = {
    "Evicted": "evicted",
    "Terminated": "node_lost",
    "Shutdown": "node_lost",
    "NodeLost": "node_lost",
}


def provider_ending_of(pod: K8sPodInfo) -> str | None:
    """The provider ending a disrupted pod stands for (``PROVIDER_ENDINGS``), else None."""
    if pod.status_reason in _STATUS_ENDINGS and pod.disruption_reason in (
        None,
        "TerminationByKubelet",
    ):
        return _STATUS_ENDINGS[pod.status_reason]
    if pod.disruption_reason is not None:
        # an unknown reason on the condition is still a disruption from outside
        return _TARGET_ENDINGS.get(pod.disruption_reason, "evicted")
    if pod.disruption is not None:  # a custom runtime that fills only the text
        return "preempted" if "preempt" in pod.disruption.lower() else "evicted"
    return None


def _disruption_words(pod: K8sPodInfo) -> str:
    """``DisruptionTarget (PreemptionByScheduler)`` or ``Evicted``: the provider's own word."""
    if pod.disruption_reason is not None:
        return f"DisruptionTarget ({pod.disruption_reason})"
    return pod.status_reason or "disrupted"


def true_condition(conditions: Sequence[JobCondition], *types: str) -> JobCondition | None:
    """The first condition of one of ``types`` whose status is ``True``, or None."""
    for condition in conditions:
        if condition.type in types and condition.status == "True":
            return condition
    return None


def job_state(conditions: Sequence[JobCondition], active: int) -> TaskState:
    if true_condition(conditions, "Complete", "SuccessCriteriaMet"):
        return TaskState.SUCCEEDED
    if true_condition(conditions, "Failed", "FailureTarget"):
        return TaskState.FAILED
    return TaskState.RUNNING if active else TaskState.PENDING


def failure_without_pods(job: K8sJobInfo) -> TaskFailure | None:
    """The failure when the Job's conditions alone explain it (a deadline), else None."""
    for condition in job.conditions:
        if (
            condition.type in ("Failed", "FailureTarget")
            and condition.status == "True"
            and condition.reason == "DeadlineExceeded"
        ):
            return classify_failure(job, [])
    return None


def _detail(message: str | None, fallback: str) -> str:
    text = (message or "").strip()
    return text[-2000:] if text else fallback


def classify_failure(job: K8sJobInfo, pods: Sequence[K8sPodInfo]) -> TaskFailure:
    """Why a failed Job failed, from its conditions and its pods' terminated containers.

    First match wins: deadline → ``timeout``; the newest pod was evicted or preempted (and
    not OOM-killed) → ``job_failed`` with a ``provider_ending`` (:func:`provider_ending_of`);
    the verifier exited non-zero → ``input_digest_mismatch``; the main container was
    OOM-killed → ``oom_killed``; it was lost with its node (``ContainerStatusUnknown``) →
    ``job_failed``, ``node_lost``; it exited non-zero → ``exit_<n>``; a ``PodFailurePolicy``
    verdict on a ``DisruptionTarget`` pod → ``job_failed``, ``evicted``; otherwise
    ``job_failed``. Pods are read newest first.
    """
    failed = true_condition(job.conditions, "Failed", "FailureTarget")
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
        # the command or its inputs, and another node may well run it. ``reason`` stays
        # ``job_failed`` (what 0.3.0 consumers saw); the ending says who ended it.
        ending = provider_ending_of(newest) or "evicted"
        return TaskFailure(
            "job_failed",
            detail=_detail(
                None,
                f"{ending}: {_disruption_words(newest)}: job {job.name}: pod {newest.name} "
                f"was stopped ({newest.disruption})",
            ),
            provider_ending=ending,
        )
    target = true_condition(job.conditions, "DisruptionTarget")
    if target is not None:
        # Not a condition Kubernetes sets on Jobs; a controller or custom runtime that does
        # says the same as on a pod.
        ending = _TARGET_ENDINGS.get(target.reason or "", "evicted")
        words = f"DisruptionTarget ({target.reason or 'no reason'})"
        return TaskFailure(
            "job_failed",
            detail=f"{ending}: {words}: job {job.name}: {target.message or 'disrupted'}",
            provider_ending=ending,
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
                lost = f"container {exit_.name} of pod {pod.name} was lost with its node"
                return TaskFailure(
                    "job_failed",
                    detail=_detail(
                        f"node_lost: ContainerStatusUnknown: {lost}: {exit_.message}"
                        if exit_.message
                        else None,
                        f"node_lost: ContainerStatusUnknown: {lost}",
                    ),
                    provider_ending="node_lost",
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
        if failed.reason == "PodFailurePolicy" and "condition DisruptionTarget" in (
            failed.message or ""
        ):
            # A podFailurePolicy rule on DisruptionTarget failed the Job; its pod may be
            # gone, but the Job's own condition still says the pod was disrupted.
            return TaskFailure(
                "job_failed",
                detail=f"evicted: PodFailurePolicy: job {job.name}: {fallback}",
                provider_ending="evicted",
            )
    return TaskFailure("job_failed", detail=f"job {job.name}: {fallback}")
