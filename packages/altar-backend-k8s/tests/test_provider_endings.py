"""Provider endings and limits (issue 22) through the real client against the fake API server.

A pod stopped from outside (evicted, preempted, drained, lost with its node) is a failure
with ``provider_ending`` set, ``reason`` unchanged (``job_failed``, as 0.3.0 consumers saw)
and the condition in ``detail``. A namespace ResourceQuota that is full, or API throttling
that outlasts the client's own waits, is ProviderLimitError; a quota the task can never fit
is a ValueError.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from altar.backends.kubernetes import KubernetesExecutionBackend, parse_external_id
from altar.backends.kubernetes.sdk_runtime import ClientRuntime
from altar.backends.kubernetes.testing import FakeApiServer
from altar.execution import (
    ProviderLimitError,
    ResourceRequest,
    TaskHandle,
    TaskState,
    TaskStatus,
)

from .specs import spec

Make = Callable[..., KubernetesExecutionBackend]
pytestmark = pytest.mark.asyncio


def name_of(handle: TaskHandle) -> str:
    return parse_external_id(handle.external_id)[0]


async def ended(backend: KubernetesExecutionBackend, handle: TaskHandle) -> TaskStatus:
    [status] = await backend.poll([handle])
    assert status.state is TaskState.FAILED
    assert status.failure is not None
    return status


@pytest.mark.parametrize(
    ("drive", "ending", "words"),
    [
        (lambda f, n: f.evict(n), "evicted", "DisruptionTarget (TerminationByKubelet)"),
        (
            lambda f, n: f.evict(n, init_running=True),
            "evicted",
            "The node was low on resource: memory",
        ),
        (lambda f, n: f.preempt(n), "preempted", "DisruptionTarget (PreemptionByScheduler)"),
        (
            lambda f, n: f.preempt(n, pod_removed=False),
            "preempted",
            "preempting to accommodate a higher priority pod",
        ),
        (lambda f, n: f.drain(n), "evicted", "DisruptionTarget (EvictionByEvictionAPI)"),
        (lambda f, n: f.lose_node(n), "node_lost", "DisruptionTarget (DeletionByTaintManager)"),
        (
            lambda f, n: f.lose_node(n, node_gone=True),
            "node_lost",
            "DisruptionTarget (DeletionByPodGC)",
        ),
        (
            lambda f, n: f.shut_down_node(n),
            "node_lost",
            "imminent node shutdown",
        ),
        (
            # a cluster before 1.26: no condition, only the kubelet's status.reason
            lambda f, n: f.disrupt(
                n,
                "TerminationByKubelet",
                "low on memory",
                status_reason="Evicted",
                with_condition=False,
            ),
            "evicted",
            "Evicted",
        ),
        (
            # the kubelet came back and could not find the container: its 137 is a placeholder
            lambda f, n: f.finish_job(
                n,
                exit_code=137,
                reason="ContainerStatusUnknown",
                message="The container could not be located when the pod was terminated",
            ),
            "node_lost",
            "ContainerStatusUnknown",
        ),
    ],
    ids=[
        "kubelet-eviction",
        "kubelet-eviction-during-verify",
        "preemption",
        "preemption-message",
        "drain",
        "taint-manager",
        "pod-gc",
        "node-shutdown",
        "eviction-before-1.26",
        "container-status-unknown",
    ],
)
async def test_a_pod_stopped_from_outside_is_a_provider_ending(
    backend: KubernetesExecutionBackend,
    fake_apiserver: FakeApiServer,
    drive: Callable[[FakeApiServer, str], None],
    ending: str,
    words: str,
) -> None:
    handle = await backend.submit(spec())
    fake_apiserver.start_job(name_of(handle))
    drive(fake_apiserver, name_of(handle))
    failure = (await ended(backend, handle)).failure
    assert failure is not None
    assert failure.reason == "job_failed"  # what 0.3.0 consumers saw
    assert failure.provider_ending == ending
    assert failure.deterministic is False
    assert failure.exit_code is None  # the kill code is the provider's, not the task's
    assert failure.detail is not None
    assert failure.detail.startswith(f"{ending}: ")
    assert words in failure.detail


async def test_end_by_provider_causes_each_ending_it_names(
    backend: KubernetesExecutionBackend, fake_apiserver: FakeApiServer
) -> None:
    for index, ending in enumerate(("evicted", "preempted", "node_lost")):
        handle = await backend.submit(spec(labels={"job_id": "J", "fold": str(index)}))
        fake_apiserver.end_by_provider(name_of(handle), ending)
        failure = (await ended(backend, handle)).failure
        assert failure is not None
        assert failure.provider_ending == ending
    with pytest.raises(ValueError, match="cannot cause 'engine_lost'"):
        fake_apiserver.end_by_provider(name_of(handle), "engine_lost")
    # and what the task did itself stays the task's
    exited = await backend.submit(spec(labels={"job_id": "J", "fold": "5"}))
    oom = await backend.submit(spec(labels={"job_id": "J", "fold": "6"}))
    gone = await backend.submit(spec(labels={"job_id": "J", "fold": "7"}))
    fake_apiserver.finish_job(name_of(exited), exit_code=137)  # the task's own SIGKILL
    fake_apiserver.oom_kill(name_of(oom))
    fake_apiserver.fail_without_pods(name_of(gone))  # no evidence of who ended it
    statuses = await backend.poll([exited, oom, gone])
    assert [(s.failure.reason, s.failure.provider_ending) for s in statuses if s.failure] == [
        ("exit_137", None),
        ("oom_killed", None),
        ("job_failed", None),
    ]


class DisruptionPolicyBackend(KubernetesExecutionBackend):
    """A subclass that adds a podFailurePolicy rule on DisruptionTarget (``action``)."""

    action = "FailJob"

    def build_manifest(self, spec: Any) -> dict[str, Any]:
        manifest = super().build_manifest(spec)
        manifest["spec"]["podFailurePolicy"] = {
            "rules": [
                {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}},
                {"action": self.action, "onPodConditions": [{"type": "DisruptionTarget"}]},
            ]
        }
        return manifest


async def test_a_pod_failure_policy_verdict_names_the_disruption_after_the_pod_is_gone(
    make_backend: Make, fake_apiserver: FakeApiServer
) -> None:
    backend = make_backend(DisruptionPolicyBackend)
    handle = await backend.submit(spec())
    fake_apiserver.preempt(name_of(handle), pod_removed=True)
    job = fake_apiserver.job(name_of(handle))
    assert job is not None
    assert job["status"]["conditions"][-1]["reason"] == "PodFailurePolicy"
    failure = (await ended(backend, handle)).failure
    assert failure is not None
    assert (failure.reason, failure.provider_ending) == ("job_failed", "evicted")
    assert failure.detail is not None
    assert "has condition DisruptionTarget matching FailJob rule at index 1" in failure.detail
    # with an Ignore rule the Job controller replaces the pod instead and the task runs on
    ignoring = make_backend(type("Ignoring", (DisruptionPolicyBackend,), {"action": "Ignore"}))
    handle = await ignoring.submit(spec(labels={"job_id": "J", "fold": "1"}))
    job = fake_apiserver.job(name_of(handle))
    assert job is not None
    [first] = fake_apiserver.pods_of(job["metadata"]["uid"])
    fake_apiserver.preempt(name_of(handle))
    [second] = fake_apiserver.pods_of(job["metadata"]["uid"])
    assert second["metadata"]["name"] != first["metadata"]["name"]
    [status] = await ignoring.poll([handle])
    assert status.state is TaskState.RUNNING


# -- limits --------------------------------------------------------------------------------


def cpu_spec(cpu: float, fold: str = "0") -> Any:
    return spec(resources=ResourceRequest(cpu=cpu), labels={"job_id": "J", "fold": fold})


async def test_a_full_compute_quota_holds_the_submit_and_creates_no_job(
    backend: KubernetesExecutionBackend, fake_apiserver: FakeApiServer
) -> None:
    fake_apiserver.set_quota(
        "compute-quota", {"requests.cpu": "8"}, used_elsewhere={"requests.cpu": "7"}
    )
    with pytest.raises(ProviderLimitError, match="ResourceQuota compute-quota") as raised:
        await backend.submit(cpu_spec(2))
    assert raised.value.limit == "ResourceQuota compute-quota"
    assert fake_apiserver.jobs() == []
    fake_apiserver.set_quota("compute-quota", {"requests.cpu": "8"})  # the others finished
    backend._quota_gate._read = None  # what cache_s seconds later would see
    handle = await backend.submit(cpu_spec(2))
    [status] = await backend.poll([handle])
    assert status.state is TaskState.RUNNING


async def test_submits_in_one_quota_reading_count_the_jobs_created_since(
    backend: KubernetesExecutionBackend, fake_apiserver: FakeApiServer
) -> None:
    fake_apiserver.set_quota("compute-quota", {"requests.cpu": "4"})
    await backend.submit(cpu_spec(2, "0"))
    await backend.submit(cpu_spec(2, "1"))
    fake_apiserver.reset_requests()
    with pytest.raises(ProviderLimitError):
        await backend.submit(cpu_spec(2, "2"))
    # the reading was reused; only the look for a Job to adopt went out, no create
    assert [r.method for r in fake_apiserver.requests] == ["GET"]
    assert len(fake_apiserver.jobs()) == 2


async def test_a_task_larger_than_the_quota_is_refused_as_never_passing(
    backend: KubernetesExecutionBackend, fake_apiserver: FakeApiServer
) -> None:
    fake_apiserver.set_quota("compute-quota", {"requests.cpu": "8", "pods": "10"})
    with pytest.raises(ValueError, match="can never run there") as raised:
        await backend.submit(cpu_spec(16))
    assert not isinstance(raised.value, ProviderLimitError)
    assert "requests.cpu=16" in str(raised.value)
    assert "requests.cpu=8" in str(raised.value)
    assert fake_apiserver.jobs() == []


async def test_without_the_check_the_job_waits_without_pods_as_kubernetes_makes_it_wait(
    make_backend: Make, fake_apiserver: FakeApiServer
) -> None:
    backend = make_backend(check_quotas=False)
    fake_apiserver.set_quota(
        "compute-quota", {"requests.cpu": "8"}, used_elsewhere={"requests.cpu": "8"}
    )
    handle = await backend.submit(cpu_spec(2))
    job = fake_apiserver.job(name_of(handle))
    assert job is not None
    assert fake_apiserver.pods_of(job["metadata"]["uid"]) == []
    [event] = [e for e in fake_apiserver.events() if e["reason"] == "FailedCreate"]
    assert (
        "is forbidden: exceeded quota: compute-quota, requested: requests.cpu=2, "
        in (event["message"])
    )
    [status] = await backend.poll([handle])
    assert status.state is TaskState.PENDING  # held, not failed: no retry is used
    fake_apiserver.set_quota("compute-quota", {"requests.cpu": "8"})  # the quota frees
    assert len(fake_apiserver.pods_of(job["metadata"]["uid"])) == 1
    fake_apiserver.finish_job(name_of(handle))
    [status] = await backend.poll([handle])
    assert status.state is TaskState.SUCCEEDED


@pytest.mark.parametrize("check_quotas", [True, False], ids=["checked", "api-server-refuses"])
async def test_a_full_job_count_quota_is_a_limit_and_a_resubmit_still_adopts(
    make_backend: Make, fake_apiserver: FakeApiServer, check_quotas: bool
) -> None:
    backend = make_backend(check_quotas=check_quotas)
    first = await backend.submit(cpu_spec(1, "0"))
    fake_apiserver.set_quota("object-counts", {"count/jobs.batch": "1"})
    backend._quota_gate._read = None
    with pytest.raises(ProviderLimitError) as raised:
        await backend.submit(cpu_spec(1, "1"))
    assert raised.value.limit == "ResourceQuota object-counts"
    again = await backend.submit(cpu_spec(1, "0"))  # the Job it holds is adopted
    assert again.external_id == first.external_id


async def test_the_api_servers_quota_refusal_that_never_passes_is_a_value_error(
    make_backend: Make, fake_apiserver: FakeApiServer
) -> None:
    backend = make_backend(check_quotas=False)
    fake_apiserver.set_quota("no-jobs", {"count/jobs.batch": "0"})
    with pytest.raises(ValueError, match=r"count/jobs\.batch=0") as raised:
        await backend.submit(spec())
    assert not isinstance(raised.value, ProviderLimitError)


async def test_quotas_it_may_not_read_are_left_to_the_api_server(
    make_backend: Make, fake_apiserver: FakeApiServer
) -> None:
    backend = make_backend()
    fake_apiserver.inject_error(403, times=1, methods={"GET"})
    await backend.submit(spec())  # the list was forbidden: checked no more
    fake_apiserver.set_quota("object-counts", {"count/jobs.batch": "1"})
    fake_apiserver.reset_requests()
    with pytest.raises(ProviderLimitError, match="object-counts"):
        await backend.submit(spec(labels={"job_id": "J", "fold": "9"}))
    # the API server refused the create; the backend looked for a Job to adopt, found none
    assert [r.method for r in fake_apiserver.requests] == ["POST", "GET"]


async def test_throttling_past_the_clients_own_retries_is_a_limit_with_retry_after(
    make_backend: Make, fake_apiserver: FakeApiServer, kubeconfig: Path
) -> None:
    waits: list[float] = []
    runtime = ClientRuntime(kubeconfig=str(kubeconfig), sleep=waits.append)
    backend = make_backend(runtime=runtime, check_quotas=False)
    fake_apiserver.inject_error(429, times=100, retry_after=7)
    with pytest.raises(ProviderLimitError, match="HTTP 429") as raised:
        await backend.submit(spec())
    assert raised.value.retry_after_s == 7.0
    assert raised.value.limit is not None
    assert "429" in raised.value.limit
    assert len(waits) == 5  # the client's own retries came first


async def test_a_finished_job_holding_the_name_does_not_let_a_full_quota_through(
    backend: KubernetesExecutionBackend, fake_apiserver: FakeApiServer
) -> None:
    first = await backend.submit(cpu_spec(2))
    fake_apiserver.finish_job(name_of(first), exit_code=3)  # finished: a resubmit replaces it
    fake_apiserver.set_quota(
        "compute-quota", {"requests.cpu": "4"}, used_elsewhere={"requests.cpu": "4"}
    )
    backend._quota_gate._read = None
    with pytest.raises(ProviderLimitError):
        await backend.submit(cpu_spec(2))
    job = fake_apiserver.job(name_of(first))
    assert job is not None
    assert job["metadata"]["uid"] == parse_external_id(first.external_id)[1]  # not replaced
