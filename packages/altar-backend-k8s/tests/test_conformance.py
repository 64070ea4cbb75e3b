"""The Altar conformance suite against the Kubernetes backend on the fake API server.

Everything goes through the real ``kubernetes`` client over HTTP; the hooks script the fake
the way the Job controller and kubelet would change a real cluster under the backend.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from altar.backends.kubernetes import KubernetesExecutionBackend, parse_external_id
from altar.backends.kubernetes.sdk_runtime import ClientRuntime
from altar.backends.kubernetes.testing import FakeApiServer
from altar.execution import (
    ContainerTaskSpec,
    ExecutionBackend,
    ResourceRequest,
    TaskHandle,
    Transfer,
)

from .launched import launched_from_template, provider_task_from_template

conformance = pytest.importorskip("altar.conformance")
ExecutionBackendContract = conformance.ExecutionBackendContract
LaunchedTask = conformance.LaunchedTask
ProviderTask = conformance.ProviderTask


def _fake(backend: ExecutionBackend) -> FakeApiServer:
    fake = getattr(backend, "_conformance_fake", None)
    assert isinstance(fake, FakeApiServer)
    return fake


def _job(backend: ExecutionBackend, handle: TaskHandle) -> tuple[str, str | None, dict[str, Any]]:
    name, uid = parse_external_id(handle.external_id)
    job = _fake(backend).job(name)
    assert job is not None, f"no job {name} on the fake apiserver"
    assert uid is None or job["metadata"]["uid"] == uid
    return name, uid, job


class TestKubernetesBackendContract(ExecutionBackendContract):  # type: ignore[misc, valid-type]
    unlimited_timeout_s = None
    max_timeout_s = None

    @pytest.fixture
    def backend(
        self,
        make_backend: Callable[..., KubernetesExecutionBackend],
        fake_apiserver: FakeApiServer,
    ) -> ExecutionBackend:
        backend = make_backend(max_slots={"cpu": 8})
        backend._conformance_fake = fake_apiserver  # type: ignore[attr-defined]
        return backend

    def finish_task(self, backend: ExecutionBackend, handle: TaskHandle, *, exit_code: int) -> None:
        name, uid, _ = _job(backend, handle)
        _fake(backend).finish_job(name, uid=uid, exit_code=exit_code)

    def expire_task(self, backend: ExecutionBackend, handle: TaskHandle) -> None:
        name, uid, _ = _job(backend, handle)
        _fake(backend).expire_job(name, uid=uid)

    def launched_timeout(self, backend: ExecutionBackend, handle: TaskHandle) -> int | None:
        return _job(backend, handle)[2]["spec"].get("activeDeadlineSeconds")

    def write_task_log(
        self, backend: ExecutionBackend, handle: TaskHandle, lines: list[str]
    ) -> bool:
        name, uid, _ = _job(backend, handle)
        _fake(backend).write_log(name, "".join(f"{line}\n" for line in lines), uid=uid)
        return True

    def fail_input_verification(self, backend: ExecutionBackend, handle: TaskHandle) -> None:
        name, uid, job = _job(backend, handle)
        init = job["spec"]["template"]["spec"]["initContainers"]
        assert init[0]["name"] == "verify-inputs", "a digest input must be verified in the task"
        _fake(backend).fail_verification(name, uid=uid, message="input: FAILED")

    def oom_kill_task(self, backend: ExecutionBackend, handle: TaskHandle) -> bool:
        name, uid, _ = _job(backend, handle)
        _fake(backend).oom_kill(name, uid=uid)
        return True

    def end_by_provider(self, backend: ExecutionBackend, handle: TaskHandle) -> str | None:
        # The scheduler preempts the Job's pod (a DisruptionTarget condition, as the kubelet
        # writes it); the suite's provider-ending checks (issue 22).
        name, uid, _ = _job(backend, handle)
        _fake(backend).end_by_provider(name, "preempted", uid=uid)
        return "preempted"

    def make_provider_unreachable(self, backend: ExecutionBackend) -> bool:
        _fake(backend).inject_error(503, times=10_000)
        return True

    def reopen(self, backend: ExecutionBackend) -> ExecutionBackend:
        assert isinstance(backend, KubernetesExecutionBackend)
        runtime = backend._runtime
        assert isinstance(runtime, ClientRuntime)
        fresh = KubernetesExecutionBackend(
            runtime=ClientRuntime(kubeconfig=runtime._kubeconfig), pvc_name="altar-data"
        )
        fresh._conformance_fake = _fake(backend)  # type: ignore[attr-defined]
        return fresh

    def launched_task(self, backend: ExecutionBackend, handle: TaskHandle) -> Any:
        _, _, job = _job(backend, handle)
        template = job["spec"]["template"]
        return launched_from_template(template, LaunchedTask)

    def provider_task(self, backend: ExecutionBackend, handle: TaskHandle) -> Any:
        # The Job the fake apiserver stored: the main container's image, the CPUs the
        # scheduler reserves (requests) and the memory limit the kubelet enforces.
        _, _, job = _job(backend, handle)
        return provider_task_from_template(job["spec"]["template"], ProviderTask)

    def unsupported_specs(self, spec: ContainerTaskSpec) -> list[ContainerTaskSpec]:
        digest = "sha256:" + "0" * 64
        return [
            replace(spec, labels={**spec.labels, "note": "not a label value!"}),
            replace(spec, labels={**spec.labels, "x" * 64: "1"}),
            replace(spec, env={"9LIVES": "1"}),
            replace(spec, resources=ResourceRequest(cpu=0.0001)),
            # a digest on an input no volume mounts (pvc under another root)
            replace(spec, inputs=[Transfer("w", "../outside/w.bin", digest=digest)]),
        ]
