"""The controllers that stop pods from outside: the kubelet, the scheduler, the taint manager.

Each scripting method stops a Job's pod with the status a real cluster (1.26+, where pod
disruption conditions are on by default) leaves behind, then lets the Job controller act.
:meth:`Disruptions.end_by_provider` is the one call a conformance hook needs.
"""

from __future__ import annotations

from altar.backends.kubernetes.testing.apiserver.controller import JobController
from altar.backends.kubernetes.testing.apiserver.objects import (
    JsonDict,
    condition,
    now,
    terminated,
)

__all__ = ["Disruptions"]


class Disruptions(JobController):
    """Pods evicted, preempted, drained or lost with their node, driven by tests."""

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
        message = "The node was low on resource: memory. Threshold quantity: 100Mi."
        self.disrupt(
            name,
            "TerminationByKubelet",
            message,
            namespace=namespace,
            uid=uid,
            status_reason="Evicted",
            init_running=init_running,
        )

    def preempt(
        self,
        name: str,
        *,
        namespace: str = "default",
        uid: str | None = None,
        pod_removed: bool = False,
    ) -> None:
        """The scheduler preempts the Job's pod for a higher priority pod (then deletes it)."""
        message = "default-scheduler: preempting to accommodate a higher priority pod"
        self.disrupt(
            name,
            "PreemptionByScheduler",
            message,
            namespace=namespace,
            uid=uid,
            pod_removed=pod_removed,
        )

    def drain(
        self,
        name: str,
        *,
        namespace: str = "default",
        uid: str | None = None,
        pod_removed: bool = False,
    ) -> None:
        """``kubectl drain`` evicts the Job's pod through the Eviction API."""
        message = "Eviction API: evicting"
        self.disrupt(
            name,
            "EvictionByEvictionAPI",
            message,
            namespace=namespace,
            uid=uid,
            pod_removed=pod_removed,
        )

    def lose_node(
        self,
        name: str,
        *,
        namespace: str = "default",
        uid: str | None = None,
        node_gone: bool = False,
        pod_removed: bool = False,
    ) -> None:
        """The pod's node goes unreachable: the taint manager deletes the pod (the node's
        ``NoExecute`` taint); with ``node_gone`` the node object is deleted and the pod
        garbage collector does it. Nobody reports the containers' end, so their last known
        state stays ``running``; the pod is marked ``Failed``."""
        if node_gone:
            reason, message = "DeletionByPodGC", "PodGC: node no longer exists"
        else:
            reason, message = (
                "DeletionByTaintManager",
                "Taint manager: deleting due to NoExecute taint",
            )
        self.disrupt(
            name,
            reason,
            message,
            namespace=namespace,
            uid=uid,
            containers_reported=False,
            pod_removed=pod_removed,
        )

    def shut_down_node(
        self,
        name: str,
        *,
        namespace: str = "default",
        uid: str | None = None,
        pod_removed: bool = False,
    ) -> None:
        """The kubelet's graceful node shutdown terminates the Job's pod."""
        message = "Pod was terminated in response to imminent node shutdown."
        self.disrupt(
            name,
            "TerminationByKubelet",
            message,
            namespace=namespace,
            uid=uid,
            status_reason="Terminated",
            pod_removed=pod_removed,
        )

    def end_by_provider(
        self, name: str, ending: str, *, namespace: str = "default", uid: str | None = None
    ) -> None:
        """Cause provider ending ``ending`` (``evicted``, ``preempted``, ``node_lost``) for the
        Job: the one scripting call a conformance hook needs."""
        if ending == "evicted":
            self.evict(name, namespace=namespace, uid=uid)
        elif ending == "preempted":
            self.preempt(name, namespace=namespace, uid=uid)
        elif ending == "node_lost":
            self.lose_node(name, namespace=namespace, uid=uid)
        else:
            raise ValueError(
                f"the fake cannot cause {ending!r}; it causes evicted, preempted, node_lost"
            )

    def disrupt(
        self,
        name: str,
        reason: str,
        message: str,
        *,
        namespace: str = "default",
        uid: str | None = None,
        status_reason: str | None = None,
        init_running: bool = False,
        containers_reported: bool = True,
        pod_removed: bool = False,
        with_condition: bool = True,
    ) -> None:
        """Stop the Job's pod from outside as the control plane does since Kubernetes 1.26.

        The ``DisruptionTarget`` condition (``reason``, ``message``) goes on the pod first,
        then the pod is killed (containers exit 137, ``Error``; with ``containers_reported``
        False their last state stays ``running``) and marked ``Failed`` (with
        ``status_reason`` as ``status.reason``, e.g. ``Evicted``). The Job controller then
        acts on its ``podFailurePolicy`` (a ``DisruptionTarget`` rule: ``FailJob`` fails the
        Job with reason ``PodFailurePolicy``, ``Ignore`` creates a new pod) or, without one,
        fails it past ``backoffLimit``. ``pod_removed`` deletes the pod afterwards (its
        deletion finished); ``with_condition`` False leaves the condition out (clusters
        before 1.26).
        """
        with self._lock:
            job = self._find_job(namespace, name, uid)
            killed = terminated(137, "Error")
            main = killed if containers_reported else {"running": {"startedAt": now()}}
            if init_running:
                self._terminate_pod(job, init=killed, main=None, phase="Failed")
            else:
                self._terminate_pod(job, init=None, main=main, phase="Failed")
            pod = self._pod_for(job)
            if status_reason is not None:
                pod["status"].update(reason=status_reason, message=message)
            if with_condition:
                target = condition("DisruptionTarget", reason, message)
                del target["lastProbeTime"]
                pod["status"]["conditions"] = [target]
            if status_reason != "Evicted":
                pod["metadata"]["deletionTimestamp"] = now()  # deleted by who disrupted it
            pod_name = pod["metadata"]["name"]
            action, index = self._disruption_rule(job) if with_condition else (None, 0)
            if action == "Ignore":
                # not counted against backoffLimit: the Job controller replaces the pod
                del self._store.pods[(namespace, pod_name)]
                self._create_pod(job)
                job["metadata"]["resourceVersion"] = self._next_version()
                return
            if action == "FailJob":
                self._set_terminal(
                    job,
                    succeeded=False,
                    reason="PodFailurePolicy",
                    message=f"Pod {namespace}/{pod_name} has condition DisruptionTarget "
                    f"matching FailJob rule at index {index}",
                    settled=True,
                )
            else:
                self._fail_backoff(job, settled=True)
            if pod_removed:
                del self._store.pods[(namespace, pod_name)]

    @staticmethod
    def _disruption_rule(job: JsonDict) -> tuple[str | None, int]:
        """The action and index of the Job's first podFailurePolicy rule on
        ``DisruptionTarget``, or (None, 0)."""
        policy = job["spec"].get("podFailurePolicy") or {}
        for index, rule in enumerate(policy.get("rules") or []):
            for pattern in rule.get("onPodConditions") or []:
                if pattern.get("type") == "DisruptionTarget":
                    return str(rule.get("action")), index
        return None, 0
