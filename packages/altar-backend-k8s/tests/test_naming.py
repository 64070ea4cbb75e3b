from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest
from altar.backends.kubernetes import format_external_id, job_name, parse_external_id
from altar.backends.kubernetes.naming import validate_labels
from altar.execution import (
    ContainerTaskSpec,
    ResourceRequest,
    Transfer,
    UnsupportedCapabilityError,
)


def spec(**overrides: object) -> ContainerTaskSpec:
    values: dict[str, object] = {
        "kind": "ChromBPNet Score_Fold",
        "image": "img:1",
        "command": ["score", "--fold", "0"],
        "labels": {"job_id": "J", "fold": "0"},
    }
    values.update(overrides)
    return ContainerTaskSpec(**values)  # type: ignore[arg-type]


def test_name_is_the_0_3_0_hash_of_the_canonical_spec_dict() -> None:
    # Written out by hand from the 0.3.0 rule, independent of spec_to_dict.
    identity = {
        "kind": "ChromBPNet Score_Fold",
        "image": "img:1",
        "command": ["score", "--fold", "0"],
        "labels": {"job_id": "J", "fold": "0"},
        "inputs": [],
        "outputs": [],
        "resources": {"gpu": None, "count": 1, "memory_gb": None},
        "timeout_s": None,
        "plugin_identity": None,
    }
    text = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    expected = "chrombpnet-score-fold-" + hashlib.sha256(text.encode()).hexdigest()[:12]
    assert job_name(spec()) == expected


def test_name_is_stable_across_processes_and_interpreters() -> None:
    code = (
        "from altar.execution import ContainerTaskSpec as S;"
        "from altar.backends.kubernetes import job_name;"
        "print(job_name(S(kind='k', image='i', command=['a'], labels={'b': '1', 'a': '2'},"
        " env={'Z': '1', 'A': '2'})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    here = job_name(
        ContainerTaskSpec(
            kind="k",
            image="i",
            command=["a"],
            labels={"a": "2", "b": "1"},
            env={"A": "2", "Z": "1"},
        )
    )
    assert out == here


def test_new_fields_change_the_name_only_when_set() -> None:
    base = spec()
    assert job_name(base) != job_name(spec(env={"A": "1"}))
    assert job_name(base) != job_name(spec(resources=ResourceRequest(cpu=2)))
    assert job_name(base) == job_name(spec(avoid_hosts=("node-1",)))


def test_long_and_symbol_only_kinds() -> None:
    long_name = job_name(spec(kind="x" * 80))
    assert len(long_name) == 63
    assert long_name.startswith("x" * 50 + "-")
    assert job_name(spec(kind="--__")).startswith("task-")
    assert len(job_name(spec(kind="--__"))) == len("task-") + 12


def test_external_id_round_trip_and_legacy_bare_name() -> None:
    uid = "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"
    assert parse_external_id(format_external_id("job-abc", uid)) == ("job-abc", uid)
    assert parse_external_id("job-abc") == ("job-abc", None)
    with pytest.raises(ValueError, match="not a Kubernetes backend handle id"):
        parse_external_id("job/../../etc")


@pytest.mark.parametrize(
    ("labels", "rule"),
    [
        ({"fold": "a b"}, "label value must be at most 63 characters"),
        ({"fold": "x" * 64}, "label value must be at most 63 characters"),
        ({"fold": "-x"}, "beginning and ending with a letter"),
        ({"bad key": "1"}, "name part of a label key"),
        ({"Example.COM/k": "1"}, "prefix"),
        ({"": "1"}, "name part of a label key"),
        ({"k": "$(reboot)"}, "label value"),
        ({"k": "a\nb"}, "label value"),
        ({"altar.kundajelab.org/managed-by": "me"}, "reserved"),
    ],
)
def test_label_rules_are_named(labels: dict[str, str], rule: str) -> None:
    with pytest.raises(UnsupportedCapabilityError, match=rule) as info:
        validate_labels(labels)
    assert info.value.capability == "labels"


def test_valid_labels_pass() -> None:
    validate_labels({"job_id": "J-1.x_y", "example.com/fold": "", "a": "0"})


def test_same_name_as_altar_0_3_0_gives_this_spec() -> None:
    # Computed once with the altar 0.3.0 wheel's KubernetesExecutionBackend.job_name.
    spec = ContainerTaskSpec(
        kind="ChromBPNet Score_Fold",
        image="img:1",
        command=["score", "--fold", "0"],
        labels={"job_id": "J", "fold": "0"},
        inputs=[Transfer("gs://b/w", "models/w.h5", digest="sha256:" + "ab" * 32)],
        resources=ResourceRequest(gpu="gpu", count=2, memory_gb=7.5),
        timeout_s=60,
    )
    assert job_name(spec) == "chrombpnet-score-fold-3ca8ec64e51d"
