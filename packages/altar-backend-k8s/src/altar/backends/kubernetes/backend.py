"""KubernetesExecutionBackend: one batch/v1 Job per task, named by the spec's hash."""

from __future__ import annotations

import contextlib
import inspect
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from altar.backends.kubernetes.admission import QuotaGate
from altar.backends.kubernetes.adoption import listed_labels
from altar.backends.kubernetes.calls import RuntimeCalls
from altar.backends.kubernetes.classify import classify_failure, failure_without_pods
from altar.backends.kubernetes.creating import create_or_adopt
from altar.backends.kubernetes.naming import (
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    format_external_id,
    identity_of,
    is_valid_label,
    job_name,
    parse_external_id,
    shared_selector,
)
from altar.backends.kubernetes.preflight import check_cluster
from altar.backends.kubernetes.render import (
    CPU_POOL,
    DEFAULT_DIGEST_VERIFIER_IMAGE,
    GPU_RESOURCE_KEY,
    POOL_ANNOTATION,
    ManifestOptions,
    PoolConfig,
    add_input_verification,
    annotate_manifest_digest,
    build_job_manifest,
    plain_json,
)
from altar.backends.kubernetes.runtime import AsyncKubernetesRuntime, KubernetesRuntime
from altar.backends.kubernetes.values import (
    MAIN_CONTAINER,
    VERIFY_INPUTS_CONTAINER,
    K8sJobInfo,
    K8sPodInfo,
    PropagationPolicy,
)
from altar.execution import (
    CONTAINER_MOUNT_ROOT,
    LABEL_RUN,
    LABEL_SUBMISSION,
    Capacity,
    ContainerTaskSpec,
    ExecutionBackend,
    PathResolver,
    TaskFailure,
    TaskHandle,
    TaskState,
    TaskStatus,
    Transfer,
    mint_handle,
)

__all__ = ["NAMESPACE_ENV", "PVC_ENV", "KubernetesExecutionBackend"]

NAMESPACE_ENV = "ALTAR_K8S_NAMESPACE"
PVC_ENV = "ALTAR_K8S_PVC"
_OUTCOME_CACHE_LIMIT = 10_000


class KubernetesExecutionBackend(ExecutionBackend):
    """Runs each ContainerTaskSpec as a Kubernetes Job.

    The Job is named from a hash of the spec (:func:`~altar.backends.kubernetes.naming.job_name`),
    so submitting a spec again adopts its active Job or replaces its finished one; a spec that
    carries the runner's submission key (``altar.submission``) adopts the Job created under
    that key in whatever state, finished included (``adopts_submissions``). See the package
    docs for the exact rules. Handles name one attempt (``<job name>/<job uid>``).
    Inputs with a digest are verified in the task by a ``verify-inputs`` init container.
    All options are keyword-only; see ``docs/backends/kubernetes.md``.
    """

    name: ClassVar[str] = "kubernetes"
    input_digest_verification = "task"
    adopts_submissions: ClassVar[bool] = True
    #: Imported on first use only; the registry checks they are installed (``altar backends``).
    requires: ClassVar[tuple[str, ...]] = ("kubernetes",)
    #: Pauses between create attempts while an old Job is being replaced (about a minute).
    recreate_waits_s: ClassVar[tuple[float, ...]] = (0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 15.0, 15.0)
    log_tail_lines: ClassVar[int] = 20

    def __init__(
        self,
        *,
        namespace: str | None = None,
        runtime: KubernetesRuntime | AsyncKubernetesRuntime | None = None,
        kubeconfig: str | None = None,
        context: str | None = None,
        mount_root: str = CONTAINER_MOUNT_ROOT,
        pvc_name: str | None = None,
        image_pull_policy: str = "IfNotPresent",
        backoff_limit: int = 0,
        run_as_user: int | None = None,
        run_as_group: int | None = None,
        fs_group: int | None = None,
        run_as_non_root: bool | None = None,
        gpu_resource_key: str = GPU_RESOURCE_KEY,
        pools: Mapping[str, PoolConfig | Mapping[str, Any]] | None = None,
        pool_node_selectors: Mapping[str, Mapping[str, str]] | None = None,
        max_slots: Mapping[str, int] | None = None,
        digest_verifier_image: str = DEFAULT_DIGEST_VERIFIER_IMAGE,
        trust_verification_records: bool = True,
        job_ttl_seconds_after_finished: int | None = 86400,
        delete_propagation: PropagationPolicy = "Background",
        volume_host_path: str | None = None,
        recreate_waits_s: Sequence[float] | None = None,
        check_quotas: bool = True,
    ) -> None:
        if delete_propagation not in ("Background", "Foreground"):
            raise ValueError(
                "delete_propagation must be 'Background' or 'Foreground' (a Job deleted with "
                f"'Orphan' would leave its pods running), got {delete_propagation!r}"
            )
        self.namespace = namespace or os.environ.get(NAMESPACE_ENV) or "default"
        if runtime is None:
            from altar.backends.kubernetes.sdk_runtime import ClientRuntime

            runtime = ClientRuntime(kubeconfig=kubeconfig, context=context)
        self._runtime = runtime
        self._calls = RuntimeCalls(runtime, namespace=self.namespace)
        self.options = ManifestOptions(
            mount_root=mount_root,
            pvc_name=pvc_name if pvc_name is not None else os.environ.get(PVC_ENV) or None,
            image_pull_policy=image_pull_policy,
            backoff_limit=backoff_limit,
            job_ttl_seconds_after_finished=job_ttl_seconds_after_finished,
            run_as_user=run_as_user,
            run_as_group=run_as_group,
            fs_group=fs_group,
            run_as_non_root=run_as_non_root,
            gpu_resource_key=gpu_resource_key,
            pools={k: PoolConfig.coerce(k, v) for k, v in (pools or {}).items()},
            pool_node_selectors={k: dict(v) for k, v in (pool_node_selectors or {}).items()},
            digest_verifier_image=digest_verifier_image,
            trust_verification_records=trust_verification_records,
        )
        self.max_slots = None if max_slots is None else dict(max_slots)
        self.delete_propagation: PropagationPolicy = delete_propagation
        self.volume_host_path = volume_host_path
        self._recreate_waits_s = tuple(
            self.recreate_waits_s if recreate_waits_s is None else recreate_waits_s
        )
        # (job name, uid) -> (declared outputs, submit time): lets poll tell a Job deleted
        # after success (its outputs are on the volume) from a lost one.
        self._submitted: dict[tuple[str, str], tuple[tuple[Transfer, ...], float]] = {}
        # (job name, uid) -> final outcome seen (None = succeeded): an attempt replaced by a newer
        # one still reports its own outcome to this process.
        self._outcomes: dict[tuple[str, str], TaskFailure | None] = {}
        self._quota_gate = QuotaGate(self._calls, enabled=check_quotas)

    def close(self) -> None:
        """Close the runtime's API connections, if it holds any."""
        close = getattr(self._runtime, "close", None)
        if callable(close) and not inspect.iscoroutinefunction(close):
            close()

    # -- helpers --

    def path_resolver(self) -> PathResolver:
        return PathResolver(self.options.mount_root)

    def job_name(self, spec: ContainerTaskSpec) -> str:
        """The Job name for ``spec`` (subclasses may override, keeping it stable and ≤63)."""
        return job_name(spec)

    def build_manifest(self, spec: ContainerTaskSpec) -> dict[str, Any]:
        """The Job for ``spec`` before input verification and the digest annotation.

        Subclasses may extend it (sidecars, affinity, extra volumes); volumes they mount on
        the main container are mounted on the ``verify-inputs`` container too.
        """
        return build_job_manifest(spec, self.options, name=self.job_name(spec))

    def render(self, spec: ContainerTaskSpec) -> tuple[dict[str, Any], str]:
        """The complete manifest for ``spec`` and its manifest digest (no API call)."""
        manifest = plain_json(self.build_manifest(spec))
        add_input_verification(manifest, spec, self.options)
        digest = annotate_manifest_digest(manifest)
        return manifest, digest

    async def check_spec(self, spec: ContainerTaskSpec) -> None:
        """Refuse what :meth:`submit` would, with no API call: the Job is rendered (GPU pools
        not configured, caps, inputs the task cannot verify) and thrown away."""
        self.render(spec)

    async def check_backend(self) -> list[tuple[str, str]]:
        """Namespace, PVC and ``create jobs`` there (:mod:`~.kubernetes.preflight`)."""
        return await check_cluster(self._calls, self.namespace, self.options.pvc_name)

    # -- submit --

    async def submit(self, spec: ContainerTaskSpec) -> TaskHandle:
        manifest, digest = self.render(spec)
        await self._quota_gate.admit(manifest, key=spec.labels.get(LABEL_SUBMISSION), digest=digest)
        job = await create_or_adopt(self, manifest, digest, spec.labels.get(LABEL_SUBMISSION))
        self._quota_gate.created(manifest)
        if job.uid:
            self._submitted[(job.name, job.uid)] = (tuple(spec.outputs), time.time())
        return mint_handle(self.name, spec, format_external_id(job.name, job.uid))

    # -- poll --

    def _selector(self, handles: Sequence[TaskHandle], legacy: bool) -> str | None:
        return shared_selector([h.labels for h in handles], managed_only=not legacy)

    async def poll(self, handles: list[TaskHandle]) -> list[TaskStatus]:
        if not handles:
            return []
        ids: list[tuple[str, str | None] | None] = []
        for handle in handles:
            try:
                ids.append(parse_external_id(handle.external_id))
            except ValueError:
                ids.append(None)
        legacy = any(i is not None and i[1] is None for i in ids)
        selector = self._selector(handles, legacy)
        jobs = await self._calls.list_jobs(selector)
        by_name = {job.name: job for job in jobs}
        newly_failed: dict[tuple[str, str], K8sJobInfo] = {}
        failures: dict[tuple[str, str], TaskFailure] = {}
        for ident in ids:
            job = by_name.get(ident[0]) if ident else None
            if job is None or job.state is not TaskState.FAILED:
                continue
            if ident and ident[1] is not None and ident[1] != job.uid:
                continue
            # A runtime that reports no uid (allowed for 0.3.0 runtimes) cannot tell attempts
            # apart, so its failures are explained on every poll and never remembered.
            key = (job.name, job.uid or "")
            if job.uid and key in self._outcomes:
                continue
            quick = failure_without_pods(job)
            if quick is not None:
                failures[key] = quick
                if job.uid:
                    self._remember_outcome(key, quick)
            else:
                newly_failed[key] = job
        if newly_failed and self._calls.lists_pods:
            pods = await self._calls.list_pods(selector)
            pods_by_uid: dict[str | None, list[K8sPodInfo]] = {}
            for pod in pods:
                pods_by_uid.setdefault(pod.job_uid, []).append(pod)
            for key, job in newly_failed.items():
                own = (
                    pods_by_uid.get(job.uid, [])
                    if job.uid
                    else [p for p in pods if p.job_name == job.name]
                )
                failures[key] = classify_failure(job, own)
        else:
            # A 0.3.0 runtime lists no pods: it explains each failed Job itself, once.
            for key, job in newly_failed.items():
                described = await self._calls.describe_failure(job)
                failures[key] = described or classify_failure(job, [])
        for key, job in newly_failed.items():
            # Pods of a Job that is only FailureTarget may still be terminating: keep
            # asking until the answer is final.
            if job.uid and (job.replaceable or failures[key].reason != "job_failed"):
                self._remember_outcome(key, failures[key])
        return [
            self._status(handle, ident, by_name, failures)
            for handle, ident in zip(handles, ids, strict=True)
        ]

    def _remember_outcome(self, key: tuple[str, str], failure: TaskFailure | None) -> None:
        if len(self._outcomes) >= _OUTCOME_CACHE_LIMIT:
            self._outcomes.pop(next(iter(self._outcomes)))
        self._outcomes[key] = failure

    def _status(
        self,
        handle: TaskHandle,
        ident: tuple[str, str | None] | None,
        by_name: Mapping[str, K8sJobInfo],
        failures: Mapping[tuple[str, str], TaskFailure],
    ) -> TaskStatus:
        if ident is None:
            return TaskStatus(
                handle,
                TaskState.FAILED,
                TaskFailure(
                    "container_missing",
                    f"{handle.external_id!r} is not a Kubernetes backend handle id",
                ),
            )
        name, uid = ident
        job = by_name.get(name)
        if job is None or (uid is not None and job.uid != uid):
            return self._missing_status(handle, name, uid, job)
        key = (job.name, job.uid or "")
        known = self._outcomes.get(key)
        if known is not None and known.reason == "cancelled" and not job.state.is_terminal:
            return TaskStatus(handle, TaskState.FAILED, known)  # still being deleted
        if job.state is TaskState.SUCCEEDED and job.uid:
            self._remember_outcome(key, None)
        if job.state is TaskState.FAILED:
            failure = self._outcomes.get(key) or failures.get(key)
            if failure is None:
                failure = classify_failure(job, [])
            return TaskStatus(handle, TaskState.FAILED, failure, job.start_time, job.end_time)
        end = job.end_time if job.state.is_terminal else None  # the Job's own times (issue 15)
        return TaskStatus(handle, job.state, None, job.start_time, end)

    def _missing_status(
        self, handle: TaskHandle, name: str, uid: str | None, newer: K8sJobInfo | None
    ) -> TaskStatus:
        if uid is not None and (name, uid) in self._outcomes:
            known = self._outcomes[(name, uid)]
            state = TaskState.SUCCEEDED if known is None else TaskState.FAILED
            return TaskStatus(handle, state, known)
        if uid is not None:
            outputs, submitted_at = self._submitted.get((name, uid), ((), 0.0))
            if self.outputs_present(outputs, since=submitted_at):
                return TaskStatus(handle, TaskState.SUCCEEDED)
        if newer is not None:
            detail = (
                f"job {name} attempt {uid} is gone from namespace {self.namespace}: the name now "
                f"belongs to a newer attempt (uid {newer.uid}), so this attempt's outcome is no "
                "longer known"
            )
        else:
            detail = (
                f"job {name} not found in namespace {self.namespace}; it was deleted (or its "
                "TTL expired) and its outputs were not found"
            )
        return TaskStatus(handle, TaskState.FAILED, TaskFailure("container_missing", detail))

    def outputs_present(self, outputs: Sequence[Transfer], *, since: float) -> bool:
        """Whether a vanished Job's declared outputs prove it succeeded.

        True only with ``volume_host_path`` (where the driver sees the task volume) when
        every output exists there and was written after the task was submitted. Overridable.
        """
        if not outputs or self.volume_host_path is None:
            return False
        root = Path(self.volume_host_path)
        for transfer in outputs:
            path = root / transfer.logical_path.lstrip("/")
            try:
                if not path.is_file() or path.stat().st_mtime < since - 1:
                    return False
            except OSError:
                return False
        return True

    # -- the rest of the contract --

    async def capacity(self) -> Capacity:
        """Free slots per pool from ``max_slots``, counting only this backend's active Jobs."""
        if self.max_slots is None:
            return Capacity()
        jobs = await self._calls.list_jobs(f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}")
        active: dict[str, int] = {}
        for job in jobs:
            if job.state.is_terminal or job.deleting:
                continue
            pool = job.annotations.get(POOL_ANNOTATION, CPU_POOL)
            active[pool] = active.get(pool, 0) + 1
        return Capacity(
            pools={
                pool: max(0, ceiling - active.get(pool, 0))
                for pool, ceiling in self.max_slots.items()
            }
        )

    async def list_submissions(self, run: str) -> list[TaskHandle] | None:
        """One handle per Job of run ``run`` (one list call), with the labels it carries.

        A Job being deleted is already on its way out and is not listed. Where ``run`` is not
        label-safe it was stored as an annotation, so every Job of this backend is listed and
        filtered here.
        """
        selector = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"
        if is_valid_label(LABEL_RUN, run):
            selector += f",{LABEL_RUN}={run}"
        handles = []
        for job in await self._calls.list_jobs(selector):
            identity = identity_of(job.labels, job.annotations)
            if job.deleting or identity.get(LABEL_RUN) != run:
                continue
            handles.append(
                TaskHandle(
                    backend=self.name,
                    external_id=format_external_id(job.name, job.uid),
                    labels=listed_labels(job),
                )
            )
        return handles

    async def cancel(self, handle: TaskHandle) -> None:
        """Delete the handle's Job attempt with its pods; a newer attempt is never touched.

        A 0.3.0 handle (a bare Job name) deletes whatever Job holds the name, as 0.3.0 did."""
        try:
            name, uid = parse_external_id(handle.external_id)
        except ValueError:
            return
        deleted = await self._calls.delete_job(
            name, uid=uid, propagation_policy=self.delete_propagation
        )
        if deleted and uid is not None and (name, uid) not in self._outcomes:
            self._remember_outcome(
                (name, uid),
                TaskFailure("cancelled", f"job {name} attempt {uid} was cancelled"),
            )

    async def cleanup(self, handles: list[TaskHandle]) -> None:
        """Delete the finished Job attempts of ``handles`` (one list, one delete each)."""
        if not handles:
            return
        ids = []
        for handle in handles:
            with contextlib.suppress(ValueError):
                ids.append(parse_external_id(handle.external_id))
        legacy = any(uid is None for _, uid in ids)
        jobs = await self._calls.list_jobs(self._selector(handles, legacy))
        by_name = {job.name: job for job in jobs}
        for name, uid in ids:
            job = by_name.get(name)
            if job is None or not job.replaceable or (uid is not None and job.uid != uid):
                continue
            await self._calls.delete_job(
                name, uid=job.uid, propagation_policy=self.delete_propagation
            )
            self._submitted.pop((name, job.uid or ""), None)

    async def failure_detail(self, handle: TaskHandle) -> str | None:
        """The last lines of the failed container's log (the verifier's if it failed)."""
        try:
            name, uid = parse_external_id(handle.external_id)
        except ValueError:
            return None
        if not self._calls.reads_pod_logs:
            # A 0.3.0 runtime picks the pod and container from the Job's name itself.
            text = await self._calls.read_job_log_tail(name, lines=self.log_tail_lines)
            return text.rstrip("\n") if text else None
        selector = f"controller-uid={uid}" if uid else f"job-name={name}"
        pods = await self._calls.list_pods(selector)
        if not pods:
            return None
        pod = max(pods, key=lambda p: p.created)
        container = MAIN_CONTAINER
        if any(e.name == VERIFY_INPUTS_CONTAINER and e.exit_code != 0 for e in pod.init_exits):
            container = VERIFY_INPUTS_CONTAINER
        text = await self._calls.read_pod_log_tail(
            pod.name, container=container, lines=self.log_tail_lines
        )
        return text.rstrip("\n") if text else None
