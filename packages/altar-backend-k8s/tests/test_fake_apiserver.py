"""The fake API server through the real ``kubernetes`` client and the real ``kubectl``."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from altar.backends.kubernetes.testing import FakeApiServer, matches_selector
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException


def job(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels, "annotations": {"note": "kept"}},
        "spec": {
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox", "args": ["true"]}],
                },
            }
        },
    }


@pytest.fixture
def api_client(kubeconfig: Path) -> Iterator[Any]:
    api = config.new_client_from_config(config_file=str(kubeconfig))
    yield api
    api.close()


@pytest.fixture
def batch(api_client: Any) -> Any:
    return client.BatchV1Api(api_client)


@pytest.fixture
def core(api_client: Any) -> Any:
    return client.CoreV1Api(api_client)


def status_of(error: ApiException) -> dict[str, Any]:
    body = error.body.decode() if isinstance(error.body, bytes) else error.body
    return json.loads(body)


def test_create_assigns_identity_and_keeps_annotations(batch: Any) -> None:
    created = batch.create_namespaced_job("default", client.V1Job.from_dict(job("a", x="1")))
    assert created.metadata.uid
    assert int(created.metadata.resource_version) > 0
    assert created.metadata.annotations == {"note": "kept"}
    assert created.metadata.creation_timestamp is not None
    again = batch.read_namespaced_job("a", "default")
    assert again.metadata.uid == created.metadata.uid


def test_duplicate_is_409_already_exists_and_missing_is_404(batch: Any) -> None:
    batch.create_namespaced_job("default", client.V1Job.from_dict(job("a")))
    with pytest.raises(ApiException) as dup:
        batch.create_namespaced_job("default", client.V1Job.from_dict(job("a")))
    assert dup.value.status == 409
    assert status_of(dup.value)["reason"] == "AlreadyExists"
    assert status_of(dup.value)["message"] == 'jobs.batch "a" already exists'
    with pytest.raises(ApiException) as missing:
        batch.read_namespaced_job("nope", "default")
    assert missing.value.status == 404
    assert status_of(missing.value)["reason"] == "NotFound"


@pytest.mark.parametrize(
    ("name", "labels", "complaint"),
    [
        ("a", {"fold": "not valid!"}, 'metadata.labels: Invalid value: "not valid!"'),
        ("a", {"x" * 64: "1"}, "name part must be no more than 63 characters"),
        ("a", {"Bad_Prefix/k": "1"}, "prefix part a lowercase RFC 1123 subdomain"),
        ("a", {"k": "v" * 64}, "must be no more than 63 characters"),
        ("Upper", {}, 'metadata.name: Invalid value: "Upper"'),
        ("n" * 64, {}, "spec.template.labels"),
    ],
)
def test_invalid_names_and_labels_are_422_invalid(
    batch: Any, name: str, labels: dict[str, str], complaint: str
) -> None:
    with pytest.raises(ApiException) as invalid:
        batch.create_namespaced_job("default", client.V1Job.from_dict(job(name, **labels)))
    assert invalid.value.status == 422
    body = status_of(invalid.value)
    assert body["reason"] == "Invalid"
    assert body["message"].startswith(f'Job.batch "{name}" is invalid: ')
    assert complaint in body["message"]
    assert batch.list_namespaced_job("default").items == []


@pytest.mark.parametrize(
    "key",
    [
        "job-name",
        "batch.kubernetes.io/job-name",
        "controller-uid",
        "batch.kubernetes.io/controller-uid",
    ],
)
def test_job_controller_labels_set_by_hand_are_422_invalid(batch: Any, key: str) -> None:
    with pytest.raises(ApiException) as invalid:
        batch.create_namespaced_job("default", client.V1Job.from_dict(job("a", **{key: "mine"})))
    assert invalid.value.status == 422
    message = status_of(invalid.value)["message"]
    assert f'spec.template.metadata.labels[{key}]: Invalid value: "mine": must be \'' in message
    assert batch.list_namespaced_job("default").items == []


def test_uid_precondition_failure_is_409_conflict(batch: Any) -> None:
    batch.create_namespaced_job("default", client.V1Job.from_dict(job("a")))
    options = client.V1DeleteOptions(
        propagation_policy="Background", preconditions=client.V1Preconditions(uid="other-uid")
    )
    with pytest.raises(ApiException) as conflict:
        batch.delete_namespaced_job("a", "default", body=options)
    assert conflict.value.status == 409
    body = status_of(conflict.value)
    assert body["reason"] == "Conflict"
    assert "Precondition failed: UID in precondition: other-uid" in body["message"]
    assert batch.read_namespaced_job("a", "default").metadata.name == "a"


def test_background_delete_removes_the_job_at_once_and_pods_linger(
    batch: Any, core: Any, fake_apiserver: FakeApiServer
) -> None:
    uid = batch.create_namespaced_job("default", client.V1Job.from_dict(job("a"))).metadata.uid
    options = client.V1DeleteOptions(
        propagation_policy="Background", preconditions=client.V1Preconditions(uid=uid)
    )
    batch.delete_namespaced_job("a", "default", body=options)
    with pytest.raises(ApiException):
        batch.read_namespaced_job("a", "default")
    pods = core.list_namespaced_pod("default", label_selector=f"controller-uid={uid}").items
    assert len(pods) == 1
    fake_apiserver.collect_garbage()
    assert core.list_namespaced_pod("default").items == []


def test_foreground_delete_keeps_the_job_visible_and_blocks_its_name(
    batch: Any, fake_apiserver: FakeApiServer
) -> None:
    fake_apiserver.deletion_delay_s = None
    batch.create_namespaced_job("default", client.V1Job.from_dict(job("a")))
    batch.delete_namespaced_job(
        "a", "default", body=client.V1DeleteOptions(propagation_policy="Foreground")
    )
    deleting = batch.read_namespaced_job("a", "default")
    assert deleting.metadata.deletion_timestamp is not None
    assert "foregroundDeletion" in deleting.metadata.finalizers
    with pytest.raises(ApiException) as blocked:
        batch.create_namespaced_job("default", client.V1Job.from_dict(job("a")))
    body = status_of(blocked.value)
    assert body["reason"] == "AlreadyExists"
    assert body["message"].startswith("object is being deleted: ")
    fake_apiserver.collect_garbage()
    batch.create_namespaced_job("default", client.V1Job.from_dict(job("a")))


def test_foreground_delete_completes_after_the_delay(
    batch: Any, fake_apiserver: FakeApiServer
) -> None:
    fake_apiserver.deletion_delay_s = 0.05
    batch.create_namespaced_job("default", client.V1Job.from_dict(job("a")))
    batch.delete_namespaced_job(
        "a", "default", body=client.V1DeleteOptions(propagation_policy="Foreground")
    )
    deadline = time.monotonic() + 5
    while fake_apiserver.job("a") is not None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert fake_apiserver.job("a") is None


def test_label_selectors(batch: Any) -> None:
    batch.create_namespaced_job("default", client.V1Job.from_dict(job("a", tier="x", fold="0")))
    batch.create_namespaced_job("default", client.V1Job.from_dict(job("b", tier="y")))

    def names(selector: str) -> list[str]:
        items = batch.list_namespaced_job("default", label_selector=selector).items
        return sorted(j.metadata.name for j in items)

    assert names("tier=x") == ["a"]
    assert names("tier==y") == ["b"]
    assert names("tier!=x") == ["b"]
    assert names("fold") == ["a"]
    assert names("!fold") == ["b"]
    assert names("tier in (x, y)") == ["a", "b"]
    assert names("tier notin (x)") == ["b"]
    assert names("tier=x,fold=1") == []
    assert not matches_selector({}, "a=b")


def test_pods_and_logs(batch: Any, core: Any, fake_apiserver: FakeApiServer) -> None:
    uid = batch.create_namespaced_job("default", client.V1Job.from_dict(job("a"))).metadata.uid
    fake_apiserver.finish_job("a", exit_code=4)
    fake_apiserver.write_log("a", "one\ntwo\nthree\n")
    pods = core.list_namespaced_pod(
        "default", label_selector=f"batch.kubernetes.io/controller-uid={uid}"
    ).items
    assert len(pods) == 1
    terminated = pods[0].status.container_statuses[0].state.terminated
    assert terminated.exit_code == 4
    log = core.read_namespaced_pod_log(pods[0].metadata.name, "default", tail_lines=2)
    assert log == "two\nthree\n"
    conditions = batch.read_namespaced_job("a", "default").status.conditions
    assert [c.type for c in conditions] == ["FailureTarget", "Failed"]


def test_unknown_path_and_method(fake_apiserver: FakeApiServer) -> None:
    import urllib.error
    import urllib.request

    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(fake_apiserver.url + "/apis/apps/v1/deployments")
    assert missing.value.code == 404
    missing.value.close()
    request = urllib.request.Request(
        fake_apiserver.url + "/apis/batch/v1/namespaces/default/jobs/a", method="PUT"
    )
    with pytest.raises(urllib.error.HTTPError) as wrong:
        urllib.request.urlopen(request)
    assert wrong.value.code == 405
    wrong.value.close()


@pytest.mark.kubectl
def test_real_kubectl_accepts_the_fake(
    kubeconfig: Path, tmp_path: Path, kubectl_binary: str
) -> None:
    manifest = tmp_path / "job.yaml"
    manifest.write_text(json.dumps(job("kubectl-job", app="x")))

    def kubectl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [kubectl_binary, "--kubeconfig", str(kubeconfig), *args],
            capture_output=True,
            text=True,
            timeout=60,
        )

    created = kubectl("create", "--validate=false", "-f", str(manifest))
    assert created.returncode == 0, created.stderr
    assert created.stdout.strip() == "job.batch/kubectl-job created"
    again = kubectl("create", "--validate=false", "-f", str(manifest))
    assert again.returncode != 0
    assert "Error from server (AlreadyExists)" in again.stderr
    listed = kubectl("get", "jobs", "-o", "name")
    assert listed.stdout.split() == ["job.batch/kubectl-job"]
    uid = kubectl("get", "job", "kubectl-job", "-o", "jsonpath={.metadata.uid}")
    assert len(uid.stdout.strip()) == 36
    assert "kubectl-job" in kubectl("get", "jobs", "-l", "app=x").stdout
    deleted = kubectl("delete", "job", "kubectl-job")
    assert deleted.returncode == 0, deleted.stderr
    assert "No resources found" in kubectl("get", "jobs").stderr
