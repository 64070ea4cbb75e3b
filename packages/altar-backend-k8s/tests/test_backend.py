"""KubernetesExecutionBackend through the real client against the fake API server."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from altar.backends.kubernetes import (
    MANIFEST_DIGEST_ANNOTATION,
    K8sJobExistsError,
    KubernetesExecutionBackend,
    job_name,
    parse_external_id,
)
from altar.backends.kubernetes.testing import FakeApiServer
from altar.execution import (
    BackendUnavailableError,
    ContainerTaskSpec,
    ResourceRequest,
    TaskHandle,
    TaskState,
    Transfer,
    UnsupportedCapabilityError,
)

Make = Callable[..., KubernetesExecutionBackend]
pytestmark = pytest.mark.asyncio


def spec(**overrides: Any) -> ContainerTaskSpec:
    values: dict[str, Any] = {
        "kind": "score",
        "image": "busybox:local",
        "command": ["sh", "-c", "echo hi"],
        "labels": {"job_id": "J", "fold": "0"},
        "timeout_s": 600,
    }
    values.update(overrides)
    return ContainerTaskSpec(**values)


WEIGHTS = Transfer("gs://b/w.bin", "models/w.bin", digest="sha256:" + "0" * 64)


def split(handle: TaskHandle) -> tuple[str, str]:
    name, uid = parse_external_id(handle.external_id)
    assert uid is not None
    return name, uid


async def test_submit_creates_one_job_with_handle_naming_the_attempt(
    backend: KubernetesExecutionBackend, fake_apiserver: FakeApiServer
) -> None:
    s = spec()
    handle = await backend.submit(s)
    name, uid = split(handle)
    assert name == job_name(s)
    job = fake_apiserver.job(name)
    assert job is not None
    assert job["metadata"]["uid"] == uid
    assert job["metadata"]["annotations"][MANIFEST_DIGEST_ANNOTATION].startswith("sha256:")
    assert handle.labels == s.labels
    assert handle.backend == "kubernetes"
    [status] = await backend.poll([handle])
    assert status.state is TaskState.RUNNING


async def test_resubmitting_an_active_spec_adopts_it_in_two_requests(
    backend: KubernetesExecutionBackend, fake_apiserver: FakeApiServer
) -> None:
    first = await backend.submit(spec())
    fake_apiserver.reset_requests()
    second = await backend.submit(spec())
    assert second.external_id == first.external_id
    assert [(r.method, r.path.rsplit("/", 1)[-1]) for r in fake_apiserver.requests] == [
        ("POST", "jobs"),
        ("GET", job_name(spec())),
    ]
    assert len(fake_apiserver.jobs()) == 1


async def test_active_job_from_a_different_manifest_is_refused(
    make_backend: Make, fake_apiserver: FakeApiServer
) -> None:
    await make_backend(pvc_name="one").submit(spec())
    with pytest.raises(K8sJobExistsError) as refused:
        await make_backend(pvc_name="two").submit(spec())
    message = str(refused.value)
    assert "different manifest" in message
    assert "let it finish or delete it" in message
    assert len(fake_apiserver.jobs()) == 1


async def test_active_job_without_annotation_is_refused(
    backend: KubernetesExecutionBackend, fake_apiserver: FakeApiServer
) -> None:
    manifest, _ = backend.render(spec())
    del manifest["metadata"]["annotations"][MANIFEST_DIGEST_ANNOTATION]
    backend._runtime.create_job(manifest, namespace="default")
    with pytest.raises(K8sJobExistsError, match="manifest-sha256 missing"):
        await backend.submit(spec())


@pytest.mark.parametrize("exit_code", [0, 3])
async def test_finished_job_is_replaced_under_a_new_attempt(
    backend: KubernetesExecutionBackend, fake_apiserver: FakeApiServer, exit_code: int
) -> None:
    old = await backend.submit(spec())
    name, old_uid = split(old)
    fake_apiserver.finish_job(name, exit_code=exit_code)
    [before] = await backend.poll([old])
    new = await backend.submit(spec())
    _, new_uid = split(new)
    assert new_uid != old_uid
    deletes = [r for r in fake_apiserver.requests if r.method == "DELETE"]
    assert len(deletes) == 1
    old_status, new_status = await backend.poll([old, new])
    assert new_status.state is TaskState.RUNNING
    # the old attempt keeps reporting its own outcome, never the new attempt's
    assert old_status.state is before.state
    assert old_status.failure == before.failure
    # a fresh process knows nothing of the old attempt: it reads as missing, not running
    fresh = KubernetesExecutionBackend(runtime=backend._runtime, pvc_name="altar-data")
    [old_elsewhere] = await fresh.poll([old])
    assert old_elsewhere.state is TaskState.FAILED
    assert old_elsewhere.failure is not None
    assert old_elsewhere.failure.reason == "container_missing"
    assert "newer attempt" in (old_elsewhere.failure.detail or "")


async def test_cancelling_an_old_handle_never_deletes_the_new_attempt(
    backend: KubernetesExecutionBackend, fake_apiserver: FakeApiServer
) -> None:
    old = await backend.submit(spec())
    name, _ = split(old)
    fake_apiserver.finish_job(name, exit_code=1)
    new = await backend.submit(spec())
    await backend.cancel(old)
    job = fake_apiserver.job(name)
    assert job is not None
    assert job["metadata"]["uid"] == split(new)[1]
    await backend.cancel(new)
    assert fake_apiserver.job(name) is None
    await backend.cancel(new)  # idempotent


async def test_two_drivers_resubmitting_at_once_end_with_one_job(
    make_backend: Make, fake_apiserver: FakeApiServer
) -> None:
    a, b = make_backend(), make_backend()
    first = await a.submit(spec())
    name, first_uid = split(first)
    fake_apiserver.finish_job(name, exit_code=0)
    for _ in range(5):
        ha, hb = await asyncio.gather(a.submit(spec()), b.submit(spec()))
        assert ha.external_id == hb.external_id
        job = fake_apiserver.job(name)
        assert job is not None
        assert not job["metadata"].get("deletionTimestamp")
        assert job["metadata"]["uid"] == split(ha)[1] != first_uid
        assert len(fake_apiserver.jobs()) == 1
        fake_apiserver.finish_job(name, exit_code=0)


async def test_being_deleted_job_is_retried_until_its_name_is_free(
    make_backend: Make, fake_apiserver: FakeApiServer
) -> None:
    fake_apiserver.deletion_delay_s = 0.3
    backend = make_backend(delete_propagation="Foreground")
    old = await backend.submit(spec())
    name, old_uid = split(old)
    fake_apiserver.finish_job(name, exit_code=0)
    new = await backend.submit(spec())
    assert split(new)[1] != old_uid
    assert fake_apiserver.pods_of(old_uid) == []  # foreground: pods went first
    creates = fake_apiserver.count_requests("POST")
    assert creates >= 3  # first, the refused one(s) while deleting, the successful one


async def test_a_job_that_is_never_deleted_gives_up_after_the_waits(
    make_backend: Make, fake_apiserver: FakeApiServer
) -> None:
    fake_apiserver.deletion_delay_s = None  # finalizer never cleared
    backend = make_backend(delete_propagation="Foreground", recreate_waits_s=(0.0, 0.01, 0.01))
    old = await backend.submit(spec())
    fake_apiserver.finish_job(split(old)[0])
    fake_apiserver.reset_requests()
    with pytest.raises(K8sJobExistsError, match=r"not replaced within 0\.02 s"):
        await backend.submit(spec())
    assert fake_apiserver.count_requests("POST") == 4


async def test_job_still_terminating_pods_is_not_replaced_yet(
    backend: KubernetesExecutionBackend, fake_apiserver: FakeApiServer
) -> None:
    old = await backend.submit(spec())
    name, _ = split(old)
    fake_apiserver.finish_job(name, exit_code=2, settled=False)  # FailureTarget only
    [status] = await backend.poll([old])
    assert status.state is TaskState.FAILED
    with pytest.raises(K8sJobExistsError, match="not replaced within"):
        await backend.submit(spec())
    assert fake_apiserver.count_requests("DELETE") == 0


async def test_unsupported_specs_make_no_request(
    make_backend: Make, fake_apiserver: FakeApiServer
) -> None:
    backend = make_backend(pvc_name=None, pools={"a100": {"node_selector": {"gpu": "a100"}}})
    bad = [
        spec(labels={"fold": "not valid!"}),
        # the Job controller owns these pod labels; the API server refuses any other value
        spec(labels={"job-name": "mine"}),
        spec(labels={"batch.kubernetes.io/job-name": "mine"}),
        spec(labels={"controller-uid": "1234"}),
        spec(labels={"batch.kubernetes.io/controller-uid": "1234"}),
        spec(resources=ResourceRequest(gpu="h100")),
        spec(inputs=[Transfer("w", "models/w.bin", digest="sha256:" + "0" * 64)]),
    ]
    fake_apiserver.reset_requests()
    for one in bad:
        with pytest.raises(UnsupportedCapabilityError):
            await backend.submit(one)
    assert fake_apiserver.requests == []


async def test_poll_uses_at_most_two_requests_whatever_the_number_of_handles(
    backend: KubernetesExecutionBackend, fake_apiserver: FakeApiServer
) -> None:
    handles = [await backend.submit(spec(labels={"job_id": "J", "i": str(i)})) for i in range(30)]
    fake_apiserver.reset_requests()
    statuses = await backend.poll(handles)
    assert [s.handle for s in statuses] == handles
    assert len(fake_apiserver.requests) == 1
    query = fake_apiserver.requests[0].query["labelSelector"][0]
    assert query == "altar.kundajelab.org/managed-by=altar,job_id=J"
    for h in handles[:10]:
        fake_apiserver.finish_job(split(h)[0], exit_code=5)
    for h in handles[10:12]:
        fake_apiserver.expire_job(split(h)[0])
    fake_apiserver.reset_requests()
    statuses = await backend.poll(handles)
    assert len(fake_apiserver.requests) == 2
    assert [s.failure.reason for s in statuses[:12] if s.failure] == ["exit_5"] * 10 + [
        "timeout"
    ] * 2
    fake_apiserver.reset_requests()
    await backend.poll(handles)  # failures already classified: no pod list again
    assert len(fake_apiserver.requests) == 1


@pytest.mark.parametrize(
    ("drive", "reason", "deterministic", "exit_code"),
    [
        (lambda f, n: f.finish_job(n, exit_code=0), None, None, None),
        (lambda f, n: f.finish_job(n, exit_code=7), "exit_7", True, 7),
        (lambda f, n: f.oom_kill(n), "oom_killed", False, 137),
        (lambda f, n: f.expire_job(n), "timeout", False, None),
        (
            lambda f, n: f.fail_verification(n, message="/mnt/volume/w: FAILED"),
            "input_digest_mismatch",
            True,
            1,
        ),
        (lambda f, n: f.fail_without_pods(n), "job_failed", False, None),
        (lambda f, n: f.evict(n), "job_failed", False, None),
        (lambda f, n: f.evict(n, init_running=True), "job_failed", False, None),
    ],
)
async def test_failure_classification(
    backend: KubernetesExecutionBackend,
    fake_apiserver: FakeApiServer,
    drive: Callable[[FakeApiServer, str], None],
    reason: str | None,
    deterministic: bool | None,
    exit_code: int | None,
) -> None:
    handle = await backend.submit(spec(inputs=[WEIGHTS]))
    drive(fake_apiserver, split(handle)[0])
    [status] = await backend.poll([handle])
    if reason is None:
        assert status.state is TaskState.SUCCEEDED
        assert status.failure is None
        return
    assert status.state is TaskState.FAILED
    assert status.failure is not None
    assert status.failure.reason == reason
    assert status.failure.deterministic is deterministic
    assert status.failure.exit_code == exit_code
    assert status.failure.detail


async def test_verifier_message_is_the_detail(
    backend: KubernetesExecutionBackend, fake_apiserver: FakeApiServer
) -> None:
    handle = await backend.submit(spec(inputs=[WEIGHTS]))
    fake_apiserver.fail_verification(split(handle)[0], message="/mnt/volume/w.bin: FAILED")
    [status] = await backend.poll([handle])
    assert status.failure is not None
    assert status.failure.detail == "/mnt/volume/w.bin: FAILED"


async def test_missing_job_is_container_missing_and_unreachable_api_is_not(
    backend: KubernetesExecutionBackend, fake_apiserver: FakeApiServer
) -> None:
    handle = await backend.submit(spec())
    fake_apiserver.remove_job(split(handle)[0])
    bogus = TaskHandle("kubernetes", "altar-conformance-missing", {"job_id": "J"})
    statuses = await backend.poll([handle, bogus])
    assert [s.failure.reason for s in statuses if s.failure] == ["container_missing"] * 2
    assert all(s.failure and not s.failure.deterministic for s in statuses)
    fake_apiserver.inject_error(503)
    with pytest.raises(BackendUnavailableError):
        await backend.poll([handle])


async def test_outputs_on_the_volume_prove_a_deleted_job_succeeded(
    make_backend: Make, fake_apiserver: FakeApiServer, tmp_path: Path
) -> None:
    backend = make_backend(volume_host_path=str(tmp_path))
    out = Transfer("jobs/J/out.tsv", "jobs/J/out.tsv")
    handle = await backend.submit(spec(outputs=[out]))
    fake_apiserver.remove_job(split(handle)[0])
    [missing] = await backend.poll([handle])
    assert missing.failure is not None
    assert missing.failure.reason == "container_missing"
    (tmp_path / "jobs/J").mkdir(parents=True)
    (tmp_path / "jobs/J/out.tsv").write_text("x")
    [done] = await backend.poll([handle])
    assert done.state is TaskState.SUCCEEDED
    old = time.time() - 3600
    os.utime(tmp_path / "jobs/J/out.tsv", (old, old))  # a stale file proves nothing
    [stale] = await backend.poll([handle])
    assert stale.state is TaskState.FAILED


async def test_legacy_bare_name_handles_are_polled_and_cancelled_by_name(
    backend: KubernetesExecutionBackend, fake_apiserver: FakeApiServer
) -> None:
    handle = await backend.submit(spec())
    name, _ = split(handle)
    legacy = TaskHandle("kubernetes", name, dict(handle.labels))
    fake_apiserver.reset_requests()
    [status] = await backend.poll([legacy])
    assert status.state is TaskState.RUNNING
    assert fake_apiserver.requests[0].query["labelSelector"] == ["fold=0,job_id=J"]
    await backend.cancel(legacy)
    assert fake_apiserver.job(name) is None


async def test_failure_detail_reads_the_tail_of_the_failed_container(
    backend: KubernetesExecutionBackend, fake_apiserver: FakeApiServer
) -> None:
    handle = await backend.submit(spec())
    name, _ = split(handle)
    fake_apiserver.finish_job(name, exit_code=3)
    fake_apiserver.write_log(name, "".join(f"log line {i}\n" for i in range(100)))
    detail = await backend.failure_detail(handle)
    assert detail is not None
    lines = detail.splitlines()
    assert lines[-1] == "log line 99"
    assert len(lines) == 20
    other = await backend.submit(spec(labels={"job_id": "J", "fold": "1"}, inputs=[WEIGHTS]))
    other_name, _ = split(other)
    fake_apiserver.fail_verification(other_name)
    fake_apiserver.write_log(other_name, "/mnt/volume/w: FAILED\n", container="verify-inputs")
    assert await backend.failure_detail(other) == "/mnt/volume/w: FAILED"
    gone = TaskHandle("kubernetes", "missing-job", {})
    assert await backend.failure_detail(gone) is None


async def test_capacity_counts_only_this_backends_active_jobs_per_pool(
    make_backend: Make, fake_apiserver: FakeApiServer
) -> None:
    backend = make_backend(max_slots={"cpu": 4, "gpu": 2})
    await backend.submit(spec(labels={"i": "1"}))
    done = await backend.submit(spec(labels={"i": "2"}))
    await backend.submit(spec(labels={"i": "3"}, resources=ResourceRequest(gpu="gpu")))
    fake_apiserver.finish_job(split(done)[0])
    foreign = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "someone-else"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}},
    }
    backend._runtime.create_job(foreign, namespace="default")
    capacity = await backend.capacity()
    assert capacity.pools == {"cpu": 3, "gpu": 1}
    assert (await make_backend().capacity()).pools == {}


async def test_cleanup_deletes_finished_attempts_only(
    backend: KubernetesExecutionBackend, fake_apiserver: FakeApiServer
) -> None:
    running = await backend.submit(spec(labels={"i": "1"}))
    finished = await backend.submit(spec(labels={"i": "2"}))
    fake_apiserver.finish_job(split(finished)[0])
    await backend.cleanup([running, finished])
    assert fake_apiserver.job(split(running)[0]) is not None
    assert fake_apiserver.job(split(finished)[0]) is None
    await backend.cleanup([running, finished])  # idempotent


async def test_blocking_client_calls_leave_the_event_loop_free(
    backend: KubernetesExecutionBackend, fake_apiserver: FakeApiServer
) -> None:
    runtime = backend._runtime
    real_create = runtime.create_job

    def slow_create(manifest: dict[str, Any], *, namespace: str) -> Any:
        time.sleep(0.5)  # a slow API server
        return real_create(manifest, namespace=namespace)

    runtime.create_job = slow_create  # type: ignore[method-assign]
    submitting = asyncio.create_task(backend.submit(spec()))
    ticks = 0
    while not submitting.done():
        ticks += 1
        await asyncio.sleep(0.01)
    await submitting
    assert ticks >= 10, "the event loop stalled while the client waited for the API server"


async def test_cancel_reads_as_cancelled_even_while_a_foreground_delete_runs(
    make_backend: Make, fake_apiserver: FakeApiServer
) -> None:
    fake_apiserver.deletion_delay_s = None
    backend = make_backend(delete_propagation="Foreground")
    handle = await backend.submit(spec())
    await backend.cancel(handle)
    job = fake_apiserver.job(split(handle)[0])
    assert job is not None
    assert job["metadata"]["deletionTimestamp"]
    [status] = await backend.poll([handle])
    assert status.failure is not None
    assert status.failure.reason == "cancelled"
    fake_apiserver.collect_garbage()
    [status] = await backend.poll([handle])
    assert status.failure is not None
    assert status.failure.reason == "cancelled"


async def test_the_client_sends_the_rendered_manifest_unchanged(
    backend: KubernetesExecutionBackend, fake_apiserver: FakeApiServer
) -> None:
    s = spec(
        inputs=[WEIGHTS],
        env={"QUOTES": "'a' \"b\" $(c)", "NEWLINE": "x\ny"},
        resources=ResourceRequest(cpu=0.5, memory_gb=1, gpu="gpu", count=2),
        command=["sh", "-c", 'printf "%s" "$@"', "--", "two  spaces", ""],
        avoid_hosts=("node-a",),
    )
    manifest, _ = backend.render(s)
    handle = await backend.submit(s)
    stored = fake_apiserver.job(split(handle)[0])
    assert stored is not None
    assert stored["spec"]["template"] == manifest["spec"]["template"]
    assert stored["metadata"]["labels"] == manifest["metadata"]["labels"]
    assert stored["metadata"]["annotations"] == manifest["metadata"]["annotations"]
    for key in ("backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished"):
        assert stored["spec"][key] == manifest["spec"][key]


async def test_lingering_pods_of_a_replaced_attempt_are_never_read_as_the_new_ones(
    backend: KubernetesExecutionBackend, fake_apiserver: FakeApiServer
) -> None:
    old = await backend.submit(spec())
    name, old_uid = split(old)
    fake_apiserver.finish_job(name, exit_code=3)
    fake_apiserver.write_log(name, "old attempt\n")
    new = await backend.submit(spec())
    assert fake_apiserver.pods_of(old_uid), "background deletion leaves the old pod for a while"
    fake_apiserver.finish_job(name, exit_code=5)
    fake_apiserver.write_log(name, "new attempt\n")
    fresh = KubernetesExecutionBackend(runtime=backend._runtime, pvc_name="altar-data")
    [status] = await fresh.poll([new])
    assert status.failure is not None
    assert status.failure.reason == "exit_5"
    assert await fresh.failure_detail(new) == "new attempt"


async def test_a_job_removed_by_its_ttl_reads_as_missing_in_a_fresh_process(
    make_backend: Make, fake_apiserver: FakeApiServer
) -> None:
    fake_apiserver.honour_ttl = True
    backend = make_backend(job_ttl_seconds_after_finished=0)
    handle = await backend.submit(spec())
    name, uid = split(handle)
    fake_apiserver.finish_job(name, exit_code=0)
    deadline = time.monotonic() + 5
    while fake_apiserver.job(name) is not None and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.02)  # the fake's TTL controller runs in its own thread
    assert fake_apiserver.job(name) is None
    assert fake_apiserver.pods_of(uid) == []
    fresh = KubernetesExecutionBackend(runtime=backend._runtime, pvc_name="altar-data")
    [status] = await fresh.poll([handle])
    assert status.failure is not None
    assert status.failure.reason == "container_missing"
    assert not status.failure.deterministic


async def test_a_container_the_kubelet_lost_is_job_failed_not_an_exit_code() -> None:
    from altar.backends.kubernetes import ContainerExit, JobCondition, K8sJobInfo, K8sPodInfo
    from altar.backends.kubernetes.classify import classify_failure

    job = K8sJobInfo(
        "score-1",
        TaskState.FAILED,
        uid="u1",
        conditions=(JobCondition("Failed", "True", "BackoffLimitExceeded"),),
    )
    # what the kubelet records when the node went away under a running container
    lost = ContainerExit(
        "main",
        137,
        "ContainerStatusUnknown",
        "The container could not be located when the pod was terminated",
    )
    pod = K8sPodInfo("score-1-abcde", "u1", "score-1", container_exits=(lost,))
    failure = classify_failure(job, [pod])
    assert failure.reason == "job_failed"
    assert not failure.deterministic
    assert "could not be located" in (failure.detail or "")
