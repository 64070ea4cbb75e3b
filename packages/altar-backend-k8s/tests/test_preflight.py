"""``check_backend`` (``altar check``) against the fake API server with the real client:
the namespace exists, the PVC exists, ``create jobs`` is allowed (SelfSubjectAccessReview);
read-only, one line per problem (issue 23 item 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from altar.backends.kubernetes import KubernetesExecutionBackend
from altar.backends.kubernetes.sdk_runtime import ClientRuntime
from altar.backends.kubernetes.testing import FakeApiServer
from altar.execution.cli import command as cli

SSAR = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


def _backend(kubeconfig: Path, **options: object) -> KubernetesExecutionBackend:
    return KubernetesExecutionBackend(runtime=ClientRuntime(kubeconfig=str(kubeconfig)), **options)  # type: ignore[arg-type]


@pytest.fixture
def cluster(tmp_path: Path):  # type: ignore[no-untyped-def]
    with FakeApiServer(namespaces=["team"]) as fake:
        fake.access.add_claim("altar-data", namespace="team")
        yield fake, fake.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.mark.asyncio
async def test_a_namespace_claim_and_permission_that_exist_pass(cluster) -> None:  # type: ignore[no-untyped-def]
    fake, kubeconfig = cluster
    backend = _backend(kubeconfig, namespace="team", pvc_name="altar-data")
    try:
        assert await backend.check_backend() == []
    finally:
        backend.close()
    paths = [(r.method, r.path) for r in fake.requests]
    assert paths == [
        ("GET", "/api/v1/namespaces/team"),
        ("GET", "/api/v1/namespaces/team/persistentvolumeclaims/altar-data"),
        ("POST", SSAR),
    ]
    assert fake.count_requests("POST", "/jobs") == 0  # read-only: nothing created


@pytest.mark.asyncio
async def test_each_problem_is_one_line_naming_its_option(cluster) -> None:  # type: ignore[no-untyped-def]
    fake, kubeconfig = cluster
    missing = _backend(kubeconfig, namespace="nope", pvc_name="altar-data")
    try:
        assert await missing.check_backend() == [
            (
                "namespace",
                "namespace 'nope' does not exist; create it (kubectl create namespace NAME) or "
                "set namespace to one that exists",
            )
        ]
    finally:
        missing.close()
    fake.access.deny("create", "jobs", group="batch", namespace="team")
    denied = _backend(kubeconfig, namespace="team", pvc_name="other-claim")
    try:
        problems = await denied.check_backend()
    finally:
        denied.close()
    assert problems == [
        (
            "pvc_name",
            "PersistentVolumeClaim 'other-claim' does not exist in namespace 'team'; create it, "
            "or set pvc_name to one there",
        ),
        (
            "namespace",
            "this identity may not create jobs.batch in namespace 'team'; ask for a Role that "
            "allows it, or use another namespace or context",
        ),
    ]
    # the review asked exactly that, in the API's shape
    assert fake.count_requests("POST", "/jobs") == 0


def test_the_fake_answers_in_the_real_apis_shapes(cluster) -> None:  # type: ignore[no-untyped-def]
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    fake, kubeconfig = cluster
    from kubernetes import config

    api_client = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
    try:
        core = client.CoreV1Api(api_client)
        assert core.read_namespace("team").status.phase == "Active"
        with pytest.raises(ApiException) as missing:
            core.read_namespace("nope")
        body = json.loads(missing.value.body)
        assert (missing.value.status, body["kind"], body["reason"]) == (404, "Status", "NotFound")
        assert body["message"] == 'namespaces "nope" not found'
        assert body["details"] == {"name": "nope", "kind": "namespaces"}
        claim = core.read_namespaced_persistent_volume_claim("altar-data", "team")
        assert claim.status.phase == "Bound"
        with pytest.raises(ApiException) as no_claim:
            core.read_namespaced_persistent_volume_claim("other", "team")
        assert json.loads(no_claim.value.body)["details"]["kind"] == "persistentvolumeclaims"
        review = client.V1SelfSubjectAccessReview(
            spec=client.V1SelfSubjectAccessReviewSpec(
                resource_attributes=client.V1ResourceAttributes(
                    namespace="team", verb="create", group="batch", resource="jobs"
                )
            )
        )
        answer = client.AuthorizationV1Api(api_client).create_self_subject_access_review(review)
        assert answer.status.allowed is True
        assert answer.status.reason.startswith("RBAC: allowed by ")
        fake.access.deny("create", "jobs", group="batch")
        answer = client.AuthorizationV1Api(api_client).create_self_subject_access_review(review)
        assert (answer.status.allowed, answer.status.reason) == (False, None)
        # a Job in a namespace that does not exist is refused as the real server does
        batch = client.BatchV1Api(api_client)
        job = {
            "metadata": {"name": "j"},
            "spec": {
                "template": {
                    "spec": {
                        "containers": [{"name": "c", "image": "busybox"}],
                        "restartPolicy": "Never",
                    }
                }
            },
        }
        with pytest.raises(ApiException) as refused:
            batch.create_namespaced_job("nope", client.V1Job.from_dict(job))
        assert refused.value.status == 404
        assert json.loads(refused.value.body)["message"] == 'namespaces "nope" not found'
    finally:
        api_client.close()


def test_altar_check_reports_the_kubernetes_problems(cluster, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    _, kubeconfig = cluster
    plan = tmp_path / "plan.toml"
    plan.write_text(
        '[backend]\ntype = "kubernetes"\n\n[backend.options]\n'
        f'kubeconfig = {json.dumps(str(kubeconfig))}\nnamespace = "team"\npvc_name = "gone"\n\n'
        '[[tasks]]\nid = "t"\nkind = "k"\nimage = "busybox"\ncommand = ["true"]\n'
    )
    assert cli.main(["check", str(plan)]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"altar: error: {plan}: backend.options.pvc_name: PersistentVolumeClaim 'gone' does "
        "not exist in namespace 'team'; create it, or set pvc_name to one there"
    ]
