from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from altar.backends.kubernetes import (
    DEFAULT_DIGEST_VERIFIER_IMAGE,
    MANIFEST_DIGEST_ANNOTATION,
    ManifestOptions,
    PoolConfig,
    job_name,
    manifest_digest,
    render_manifest,
)
from altar.backends.kubernetes.render import add_input_verification, build_job_manifest
from altar.execution import (
    ContainerTaskSpec,
    ResourceRequest,
    Transfer,
    UnsupportedCapabilityError,
    verify_files_script,
)

W = "sha256:" + "ab" * 32
G = "sha256:" + "cd" * 32


def full_spec(**overrides: Any) -> ContainerTaskSpec:
    values: dict[str, Any] = {
        "kind": "score",
        "image": "registry.example/score:1",
        "command": ["score", "--in", "/mnt/volume/jobs/J/v.tsv", "it's $(here)"],
        "labels": {"job_id": "J", "fold": "0"},
        "inputs": [
            Transfer("gs://b/w.h5", "models/m/w.h5", digest=W),
            Transfer("jobs/J/v.tsv", "jobs/J/v.tsv"),
            Transfer("gs://b/genome.fa", "ref/genome.fa", digest=G),
            Transfer("gs://b/w.h5", "models/m/w.h5", digest=W),  # duplicate: checked once
        ],
        "outputs": [Transfer("jobs/J/out.tsv", "jobs/J/out.tsv")],
        "resources": ResourceRequest(gpu="a100", count=2, memory_gb=7.5, cpu=1.5),
        "timeout_s": 3600,
        "env": {"ZED": "1", "ALPHA": "two words"},
    }
    values.update(overrides)
    return ContainerTaskSpec(**values)


OPTIONS = ManifestOptions(
    pvc_name="altar-data",
    run_as_user=1000,
    run_as_group=1000,
    fs_group=2000,
    pools={
        "a100": PoolConfig(
            node_selector={"gpu-type": "a100"},
            tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        )
    },
)


def test_golden_manifest() -> None:
    spec = full_spec()
    manifest = render_manifest(spec, OPTIONS)
    labels = {"job_id": "J", "fold": "0", "altar.kundajelab.org/managed-by": "altar"}
    mounts = [{"name": "main-volume", "mountPath": "/mnt/volume"}]
    quantities = {"cpu": "1500m", "memory": "7680Mi"}
    expected_without_digest = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(spec),
            "labels": labels,
            "annotations": {"altar.kundajelab.org/pool": "a100"},
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": 3600,
            "ttlSecondsAfterFinished": 86400,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "initContainers": [
                        {
                            "name": "verify-inputs",
                            "image": DEFAULT_DIGEST_VERIFIER_IMAGE,
                            "imagePullPolicy": "IfNotPresent",
                            "command": [
                                "sh",
                                "-c",
                                verify_files_script(trust_records=True),
                                "verify-inputs",
                                "ab" * 32 + "  /mnt/volume/models/m/w.h5",
                                "cd" * 32 + "  /mnt/volume/ref/genome.fa",
                            ],
                            "terminationMessagePolicy": "FallbackToLogsOnError",
                            "volumeMounts": mounts,
                            "resources": {"requests": quantities, "limits": quantities},
                        }
                    ],
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.example/score:1",
                            "imagePullPolicy": "IfNotPresent",
                            "args": [
                                "score",
                                "--in",
                                "/mnt/volume/jobs/J/v.tsv",
                                "it's $(here)",
                            ],
                            "terminationMessagePolicy": "FallbackToLogsOnError",
                            "env": [
                                {"name": "ALPHA", "value": "two words"},
                                {"name": "ZED", "value": "1"},
                            ],
                            "resources": {
                                "requests": quantities,
                                "limits": {**quantities, "nvidia.com/gpu": "2"},
                            },
                            "volumeMounts": mounts,
                        }
                    ],
                    "volumes": [
                        {
                            "name": "main-volume",
                            "persistentVolumeClaim": {"claimName": "altar-data"},
                        }
                    ],
                    "securityContext": {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 2000},
                    "nodeSelector": {"gpu-type": "a100"},
                    "tolerations": [
                        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                    ],
                },
            },
        },
    }
    digest = manifest["metadata"]["annotations"].pop(MANIFEST_DIGEST_ANNOTATION)
    assert manifest == expected_without_digest
    assert digest == manifest_digest(expected_without_digest)
    assert "command" not in manifest["spec"]["template"]["spec"]["containers"][0]


def test_cpu_only_spec_renders_like_0_3_0() -> None:
    spec = ContainerTaskSpec(kind="k", image="i", command=["true"])
    manifest = render_manifest(spec, ManifestOptions(job_ttl_seconds_after_finished=None))
    container = manifest["spec"]["template"]["spec"]["containers"][0]
    assert "resources" not in container
    assert "env" not in container
    assert "volumeMounts" not in container
    assert "activeDeadlineSeconds" not in manifest["spec"]
    assert "ttlSecondsAfterFinished" not in manifest["spec"]
    assert "initContainers" not in manifest["spec"]["template"]["spec"]
    assert manifest["metadata"]["annotations"]["altar.kundajelab.org/pool"] == "cpu"


def test_digest_ignores_ttl_and_its_own_annotation_but_not_the_rest() -> None:
    spec = full_spec()
    one = render_manifest(spec, OPTIONS)
    other_ttl = render_manifest(
        spec, ManifestOptions(**{**OPTIONS.__dict__, "job_ttl_seconds_after_finished": 5})
    )
    assert (
        one["metadata"]["annotations"][MANIFEST_DIGEST_ANNOTATION]
        == other_ttl["metadata"]["annotations"][MANIFEST_DIGEST_ANNOTATION]
    )
    other_pvc = render_manifest(spec, ManifestOptions(**{**OPTIONS.__dict__, "pvc_name": "x"}))
    assert (
        one["metadata"]["annotations"][MANIFEST_DIGEST_ANNOTATION]
        != other_pvc["metadata"]["annotations"][MANIFEST_DIGEST_ANNOTATION]
    )
    avoiding = render_manifest(full_spec(avoid_hosts=("node-7",)), OPTIONS)
    affinity = avoiding["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    terms = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0]["values"] == ["node-7"]
    assert avoiding["metadata"]["name"] == one["metadata"]["name"]
    assert (
        avoiding["metadata"]["annotations"][MANIFEST_DIGEST_ANNOTATION]
        == one["metadata"]["annotations"][MANIFEST_DIGEST_ANNOTATION]
    )


def test_env_order_does_not_change_the_digest() -> None:
    a = render_manifest(full_spec(env={"A": "1", "B": "2"}), OPTIONS)
    b = render_manifest(full_spec(env={"B": "2", "A": "1"}), OPTIONS)
    assert a == b


def test_unconfigured_gpu_pool_is_refused_when_pools_are_configured() -> None:
    with pytest.raises(UnsupportedCapabilityError, match="GPU pool 't4' is not configured") as e:
        render_manifest(full_spec(resources=ResourceRequest(gpu="t4")), OPTIONS)
    assert e.value.capability == "gpu"


def test_without_pools_any_gpu_pool_gets_the_resource_key_with_the_exact_count() -> None:
    manifest = render_manifest(
        full_spec(resources=ResourceRequest(gpu="gpu", count=3)),
        ManifestOptions(pvc_name="d", gpu_resource_key="amd.com/gpu"),
    )
    limits = manifest["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"amd.com/gpu": "3"}
    assert "nodeSelector" not in manifest["spec"]["template"]["spec"]


def test_pool_resource_key_and_legacy_node_selectors() -> None:
    options = ManifestOptions(
        pvc_name="d",
        pools={"mi300": PoolConfig.coerce("mi300", {"resource_key": "amd.com/gpu"})},
        pool_node_selectors={"mi300": {"zone": "a"}, "": {"pool": "cpu-nodes"}},
    )
    gpu = render_manifest(full_spec(resources=ResourceRequest(gpu="mi300")), options)
    pod = gpu["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"] == {"amd.com/gpu": "1"}
    assert pod["nodeSelector"] == {"zone": "a"}
    cpu = render_manifest(full_spec(resources=ResourceRequest()), options)
    assert cpu["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "cpu-nodes"}
    with pytest.raises(ValueError, match="unknown option"):
        PoolConfig.coerce("x", {"nodeSelector": {}})


def test_digest_inputs_without_a_volume_are_refused_at_render() -> None:
    with pytest.raises(UnsupportedCapabilityError, match="no volume of the task is mounted"):
        render_manifest(full_spec(resources=ResourceRequest()), ManifestOptions())


def test_inputs_without_digest_need_no_volume() -> None:
    spec = full_spec(inputs=[Transfer("jobs/J/v.tsv", "jobs/J/v.tsv")], resources=ResourceRequest())
    manifest = render_manifest(spec, ManifestOptions())
    assert "initContainers" not in manifest["spec"]["template"]["spec"]


def test_verifier_mounts_every_volume_of_the_main_container() -> None:
    spec = full_spec(resources=ResourceRequest())
    options = ManifestOptions(mount_root="/data", trust_verification_records=False)
    manifest = build_job_manifest(spec, options)
    pod = manifest["spec"]["template"]["spec"]
    mounts = [
        {"name": "models", "mountPath": "/data/models", "readOnly": True},
        {"name": "refs", "mountPath": "/data/ref"},
    ]
    pod["containers"][0]["volumeMounts"] = copy.deepcopy(mounts)
    add_input_verification(manifest, spec, options)
    verifier = pod["initContainers"][0]
    assert verifier["volumeMounts"] == mounts
    assert verifier["command"][2] == verify_files_script(trust_records=False)
    assert verifier["command"][4:] == [
        "ab" * 32 + "  /data/models/m/w.h5",
        "cd" * 32 + "  /data/ref/genome.fa",
    ]


@pytest.mark.parametrize(
    ("overrides", "capability"),
    [
        ({"labels": {"fold": "has space"}}, "labels"),
        ({"env": {"9LIVES": "1"}}, "env"),
        ({"resources": ResourceRequest(cpu=0.0001)}, "cpu"),
        ({"resources": ResourceRequest(memory_gb=0.0001)}, "memory"),
    ],
)
def test_unrepresentable_values_raise_before_any_request(
    overrides: dict[str, Any], capability: str
) -> None:
    with pytest.raises(UnsupportedCapabilityError) as info:
        render_manifest(full_spec(**overrides), OPTIONS)
    assert info.value.capability == capability


def test_options_validation() -> None:
    with pytest.raises(ValueError, match="job_ttl_seconds_after_finished"):
        ManifestOptions(job_ttl_seconds_after_finished=-1)
    with pytest.raises(ValueError, match="mount_root"):
        ManifestOptions(mount_root="relative")


def test_digest_rule_matches_altar_0_3_0() -> None:
    # A Job as altar 0.3.0 rendered it, and the annotation 0.3.0 computed for it (recorded
    # once with the 0.3.0 wheel): same canonical JSON, same exclusions.
    labels = {"job_id": "J", "fold": "0"}
    legacy = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "chrombpnet-score-fold-34a77e6575f3", "labels": labels},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "img:1",
                            "imagePullPolicy": "IfNotPresent",
                            "args": ["score", "--fold", "0"],
                            "resources": {
                                "requests": {"memory": "7680Mi"},
                                "limits": {"memory": "7680Mi", "nvidia.com/gpu": "2"},
                            },
                            "volumeMounts": [{"name": "main-volume", "mountPath": "/mnt/volume"}],
                        }
                    ],
                    "volumes": [
                        {"name": "main-volume", "persistentVolumeClaim": {"claimName": "data"}}
                    ],
                },
            },
            "activeDeadlineSeconds": 60,
            "ttlSecondsAfterFinished": 86400,
        },
    }
    expected = "sha256:0828ae68ad774466553a600c9c9542b89a61194095e5d210142d4f9c98109810"
    assert manifest_digest(legacy) == expected
    annotated = copy.deepcopy(legacy)
    annotated["metadata"]["annotations"] = {MANIFEST_DIGEST_ANNOTATION: expected}
    annotated["spec"]["ttlSecondsAfterFinished"] = 5
    assert manifest_digest(annotated) == expected


# --- saved reference files (pytest --update-references rewrites them) -----------------------

REFERENCES = Path(__file__).parent / "references"
IDENTITY = {
    "altar.run": "20261201-nightly",
    "altar.task": "score/fold 0",  # not label-safe: travels as an annotation
    "altar.attempt": "2",
    "altar.submission": "0123456789abcdef0123456789abcdef",
}


def _text(manifest: dict[str, Any]) -> str:
    return json.dumps(manifest, indent=2, sort_keys=True) + "\n"


def test_job_manifest_matches_its_reference(reference_files: Any) -> None:
    reference_files.check(
        REFERENCES / "job_manifest.json", _text(render_manifest(full_spec(), OPTIONS))
    )


def test_job_manifest_with_runner_identity_matches_its_reference(reference_files: Any) -> None:
    spec = full_spec(labels={"job_id": "J", **IDENTITY}, inputs=[])
    reference_files.check(
        REFERENCES / "job_manifest_identity.json", _text(render_manifest(spec, OPTIONS))
    )


def test_identity_goes_to_labels_where_label_safe_and_annotations_otherwise() -> None:
    spec = full_spec(labels={"job_id": "J", **IDENTITY})
    manifest = render_manifest(spec, OPTIONS)
    labels = manifest["metadata"]["labels"]
    annotations = manifest["metadata"]["annotations"]
    for key in ("altar.run", "altar.attempt", "altar.submission"):
        assert labels[key] == IDENTITY[key]
        assert manifest["spec"]["template"]["metadata"]["labels"][key] == IDENTITY[key]
        assert key not in annotations
    assert "altar.task" not in labels
    assert annotations["altar.task"] == "score/fold 0"


@pytest.mark.parametrize(
    "hostile", ["$(rm -rf /)", "a\nb", "../../etc", "x" * 64, "'quoted' \"twice\"", ""]
)
def test_hostile_identity_values_are_kept_verbatim_as_annotations(hostile: str) -> None:
    manifest = render_manifest(full_spec(labels={"altar.run": hostile}), OPTIONS)
    labels, annotations = manifest["metadata"]["labels"], manifest["metadata"]["annotations"]
    if hostile == "":  # the empty value is label-safe
        assert labels["altar.run"] == ""
    else:
        assert "altar.run" not in labels
        assert annotations["altar.run"] == hostile


def test_plan_labels_are_still_validated_next_to_identity() -> None:
    with pytest.raises(UnsupportedCapabilityError, match="is not valid for Kubernetes"):
        render_manifest(full_spec(labels={"altar.run": "ok", "owner": "a b"}), OPTIONS)


def test_each_attempt_renders_its_own_job_name() -> None:
    one = full_spec(labels={**IDENTITY, "altar.attempt": "1"})
    two = full_spec(labels={**IDENTITY, "altar.attempt": "2"})
    assert job_name(one) != job_name(two)
