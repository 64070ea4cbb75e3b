"""The backend against a real cluster (kind in upstream CI): ``-m kubernetes_live``.

Skipped unless ``ALTAR_K8S_LIVE=1``; uses ``$KUBECONFIG`` and the namespace in
``$ALTAR_K8S_NAMESPACE`` (default ``default``). Pods run ``$ALTAR_TEST_IMAGE`` (default
``busybox:latest``, loaded into the nodes so nothing is pulled), which also serves as the
digest verifier image. A PVC from the cluster's default StorageClass stands in for the data
volume. Every Job carries a per-run label and is deleted at the end.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from typing import Any

import pytest
import pytest_asyncio
from altar.backends.kubernetes import KubernetesExecutionBackend, parse_external_id
from altar.execution import ContainerTaskSpec, TaskHandle, TaskState, TaskStatus, Transfer

pytestmark = [pytest.mark.kubernetes_live, pytest.mark.integration, pytest.mark.slow]

IMAGE = os.environ.get("ALTAR_TEST_IMAGE", "busybox:latest")
NAMESPACE = os.environ.get("ALTAR_K8S_NAMESPACE", "default")
RUN = uuid.uuid4().hex[:8]
DEADLINE_S = 240


def kubectl(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("kubectl")
    if binary is None:
        pytest.fail("kubectl is needed to create the test PVC", pytrace=False)
    return subprocess.run(
        [binary, "-n", NAMESPACE, *args], input=stdin, capture_output=True, text=True, timeout=120
    )


@pytest.fixture(scope="module")
def pvc() -> Iterator[str]:
    name = f"altar-live-{RUN}"
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "64Mi"}}},
    }
    created = kubectl("apply", "-f", "-", stdin=json.dumps(claim))
    assert created.returncode == 0, created.stderr
    yield name
    kubectl("delete", "pvc", name, "--wait=false")


@pytest_asyncio.fixture
async def backend(pvc: str) -> AsyncIterator[KubernetesExecutionBackend]:
    backend = KubernetesExecutionBackend(
        namespace=NAMESPACE,
        kubeconfig=os.environ.get("KUBECONFIG"),
        pvc_name=pvc,
        digest_verifier_image=IMAGE,
        job_ttl_seconds_after_finished=600,
    )
    yield backend
    kubectl("delete", "jobs", "-l", f"altar-live-run={RUN}", "--wait=false")
    backend.close()


def spec(command: str, **overrides: Any) -> ContainerTaskSpec:
    values: dict[str, Any] = {
        "kind": "live",
        "image": IMAGE,
        "command": ["sh", "-c", command],
        "labels": {"altar-live-run": RUN, "case": uuid.uuid4().hex[:8]},
    }
    values.update(overrides)
    return ContainerTaskSpec(**values)


async def wait(
    backend: KubernetesExecutionBackend, handle: TaskHandle, states: tuple[TaskState, ...]
) -> TaskStatus:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        [status] = await backend.poll([handle])
        if status.state in states or time.monotonic() > deadline:
            return status
        await asyncio.sleep(1)


TERMINAL = (TaskState.SUCCEEDED, TaskState.FAILED)


@pytest.mark.asyncio
async def test_exit_code_and_log_tail(backend: KubernetesExecutionBackend) -> None:
    handle = await backend.submit(spec('for i in $(seq 30); do echo "line $i"; done; exit 3'))
    status = await wait(backend, handle, TERMINAL)
    assert status.state is TaskState.FAILED, status
    assert status.failure is not None
    assert status.failure.reason == "exit_3"
    detail = await backend.failure_detail(handle)
    assert detail is not None
    assert detail.splitlines()[-1] == "line 30"


@pytest.mark.asyncio
async def test_adopt_while_active_then_replace_after_success(
    backend: KubernetesExecutionBackend,
) -> None:
    running = spec("sleep 20")
    first = await backend.submit(running)
    again = await backend.submit(running)
    assert again.external_id == first.external_id
    assert (await wait(backend, first, TERMINAL)).state is TaskState.SUCCEEDED
    replaced = await backend.submit(running)
    name, uid = parse_external_id(replaced.external_id)
    assert uid != parse_external_id(first.external_id)[1]
    await backend.cancel(first)  # the old attempt: must not touch the new Job
    [status] = await backend.poll([replaced])
    assert status.state in (TaskState.PENDING, TaskState.RUNNING), status
    await backend.cancel(replaced)
    [cancelled] = await backend.poll([replaced])
    assert cancelled.failure is not None
    assert cancelled.failure.reason == "cancelled"
    assert name


@pytest.mark.asyncio
async def test_deadline_is_enforced_by_the_cluster(backend: KubernetesExecutionBackend) -> None:
    handle = await backend.submit(spec("sleep 300", timeout_s=5))
    status = await wait(backend, handle, TERMINAL)
    assert status.failure is not None
    assert status.failure.reason == "timeout"


@pytest.mark.asyncio
async def test_in_task_digest_verification(backend: KubernetesExecutionBackend) -> None:
    path = f"live/{RUN}/weights.bin"
    writer = await backend.submit(
        spec(f"mkdir -p /mnt/volume/live/{RUN} && printf weights > /mnt/volume/{path}")
    )
    assert (await wait(backend, writer, TERMINAL)).state is TaskState.SUCCEEDED
    good = "sha256:" + hashlib.sha256(b"weights").hexdigest()
    bad = "sha256:" + hashlib.sha256(b"other").hexdigest()
    reader = spec(f"cat /mnt/volume/{path}", inputs=[Transfer(path, path, digest=good)])
    ok = await backend.submit(reader)
    assert (await wait(backend, ok, TERMINAL)).state is TaskState.SUCCEEDED
    mismatch = await backend.submit(replace(reader, inputs=[Transfer(path, path, digest=bad)]))
    status = await wait(backend, mismatch, TERMINAL)
    assert status.failure is not None
    assert status.failure.reason == "input_digest_mismatch"
    assert status.failure.deterministic


@pytest.mark.asyncio
async def test_poll_of_many_handles(backend: KubernetesExecutionBackend) -> None:
    handles = [await backend.submit(spec(f"exit {i % 2}")) for i in range(6)]
    deadline = time.monotonic() + DEADLINE_S
    while True:
        statuses = await backend.poll(handles)
        if all(s.state.is_terminal for s in statuses) or time.monotonic() > deadline:
            break
        await asyncio.sleep(1)
    assert [s.state for s in statuses] == [TaskState.SUCCEEDED, TaskState.FAILED] * 3
    assert {s.failure.reason for s in statuses if s.failure} == {"exit_1"}
