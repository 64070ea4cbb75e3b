"""Exactly once (issue 13): what a resubmit adopts, proven against both fakes.

Each test runs twice: against the in-memory seam fake and through the real client against
the fake API server. A resubmit is made by a second backend instance, as a restarted runner
would make it (nothing cached from the first).
"""

from __future__ import annotations

from typing import Any

import pytest
from altar.backends.kubernetes import (
    MANIFEST_DIGEST_ANNOTATION,
    K8sJobExistsError,
    K8sJobInfo,
    KubernetesExecutionBackend,
)
from altar.backends.kubernetes.adoption import decide
from altar.backends.kubernetes.naming import parse_external_id
from altar.execution import (
    BackendUnavailableError,
    ContainerTaskSpec,
    TaskState,
    submission_labels,
)

# conftest.Cluster (tests are not a package, so it cannot be imported here)
Cluster = Any


def keyed(
    run: str = "r1", task: str = "t1", attempt: int = 1, **overrides: Any
) -> ContainerTaskSpec:
    labels = {"job_id": "J", **submission_labels(run, task, attempt)}
    values: dict[str, Any] = {
        "kind": "score",
        "image": "busybox:local",
        "command": ["sh", "-c", "echo hi"],
        "labels": labels,
    }
    values.update(overrides)
    return ContainerTaskSpec(**values)


def name_of(external_id: str) -> str:
    return parse_external_id(external_id)[0]


@pytest.mark.asyncio
async def test_the_backend_says_it_adopts_submissions(cluster: Cluster) -> None:
    assert KubernetesExecutionBackend.adopts_submissions is True
    assert cluster.backend.adopts_submissions is True


@pytest.mark.asyncio
async def test_a_create_accepted_but_unanswered_is_adopted_by_the_resubmit(
    cluster: Cluster,
) -> None:
    spec = keyed()
    cluster.drop_created_answers()
    with pytest.raises(BackendUnavailableError):
        await cluster.backend.submit(spec)  # in doubt: the runner journals it so
    [(name, uid)] = cluster.jobs()  # ... but the API server stored the Job
    handle = await cluster.new_backend().submit(spec)
    assert handle.external_id == f"{name}/{uid}"
    assert cluster.jobs() == [(name, uid)]  # one Job: the task runs once


@pytest.mark.asyncio
@pytest.mark.parametrize(("exit_code", "state"), [(0, TaskState.SUCCEEDED), (3, TaskState.FAILED)])
async def test_a_finished_job_of_the_same_key_is_adopted_not_replaced(
    cluster: Cluster, exit_code: int, state: TaskState
) -> None:
    spec = keyed()
    cluster.drop_created_answers()
    with pytest.raises(BackendUnavailableError):
        await cluster.backend.submit(spec)
    [(name, uid)] = cluster.jobs()
    cluster.finish(name, exit_code=exit_code)  # it ran to the end while the runner was down
    backend = cluster.new_backend()
    handle = await backend.submit(spec)
    assert handle.external_id == f"{name}/{uid}"
    assert cluster.jobs() == [(name, uid)]
    [status] = await backend.poll([handle])
    assert status.state is state
    if state is TaskState.FAILED:
        assert status.failure is not None
        assert status.failure.reason == "exit_3"


@pytest.mark.asyncio
async def test_without_a_key_a_finished_job_is_still_replaced(cluster: Cluster) -> None:
    spec = keyed(labels={"job_id": "J"})
    first = await cluster.backend.submit(spec)
    name, old_uid = parse_external_id(first.external_id)
    cluster.finish(name)
    second = await cluster.new_backend().submit(spec)
    new_name, new_uid = parse_external_id(second.external_id)
    assert new_name == name
    assert new_uid != old_uid
    cluster.collect_garbage()
    assert cluster.jobs() == [(name, new_uid)]


class NamedByTask(KubernetesExecutionBackend):
    """A subclass whose Job name ignores the attempt: two keys can meet on one name."""

    def job_name(self, spec: ContainerTaskSpec) -> str:
        return "task-" + spec.labels["altar.task"]


@pytest.mark.asyncio
async def test_under_another_key_a_finished_job_is_replaced(cluster: Cluster) -> None:
    backend = cluster.new_backend(NamedByTask)
    first = await backend.submit(keyed(attempt=1))
    name, old_uid = parse_external_id(first.external_id)
    assert name == "task-t1"
    cluster.finish(name, exit_code=1)
    second = await cluster.new_backend(NamedByTask).submit(keyed(attempt=2))
    assert name_of(second.external_id) == name
    assert parse_external_id(second.external_id)[1] != old_uid
    cluster.collect_garbage()
    assert [uid for _, uid in cluster.jobs()] != [old_uid]


@pytest.mark.asyncio
async def test_under_another_key_a_running_job_is_refused(cluster: Cluster) -> None:
    backend = cluster.new_backend(NamedByTask)
    await backend.submit(keyed(attempt=1))
    with pytest.raises(K8sJobExistsError, match="different manifest"):
        await cluster.new_backend(NamedByTask).submit(keyed(attempt=2))
    assert len(cluster.jobs()) == 1


@pytest.mark.asyncio
async def test_the_same_key_is_adopted_even_where_names_ignore_it(cluster: Cluster) -> None:
    backend = cluster.new_backend(NamedByTask)
    first = await backend.submit(keyed(attempt=1))
    cluster.finish("task-t1")
    again = await cluster.new_backend(NamedByTask).submit(keyed(attempt=1))
    assert again.external_id == first.external_id


@pytest.mark.asyncio
async def test_each_attempt_gets_its_own_job(cluster: Cluster) -> None:
    one = await cluster.backend.submit(keyed(attempt=1))
    two = await cluster.backend.submit(keyed(attempt=2))
    assert name_of(one.external_id) != name_of(two.external_id)
    assert len(cluster.jobs()) == 2


@pytest.mark.asyncio
async def test_list_submissions_is_one_list_call_for_the_jobs_of_one_run(
    cluster: Cluster,
) -> None:
    a = await cluster.backend.submit(keyed(run="r1", task="t1"))
    b = await cluster.backend.submit(keyed(run="r1", task="t2"))
    await cluster.backend.submit(keyed(run="r2", task="t1"))
    await cluster.backend.submit(keyed(labels={"job_id": "J"}))  # no run at all
    backend = cluster.new_backend()
    before = cluster.list_calls()
    listed = await backend.list_submissions("r1")
    assert cluster.list_calls() == before + 1
    assert listed is not None
    assert sorted(h.external_id for h in listed) == sorted([a.external_id, b.external_id])
    by_task = {h.labels["altar.task"]: h for h in listed}
    assert by_task["t2"].labels == b.labels  # the spec's labels, nothing of ours
    assert all(h.backend == "kubernetes" for h in listed)


@pytest.mark.asyncio
async def test_a_run_id_that_is_not_label_safe_travels_as_an_annotation(
    cluster: Cluster,
) -> None:
    hostile = "nightly run $(rm -rf /)\n../x " + "y" * 80
    mine = await cluster.backend.submit(keyed(run=hostile, task="t 1; echo"))
    await cluster.backend.submit(keyed(run="other", task="t1"))
    listed = await cluster.new_backend().list_submissions(hostile)
    assert listed is not None
    assert [h.external_id for h in listed] == [mine.external_id]
    assert listed[0].labels["altar.run"] == hostile
    assert listed[0].labels["altar.task"] == "t 1; echo"
    assert await cluster.backend.list_submissions("nightly") == []


@pytest.mark.asyncio
async def test_a_job_being_deleted_is_not_listed(cluster: Cluster) -> None:
    backend = cluster.new_backend(delete_propagation="Foreground")
    kept = await backend.submit(keyed(task="kept"))
    gone = await backend.submit(keyed(task="gone"))
    await backend.cancel(gone)
    listed = await backend.list_submissions("r1")
    assert listed is not None
    assert [h.external_id for h in listed] == [kept.external_id]


def _info(state: TaskState, *, key: str | None = None, **fields: Any) -> K8sJobInfo:
    annotations = {MANIFEST_DIGEST_ANNOTATION: "sha256:same"}
    labels = {"altar.submission": key} if key else {}
    return K8sJobInfo("j", state, labels=labels, annotations=annotations, uid="u", **fields)


@pytest.mark.parametrize(
    ("existing", "key", "digest", "decision"),
    [
        (None, "k", "sha256:same", "create"),
        (_info(TaskState.RUNNING, key="k", deleting=True), "k", "sha256:same", "create"),
        (_info(TaskState.SUCCEEDED, key="k", finished=True), "k", "sha256:other", "adopt"),
        (_info(TaskState.FAILED, key="k", finished=False), "k", "sha256:same", "adopt"),
        (_info(TaskState.SUCCEEDED, key="k", finished=True), "other", "sha256:same", "replace"),
        (_info(TaskState.SUCCEEDED, finished=True), None, "sha256:same", "replace"),
        (_info(TaskState.FAILED, finished=False), None, "sha256:same", "wait"),
        (_info(TaskState.RUNNING), None, "sha256:same", "adopt"),
        (_info(TaskState.RUNNING, key="k"), "other", "sha256:other", "refuse"),
    ],
)
def test_the_decision_table(
    existing: K8sJobInfo | None, key: str | None, digest: str, decision: str
) -> None:
    assert decide(existing, key=key, digest=digest) == decision


def test_a_key_stored_as_an_annotation_counts_too() -> None:
    job = K8sJobInfo(
        "j", TaskState.SUCCEEDED, annotations={"altar.submission": "k"}, uid="u", finished=True
    )
    assert decide(job, key="k", digest="sha256:x") == "adopt"
