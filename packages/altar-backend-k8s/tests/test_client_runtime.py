"""ClientRuntime (the real kubernetes client) against the fake API server."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from altar.backends.kubernetes import K8sConfigError, K8sJobExistsError
from altar.backends.kubernetes.sdk_runtime import ClientRuntime
from altar.backends.kubernetes.testing import FakeApiServer
from altar.execution import AltarError, BackendUnavailableError


def manifest(name: str = "a") -> dict[str, object]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"k": "v"}, "annotations": {"x": "y"}},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox"}],
                }
            }
        },
    }


def test_create_read_list_delete(runtime: ClientRuntime) -> None:
    created = runtime.create_job(manifest(), namespace="default")
    assert created.uid
    assert created.annotations == {"x": "y"}
    read = runtime.read_job("a", namespace="default")
    assert read is not None
    assert read.uid == created.uid
    assert read.labels == {"k": "v"}
    assert [j.name for j in runtime.list_jobs(namespace="default", label_selector="k=v")] == ["a"]
    assert runtime.list_jobs(namespace="default", label_selector="k=w") == []
    assert runtime.read_job("missing", namespace="default") is None
    assert runtime.delete_job("a", namespace="default", uid="not-the-uid") is False
    assert runtime.read_job("a", namespace="default") is not None
    assert runtime.delete_job("a", namespace="default", uid=created.uid) is True
    assert runtime.delete_job("a", namespace="default", uid=created.uid) is False
    assert runtime.read_job("a", namespace="default") is None


def test_name_conflicts(runtime: ClientRuntime, fake_apiserver: FakeApiServer) -> None:
    runtime.create_job(manifest(), namespace="default")
    with pytest.raises(K8sJobExistsError) as taken:
        runtime.create_job(manifest(), namespace="default")
    assert not taken.value.being_deleted
    assert str(taken.value) == (
        'job a already exists in namespace default: jobs.batch "a" already exists'
    )
    fake_apiserver.deletion_delay_s = None
    runtime.delete_job("a", namespace="default", propagation_policy="Foreground")
    info = runtime.read_job("a", namespace="default")
    assert info is not None
    assert info.deleting
    with pytest.raises(K8sJobExistsError) as deleting:
        runtime.create_job(manifest(), namespace="default")
    assert deleting.value.being_deleted


def test_server_errors_are_backend_unavailable(
    runtime: ClientRuntime, fake_apiserver: FakeApiServer
) -> None:
    fake_apiserver.inject_error(503)
    with pytest.raises(BackendUnavailableError, match="HTTP 503"):
        runtime.list_jobs(namespace="default")
    fake_apiserver.inject_error(500)
    with pytest.raises(BackendUnavailableError):
        runtime.read_job("a", namespace="default")


def test_throttling_is_retried_after_retry_after(
    kubeconfig: Path, fake_apiserver: FakeApiServer
) -> None:
    waits: list[float] = []
    runtime = ClientRuntime(kubeconfig=str(kubeconfig), sleep=waits.append)
    fake_apiserver.inject_error(429, times=2, retry_after=3)
    assert runtime.list_jobs(namespace="default") == []
    assert len(waits) == 2
    assert all(3 <= w < 3.2 for w in waits)
    fake_apiserver.inject_error(429, times=10)
    with pytest.raises(BackendUnavailableError, match="HTTP 429"):
        runtime.list_jobs(namespace="default")
    runtime.close()


def test_unreachable_server_is_backend_unavailable(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with FakeApiServer() as fake:
        path = fake.write_kubeconfig(tmp_path / "kc")
    text = path.read_text()
    path.write_text(
        text.replace(text.split('"server": "')[1].split('"')[0], f"http://127.0.0.1:{port}")
    )
    runtime = ClientRuntime(kubeconfig=str(path), request_timeout_s=(0.5, 0.5))
    with pytest.raises(BackendUnavailableError, match="unreachable"):
        runtime.list_jobs(namespace="default")
    runtime.close()


def test_missing_kubeconfig_is_a_clear_error(tmp_path: Path) -> None:
    runtime = ClientRuntime(kubeconfig=str(tmp_path / "nope"))
    # Not transient: the runner would wait forever for a configuration that never appears.
    with pytest.raises(K8sConfigError, match="cannot load a Kubernetes configuration") as raised:
        runtime.list_jobs(namespace="default")
    assert not isinstance(raised.value, BackendUnavailableError)
    assert isinstance(raised.value, AltarError)  # `altar run`: one line, exit 2
    assert isinstance(raised.value, ValueError)  # runner: the submit is refused, not retried
    broken = tmp_path / "broken"
    broken.write_text("clusters: [}")
    with pytest.raises(K8sConfigError, match="cannot load"):
        ClientRuntime(kubeconfig=str(broken)).list_jobs(namespace="default")


def test_log_tail(runtime: ClientRuntime, fake_apiserver: FakeApiServer) -> None:
    created = runtime.create_job(manifest(), namespace="default")
    fake_apiserver.finish_job("a", exit_code=1)
    fake_apiserver.write_log("a", '{"looks": "like json"}\nlast\n')
    pods = runtime.list_pods(namespace="default", label_selector=f"controller-uid={created.uid}")
    assert [p.job_uid for p in pods] == [created.uid]
    assert pods[0].container_exits[0].exit_code == 1
    text = runtime.read_log_tail(pods[0].name, namespace="default", container="main", lines=5)
    assert text == '{"looks": "like json"}\nlast\n'
    assert runtime.read_log_tail("nope", namespace="default", container="main", lines=5) is None


def test_conflict_on_create_is_retried(
    runtime: ClientRuntime, fake_apiserver: FakeApiServer
) -> None:
    fake_apiserver.inject_error(409, times=2, methods={"POST"})
    created = runtime.create_job(manifest(), namespace="default")
    assert created.uid
    assert fake_apiserver.count_requests("POST") == 3
