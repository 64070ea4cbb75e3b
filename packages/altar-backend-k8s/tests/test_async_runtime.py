"""A custom runtime written for altar 0.3.0 (async methods, 0.3.0's method set) still works.

``LegacyRuntime`` is what a 0.3.0 user wrote, with only its imports changed: it subclasses
``KubernetesRuntime``, its methods are ``async def``, ``create_job`` returns the Job's name,
``delete_job`` returns None and takes no propagation policy, there is no pod listing, and it
explains failures itself with ``describe_failure``. It keeps Jobs in memory the way an API
server would: a taken name is a conflict, every object gets a fresh uid, a delete with a uid
precondition spares a newer Job of the same name, labels are matched by equality selectors.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from altar.backends.kubernetes import (
    MANIFEST_DIGEST_ANNOTATION,
    AsyncKubernetesRuntime,
    K8sJobExistsError,
    K8sJobInfo,
    KubernetesExecutionBackend,
    KubernetesRuntime,
    parse_external_id,
)
from altar.execution import (
    BackendUnavailableError,
    ContainerTaskSpec,
    ExecutionBackend,
    ProviderLimitError,
    ResourceRequest,
    TaskFailure,
    TaskHandle,
    TaskState,
    Transfer,
)

from .launched import launched_from_template
from .specs import spec

conformance = pytest.importorskip("altar.conformance")
ExecutionBackendContract = conformance.ExecutionBackendContract
LaunchedTask = conformance.LaunchedTask


@dataclass
class _Job:
    manifest: dict[str, Any]
    uid: str
    state: TaskState = TaskState.PENDING
    failure: TaskFailure | None = None
    log: str = ""


@dataclass
class LegacyRuntime(KubernetesRuntime):  # type: ignore[misc]
    """An in-memory Kubernetes runtime in altar 0.3.0's style."""

    jobs: dict[tuple[str, str], _Job] = field(default_factory=dict)
    calls: list[tuple[str, str]] = field(default_factory=list)
    threads: set[int] = field(default_factory=set)
    down: bool = False

    def _enter(self, method: str, name: str = "") -> None:
        self.threads.add(threading.get_ident())
        if self.down:
            raise ConnectionRefusedError(111, "Connection refused")
        self.calls.append((method, name))

    async def create_job(self, manifest: dict[str, Any], *, namespace: str) -> str:  # type: ignore[override]
        name = manifest["metadata"]["name"]
        self._enter("create_job", name)
        if (namespace, name) in self.jobs:
            raise K8sJobExistsError(name, namespace=namespace, detail="AlreadyExists")
        self.jobs[(namespace, name)] = _Job(manifest=manifest, uid=str(uuid.uuid4()))
        return str(name)

    async def list_jobs(  # type: ignore[override]
        self, *, namespace: str, label_selector: str | None = None
    ) -> list[K8sJobInfo]:
        self._enter("list_jobs")
        wanted = dict(p.split("=", 1) for p in label_selector.split(",")) if label_selector else {}
        found = []
        for (ns, _), job in self.jobs.items():
            labels = job.manifest["metadata"].get("labels") or {}
            if ns == namespace and all(labels.get(k) == v for k, v in wanted.items()):
                found.append(self._info(job))
        return found

    async def read_job(self, name: str, *, namespace: str) -> K8sJobInfo | None:  # type: ignore[override]
        self._enter("read_job", name)
        job = self.jobs.get((namespace, name))
        return None if job is None else self._info(job)

    async def delete_job(self, name: str, *, namespace: str, uid: str | None = None) -> None:  # type: ignore[override]
        self._enter("delete_job", name)
        job = self.jobs.get((namespace, name))
        if job is not None and (uid is None or job.uid == uid):
            del self.jobs[(namespace, name)]

    async def read_log_tail(self, name: str, *, namespace: str, lines: int) -> str | None:  # type: ignore[override]
        self._enter("read_log_tail", name)
        job = self.jobs.get((namespace, name))
        if job is None or not job.log:
            return None
        return "".join(job.log.splitlines(keepends=True)[-lines:])

    async def describe_failure(self, name: str, *, namespace: str) -> TaskFailure:
        self._enter("describe_failure", name)
        job = self.jobs.get((namespace, name))
        if job is None:
            return TaskFailure(
                "container_missing", f"job {name} not found in namespace {namespace}"
            )
        return job.failure or TaskFailure("job_failed", "job failed without a container exit")

    @staticmethod
    def _info(job: _Job) -> K8sJobInfo:
        meta = job.manifest["metadata"]
        return K8sJobInfo(
            meta["name"],
            job.state,
            dict(meta.get("labels") or {}),
            dict(meta.get("annotations") or {}),
            job.uid,
        )

    # -- what the cluster does on its own (tests drive it) --

    def job(self, handle: TaskHandle, namespace: str = "default") -> _Job:
        name, uid = parse_external_id(handle.external_id)
        job = self.jobs[(namespace, name)]
        assert uid is None or job.uid == uid, "the handle names an older attempt"
        return job

    def finish(self, handle: TaskHandle, *, exit_code: int) -> None:
        job = self.job(handle)
        if exit_code == 0:
            job.state = TaskState.SUCCEEDED
            return
        job.state = TaskState.FAILED
        job.failure = TaskFailure(
            f"exit_{exit_code}",
            f"container main exited with code {exit_code}",
            deterministic=True,
            exit_code=exit_code,
        )

    def fail(self, handle: TaskHandle, failure: TaskFailure) -> None:
        job = self.job(handle)
        job.state, job.failure = TaskState.FAILED, failure


@pytest.fixture
def runtime() -> LegacyRuntime:
    return LegacyRuntime()


@pytest.fixture
def backend(runtime: LegacyRuntime) -> KubernetesExecutionBackend:
    return KubernetesExecutionBackend(
        runtime=runtime, pvc_name="altar-data", recreate_waits_s=(0.0, 0.01, 0.02)
    )


def test_0_3_0_value_types_keep_their_constructors() -> None:
    info = K8sJobInfo("j", TaskState.RUNNING, {"job_id": "J"}, {"a": "b"}, "u-1")
    assert (info.name, info.state, info.labels, info.annotations, info.uid) == (
        "j",
        TaskState.RUNNING,
        {"job_id": "J"},
        {"a": "b"},
        "u-1",
    )
    assert K8sJobInfo(name="j", state=TaskState.PENDING).uid is None
    error = K8sJobExistsError("j", namespace="ns", detail="held")
    assert (error.name, error.namespace, str(error)) == (
        "j",
        "ns",
        "job j already exists in namespace ns: held",
    )
    assert str(K8sJobExistsError("j", namespace="ns")) == "job j already exists in namespace ns"


@pytest.mark.asyncio
async def test_submit_creates_and_reads_back_the_uid_on_the_event_loop(
    backend: KubernetesExecutionBackend, runtime: LegacyRuntime
) -> None:
    handle = await backend.submit(spec())
    name, uid = parse_external_id(handle.external_id)
    [((_, job_name), job)] = runtime.jobs.items()
    assert (name, uid) == (job_name, job.uid)
    assert job.manifest["metadata"]["annotations"][MANIFEST_DIGEST_ANNOTATION].startswith("sha256:")
    assert runtime.calls == [("create_job", name), ("read_job", name)]
    # coroutine methods are awaited directly, never run in a worker thread
    assert runtime.threads == {threading.get_ident()}


@pytest.mark.asyncio
async def test_resubmitting_an_active_spec_adopts_its_job(
    backend: KubernetesExecutionBackend, runtime: LegacyRuntime
) -> None:
    first = await backend.submit(spec())
    second = await backend.submit(spec())
    assert first == second
    assert len(runtime.jobs) == 1


@pytest.mark.asyncio
async def test_an_active_job_from_another_manifest_is_refused(
    backend: KubernetesExecutionBackend, runtime: LegacyRuntime
) -> None:
    handle = await backend.submit(spec())
    runtime.job(handle).manifest["metadata"]["annotations"].clear()  # e.g. made by altar 0.2
    with pytest.raises(K8sJobExistsError, match="missing"):
        await backend.submit(spec())


@pytest.mark.asyncio
async def test_resubmitting_a_finished_spec_replaces_exactly_that_attempt(
    backend: KubernetesExecutionBackend, runtime: LegacyRuntime
) -> None:
    old = await backend.submit(spec())
    old_uid = runtime.job(old).uid
    runtime.finish(old, exit_code=2)
    new = await backend.submit(spec())
    assert new != old
    assert runtime.job(new).uid != old_uid
    assert runtime.job(new).state is TaskState.PENDING
    # the old attempt keeps its own outcome, and cancelling it spares the new Job
    [status] = await backend.poll([old])
    assert status.state is TaskState.FAILED
    await backend.cancel(old)
    assert runtime.job(new).state is TaskState.PENDING


@pytest.mark.asyncio
async def test_poll_success_failure_and_missing(
    backend: KubernetesExecutionBackend, runtime: LegacyRuntime
) -> None:
    ok = await backend.submit(spec(kind="ok"))
    bad = await backend.submit(spec(kind="bad"))
    oom = await backend.submit(spec(kind="oom"))
    runtime.finish(ok, exit_code=0)
    runtime.finish(bad, exit_code=3)
    runtime.fail(oom, TaskFailure("oom_killed", "container main was OOM killed", exit_code=137))
    gone = TaskHandle("kubernetes", "score-000000000000/" + str(uuid.uuid4()))
    runtime.calls.clear()
    statuses = await backend.poll([ok, bad, oom, gone])
    assert [s.state for s in statuses] == [TaskState.SUCCEEDED] + [TaskState.FAILED] * 3
    assert [s.failure.reason if s.failure else None for s in statuses] == [
        None,
        "exit_3",
        "oom_killed",
        "container_missing",
    ]
    assert statuses[1].failure is not None
    assert statuses[1].failure.deterministic
    bad_name = parse_external_id(bad.external_id)[0]
    oom_name = parse_external_id(oom.external_id)[0]
    assert sorted(runtime.calls) == sorted(
        [("list_jobs", ""), ("describe_failure", bad_name), ("describe_failure", oom_name)]
    )
    # a failure already explained is not asked about again
    runtime.calls.clear()
    again = await backend.poll([bad, oom])
    assert [s.failure for s in again] == [statuses[1].failure, statuses[2].failure]
    assert runtime.calls == [("list_jobs", "")]


@pytest.mark.asyncio
async def test_cancel_deletes_the_attempt_and_reads_as_cancelled(
    backend: KubernetesExecutionBackend, runtime: LegacyRuntime
) -> None:
    handle = await backend.submit(spec())
    await backend.cancel(handle)
    await backend.cancel(handle)
    assert runtime.jobs == {}
    [status] = await backend.poll([handle])
    assert status.state is TaskState.FAILED
    assert status.failure is not None
    assert status.failure.reason == "cancelled"


@pytest.mark.asyncio
async def test_failure_detail_asks_for_the_jobs_log_tail(
    backend: KubernetesExecutionBackend, runtime: LegacyRuntime
) -> None:
    handle = await backend.submit(spec())
    runtime.job(handle).log = "".join(f"line {i}\n" for i in range(50))
    runtime.finish(handle, exit_code=1)
    detail = await backend.failure_detail(handle)
    assert detail is not None
    assert detail.splitlines() == [f"line {i}" for i in range(30, 50)]
    assert ("read_log_tail", parse_external_id(handle.external_id)[0]) in runtime.calls


@pytest.mark.asyncio
async def test_an_unreachable_api_is_transient(
    backend: KubernetesExecutionBackend, runtime: LegacyRuntime
) -> None:
    handle = await backend.submit(spec())
    runtime.down = True
    with pytest.raises(BackendUnavailableError, match="list_jobs"):
        await backend.poll([handle])


@pytest.mark.asyncio
async def test_methods_are_detected_one_by_one(runtime: LegacyRuntime) -> None:
    loop_thread = threading.get_ident()
    listed_on: list[int] = []
    legacy_list_jobs = LegacyRuntime.list_jobs

    class Mixed(LegacyRuntime):
        def list_jobs(  # type: ignore[override]
            self, *, namespace: str, label_selector: str | None = None
        ) -> list[K8sJobInfo]:
            listed_on.append(threading.get_ident())
            return asyncio.run(
                legacy_list_jobs(self, namespace=namespace, label_selector=label_selector)
            )

    mixed = Mixed()
    backend = KubernetesExecutionBackend(runtime=mixed, pvc_name="altar-data")
    handle = await backend.submit(spec())
    [status] = await backend.poll([handle])
    assert status.state is TaskState.PENDING
    assert listed_on
    assert loop_thread not in listed_on
    assert backend._calls.lists_pods is False


def _runtime(backend: ExecutionBackend) -> LegacyRuntime:
    assert isinstance(backend, KubernetesExecutionBackend)
    runtime = backend._runtime
    assert isinstance(runtime, LegacyRuntime)
    return runtime


class TestLegacyRuntimeContract(ExecutionBackendContract):  # type: ignore[misc, valid-type]
    """The conformance suite with the 0.3.0-style async runtime under the backend."""

    @pytest.fixture
    def backend(self) -> ExecutionBackend:
        return KubernetesExecutionBackend(
            runtime=LegacyRuntime(),
            pvc_name="altar-data",
            max_slots={"cpu": 8},
            recreate_waits_s=(0.0, 0.01, 0.02),
        )

    def finish_task(self, backend: ExecutionBackend, handle: TaskHandle, *, exit_code: int) -> None:
        _runtime(backend).finish(handle, exit_code=exit_code)

    def expire_task(self, backend: ExecutionBackend, handle: TaskHandle) -> None:
        runtime = _runtime(backend)
        deadline = runtime.job(handle).manifest["spec"]["activeDeadlineSeconds"]
        failure = TaskFailure("timeout", f"job was active longer than {deadline} s")
        runtime.fail(handle, failure)

    def launched_timeout(self, backend: ExecutionBackend, handle: TaskHandle) -> int | None:
        value = _runtime(backend).job(handle).manifest["spec"].get("activeDeadlineSeconds")
        return None if value is None else int(value)

    def write_task_log(
        self, backend: ExecutionBackend, handle: TaskHandle, lines: list[str]
    ) -> bool:
        _runtime(backend).job(handle).log = "".join(f"{line}\n" for line in lines)
        return True

    def fail_input_verification(self, backend: ExecutionBackend, handle: TaskHandle) -> None:
        runtime = _runtime(backend)
        init = runtime.job(handle).manifest["spec"]["template"]["spec"]["initContainers"]
        assert init[0]["name"] == "verify-inputs", "a digest input must be verified in the task"
        failure = TaskFailure(
            "input_digest_mismatch", "input: FAILED", deterministic=True, exit_code=1
        )
        runtime.fail(handle, failure)

    def oom_kill_task(self, backend: ExecutionBackend, handle: TaskHandle) -> bool:
        failure = TaskFailure("oom_killed", "container main was OOM killed", exit_code=137)
        _runtime(backend).fail(handle, failure)
        return True

    def make_provider_unreachable(self, backend: ExecutionBackend) -> bool:
        _runtime(backend).down = True
        return True

    def reopen(self, backend: ExecutionBackend) -> ExecutionBackend:
        return KubernetesExecutionBackend(runtime=_runtime(backend), pvc_name="altar-data")

    def launched_task(self, backend: ExecutionBackend, handle: TaskHandle) -> Any:
        template = _runtime(backend).job(handle).manifest["spec"]["template"]
        return launched_from_template(template, LaunchedTask)

    def unsupported_specs(self, spec: ContainerTaskSpec) -> list[ContainerTaskSpec]:
        digest = "sha256:" + "0" * 64
        return [
            replace(spec, labels={**spec.labels, "note": "not a label value!"}),
            replace(spec, env={"9LIVES": "1"}),
            replace(spec, resources=ResourceRequest(cpu=0.0001)),
            replace(spec, inputs=[Transfer("w", "../outside/w.bin", digest=digest)]),
        ]


class MinimalRuntime(AsyncKubernetesRuntime):
    """Only 0.3.0's abstract methods and the legacy ``diagnose``: every default is used."""

    def __init__(self) -> None:
        self.cluster = LegacyRuntime()

    async def create_job(self, manifest: dict[str, Any], *, namespace: str) -> str:
        return await self.cluster.create_job(manifest, namespace=namespace)

    async def list_jobs(
        self, *, namespace: str, label_selector: str | None = None
    ) -> list[K8sJobInfo]:
        return await self.cluster.list_jobs(namespace=namespace, label_selector=label_selector)

    async def delete_job(self, name: str, *, namespace: str, uid: str | None = None) -> None:
        await self.cluster.delete_job(name, namespace=namespace, uid=uid)

    async def diagnose(self, name: str, *, namespace: str) -> tuple[bool, str | None]:
        return (False, f"node running {name} was drained")


@pytest.mark.asyncio
async def test_a_runtime_on_the_0_3_0_base_class_uses_its_defaults() -> None:
    runtime = MinimalRuntime()
    backend = KubernetesExecutionBackend(runtime=runtime, pvc_name="altar-data")
    handle = await backend.submit(spec())
    assert parse_external_id(handle.external_id)[1] == runtime.cluster.job(handle).uid
    assert await backend.submit(spec()) == handle  # adopted through the default read_job
    runtime.cluster.finish(handle, exit_code=9)
    [status] = await backend.poll([handle])
    name = parse_external_id(handle.external_id)[0]
    assert status.failure == TaskFailure(
        "job_failed", f"node running {name} was drained", deterministic=False
    )
    assert await backend.failure_detail(handle) is None
    await backend.cancel(handle)
    assert runtime.cluster.jobs == {}


@dataclass
class UidlessRuntime(LegacyRuntime):
    """A 0.3.0 runtime that never reports uids (``K8sJobInfo.uid`` defaulted to None in 0.3.0)."""

    @staticmethod
    def _info(job: _Job) -> K8sJobInfo:
        return replace(LegacyRuntime._info(job), uid=None)


@pytest.mark.asyncio
async def test_a_runtime_without_uids_still_explains_each_failure() -> None:
    runtime = UidlessRuntime()
    backend = KubernetesExecutionBackend(runtime=runtime, recreate_waits_s=(0.0,))
    handle = await backend.submit(spec())
    assert "/" not in handle.external_id  # no uid: the bare 0.3.0 name
    runtime.finish(handle, exit_code=3)
    [status] = await backend.poll([handle])
    assert status.failure is not None
    assert (status.failure.reason, status.failure.exit_code) == ("exit_3", 3)
    assert status.failure.deterministic
    # without a uid an attempt cannot be told apart, so nothing is remembered: after a
    # replacement the handle follows the new Job instead of reporting the old failure
    again = await backend.submit(spec())
    assert again.external_id == handle.external_id
    [status] = await backend.poll([handle])
    assert status.state is TaskState.PENDING
    runtime.finish(again, exit_code=4)
    [status] = await backend.poll([again])
    assert status.failure is not None
    assert status.failure.reason == "exit_4"


class ApiException(Exception):
    """What a 0.3.0 runtime on ``kubernetes_asyncio`` lets escape for an HTTP error."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"({status})\nReason: {reason}\n")
        self.status = status
        self.reason = reason


@pytest.mark.parametrize(
    "error",
    [
        ApiException(503, "Service Unavailable"),
        ApiException(500, "Internal Server Error"),
        ApiException(429, "Too Many Requests"),
        TimeoutError("the API server did not answer within 30 s"),
    ],
    ids=["503", "500", "429", "timeout"],
)
@pytest.mark.asyncio
async def test_a_0_3_0_runtimes_server_errors_and_timeouts_are_transient(
    backend: KubernetesExecutionBackend, runtime: LegacyRuntime, error: Exception
) -> None:
    handle = await backend.submit(spec())

    async def failing(**_: Any) -> list[K8sJobInfo]:
        raise error

    runtime.list_jobs = failing  # type: ignore[assignment]
    with pytest.raises(BackendUnavailableError, match="list_jobs") as raised:
        await backend.poll([handle])
    assert raised.value.__cause__ is error


@pytest.mark.asyncio
async def test_a_0_3_0_runtimes_client_errors_are_not_transient(
    backend: KubernetesExecutionBackend, runtime: LegacyRuntime
) -> None:
    handle = await backend.submit(spec())
    refused = ApiException(403, "Forbidden")

    async def failing(**_: Any) -> list[K8sJobInfo]:
        raise refused

    runtime.list_jobs = failing  # type: ignore[assignment]
    with pytest.raises(ApiException):
        await backend.poll([handle])


@pytest.mark.asyncio
async def test_a_0_3_0_runtimes_throttling_and_quota_refusals_are_limits(
    backend: KubernetesExecutionBackend, runtime: LegacyRuntime
) -> None:
    throttled = ApiException(429, "Too Many Requests")
    throttled.headers = {"Retry-After": "3"}  # type: ignore[attr-defined]

    async def create(*_: Any, **__: Any) -> str:
        raise throttled

    runtime.create_job = create  # type: ignore[method-assign]
    with pytest.raises(ProviderLimitError) as raised:
        await backend.submit(spec())
    assert raised.value.retry_after_s == 3.0
    full = ApiException(403, "Forbidden")
    full.body = (  # type: ignore[attr-defined]
        '{"kind":"Status","reason":"Forbidden","code":403,"message":"jobs.batch \\"j\\" is '
        "forbidden: exceeded quota: object-counts, requested: count/jobs.batch=1, used: "
        'count/jobs.batch=5, limited: count/jobs.batch=5"}'
    )
    throttled = full
    with pytest.raises(ProviderLimitError) as raised:
        await backend.submit(spec())
    assert raised.value.limit == "ResourceQuota object-counts"
