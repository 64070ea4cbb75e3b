"""The quota arithmetic and the API server's refusal text (pure functions)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from altar.backends.kubernetes.quota import (
    check_quotas,
    parse_quantity,
    parse_refusal,
    pod_usage,
    refusal_error,
)
from altar.backends.kubernetes.values import ResourceQuotaInfo
from altar.execution import ProviderLimitError

# The API server's own message (quota admission, plugin/pkg/admission/resourcequota)
REAL = (
    'pods "x" is forbidden: exceeded quota: compute-quota, requested: requests.cpu=2, '
    "used: requests.cpu=8, limited: requests.cpu=8"
)


def manifest(cpu: str | None = "2", memory: str | None = "4Gi", gpu: str | None = None) -> dict:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    limits = dict(requests)
    if gpu is not None:
        limits["nvidia.com/gpu"] = gpu
    main = {"name": "main", "resources": {"requests": requests, "limits": limits}}
    verifier = {"name": "verify-inputs", "resources": {"requests": {"cpu": "500m"}}}
    pod = {"containers": [main], "initContainers": [verifier]}
    return {"metadata": {"name": "j"}, "spec": {"template": {"spec": pod}}}


@pytest.mark.parametrize(
    ("text", "value"),
    [("2", "2"), ("500m", "0.5"), ("16Gi", str(16 * 2**30)), ("1e3", "1000"), ("1.5k", "1500")],
)
def test_quantities(text: str, value: str) -> None:
    assert parse_quantity(text) == Decimal(value)


def test_not_a_quantity() -> None:
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        parse_quantity("two")


def test_the_real_refusal_reads_and_is_a_limit_for_now() -> None:
    refusal = parse_refusal(REAL)
    assert refusal is not None
    assert refusal.quota == "compute-quota"
    assert (refusal.requested, refusal.used, refusal.limited) == (
        {"requests.cpu": "2"},
        {"requests.cpu": "8"},
        {"requests.cpu": "8"},
    )
    error = refusal_error(REAL, namespace="lab")
    assert isinstance(error, ProviderLimitError)
    assert error.limit == "ResourceQuota compute-quota"


def test_a_request_above_the_hard_limit_never_passes() -> None:
    message = REAL.replace("requested: requests.cpu=2", "requested: requests.cpu=16")
    error = refusal_error(message, namespace="lab")
    assert isinstance(error, ValueError)
    assert not isinstance(error, ProviderLimitError)
    must = 'pods "x" is forbidden: failed quota: q: must specify limits.cpu for: main'
    assert type(refusal_error(must, namespace="lab")) is ValueError
    assert refusal_error('jobs.batch is forbidden: User "u" cannot create', namespace="l") is None


def test_pod_usage_is_what_quota_admission_charges() -> None:
    usage = pod_usage(
        manifest(gpu="2"),
        ["pods", "requests.cpu", "cpu", "limits.memory", "requests.nvidia.com/gpu", "services"],
    )
    assert usage == {
        "pods": 1,
        "requests.cpu": 2,
        "cpu": 2,
        "limits.memory": 4 * 2**30,
        "requests.nvidia.com/gpu": 2,  # an extended resource's request is its limit
    }
    # unset: a LimitRange may default it, so nothing is predicted
    assert pod_usage(manifest(cpu=None), ["requests.cpu"]) == {}


def test_check_quotas_skips_scoped_quotas_and_counts_used() -> None:
    full = ResourceQuotaInfo("q", {"requests.cpu": "4"}, {"requests.cpu": "3"})
    with pytest.raises(ProviderLimitError, match=r"requested: requests\.cpu=2"):
        check_quotas(manifest(), [full], namespace="lab")
    check_quotas(
        manifest(), [ResourceQuotaInfo("q", full.hard, full.used, scoped=True)], namespace="lab"
    )
    check_quotas(
        manifest(), [ResourceQuotaInfo("q", full.hard, {"requests.cpu": "2"})], namespace="lab"
    )


def test_a_disruption_target_condition_on_the_job_itself_names_the_ending() -> None:
    from altar.backends.kubernetes.classify import classify_failure
    from altar.backends.kubernetes.values import JobCondition, K8sJobInfo
    from altar.execution import TaskState

    job = K8sJobInfo(
        "j",
        TaskState.FAILED,
        conditions=(
            JobCondition("DisruptionTarget", "True", "DeletionByTaintManager", "tainted"),
            JobCondition("Failed", "True", "BackoffLimitExceeded"),
        ),
    )
    failure = classify_failure(job, [])
    assert (failure.reason, failure.provider_ending) == ("job_failed", "node_lost")
    assert failure.detail == "node_lost: DisruptionTarget (DeletionByTaintManager): job j: tainted"
