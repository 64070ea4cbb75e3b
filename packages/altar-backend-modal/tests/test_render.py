"""The pure renderer: spec → sandbox request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from altar.backends.modal.render import (
    DEFAULT_POOL_ACCELERATORS,
    MODAL_MAX_SANDBOX_TIMEOUT_S,
    check_accelerators,
    modal_gpu,
    modal_timeout,
    request_document,
    sandbox_name,
    sandbox_request,
    volume_path,
)
from altar.execution import (
    ContainerTaskSpec,
    ResourceRequest,
    UnsupportedCapabilityError,
)
from altar.execution.labels import submission_labels

HOSTILE = ["sh", "-c", 'echo "$(id)" $HOME; exit 3', "a b", "it's", "line\nbreak", "../../x"]


def _spec(**changes: object) -> ContainerTaskSpec:
    fields: dict[str, object] = {
        "kind": "score",
        "image": "ghcr.io/lab/model@sha256:" + "a" * 64,
        "command": list(HOSTILE),
        "labels": {"job_id": "J", "fold": "0"},
    }
    fields.update(changes)
    return ContainerTaskSpec(**fields)  # type: ignore[arg-type]


def _request(spec: ContainerTaskSpec, accelerators: dict[str, str] | None = None):
    return sandbox_request(
        spec,
        app_name="altar-exec",
        volume_name="altar-data",
        accelerators=DEFAULT_POOL_ACCELERATORS if accelerators is None else accelerators,
    )


def test_image_command_labels_and_env_pass_through_unchanged() -> None:
    spec = _spec(env={"SEED": "1", "QUOTE": "'\"$(x)"})
    request = _request(spec)
    assert request.image == spec.image
    assert request.command == tuple(HOSTILE)
    assert request.tags == {"job_id": "J", "fold": "0"}
    assert request.env == {"SEED": "1", "QUOTE": "'\"$(x)"}
    assert (request.app_name, request.volume_name, request.mount_root) == (
        "altar-exec",
        "altar-data",
        "/mnt/volume",
    )


def test_cpu_and_memory_are_request_limit_pairs_so_the_limit_is_enforced() -> None:
    request = _request(_spec(resources=ResourceRequest(cpu=1.5, memory_gb=7.5)))
    assert request.cpu == (1.5, 1.5)
    assert request.memory_mib == (7680, 7680)


def test_memory_rounds_up_to_whole_mib_never_below_the_request() -> None:
    request = _request(_spec(resources=ResourceRequest(memory_gb=0.0001)))
    assert request.memory_mib == (1, 1)


def test_no_resources_leave_modal_defaults() -> None:
    request = _request(_spec())
    assert (request.cpu, request.memory_mib, request.gpu) == (None, None, None)


@pytest.mark.parametrize(("count", "expected"), [(1, "A10G:1"), (2, "A10G:2"), (8, "A10G:8")])
def test_gpu_is_type_and_exact_count(count: int, expected: str) -> None:
    request = _request(_spec(resources=ResourceRequest(gpu="gpu", count=count)))
    assert request.gpu == expected


def test_gpu_pool_map_is_configurable() -> None:
    accelerators = {"a100": "A100-80GB", "h100": "H100!"}
    assert modal_gpu("a100", 4, accelerators) == "A100-80GB:4"
    assert modal_gpu("h100", 1, accelerators) == "H100!:1"
    assert modal_gpu(None, 3, accelerators) is None


def test_unmapped_gpu_pool_is_refused_not_run_on_cpu() -> None:
    with pytest.raises(UnsupportedCapabilityError, match=r"'tpu'.*pool_accelerators") as caught:
        _request(_spec(resources=ResourceRequest(gpu="tpu")))
    assert caught.value.capability == "gpu"


@pytest.mark.parametrize("bad", ["", "  ", "A100:2"])
def test_accelerator_map_values_are_checked(bad: str) -> None:
    with pytest.raises(ValueError, match="pool_accelerators"):
        check_accelerators({"gpu": bad})


def test_no_timeout_requests_modals_24_hour_maximum() -> None:
    assert modal_timeout(None) == MODAL_MAX_SANDBOX_TIMEOUT_S == 86400
    assert _request(_spec()).timeout_s == 86400


def test_explicit_timeouts_up_to_the_maximum_pass_unchanged() -> None:
    assert modal_timeout(1) == 1
    assert modal_timeout(86400) == 86400


def test_a_longer_timeout_is_rejected_never_clamped() -> None:
    with pytest.raises(UnsupportedCapabilityError, match=r"timeout_s=86401 exceeds .* 86400s"):
        _request(_spec(timeout_s=86401))
    with pytest.raises(ValueError, match="24 hours"):
        modal_timeout(10**9)


@pytest.mark.parametrize(
    ("logical", "expected"),
    [("jobs/J/x.tsv", "jobs/J/x.tsv"), ("/jobs/J/./x", "jobs/J/x"), ("a//b", "a/b")],
)
def test_volume_paths_are_relative_to_the_volume_root(logical: str, expected: str) -> None:
    assert volume_path(logical) == expected


@pytest.mark.parametrize("logical", ["", "/", ".", "../etc/passwd", "a/../../b"])
def test_volume_paths_cannot_escape_or_be_empty(logical: str) -> None:
    with pytest.raises(ValueError, match="does not name a file on the volume"):
        volume_path(logical)


REFERENCES = Path(__file__).parent / "references"


def test_the_sandbox_request_matches_the_saved_reference(reference_files: Any) -> None:
    spec = _spec(
        resources=ResourceRequest(gpu="a100", count=2, memory_gb=7.5, cpu=1.5),
        env={"SEED": "1", "QUOTE": "'\"$(x)", "SPACES": "  padded  "},
        labels={"job_id": "J", "fold": "0", **submission_labels("0" * 32, "fold-0", 2)},
        timeout_s=3600,
    )
    request = _request(spec, {"a100": "A100-80GB"})
    assert request.name == "altar-" + spec.labels["altar.submission"]
    reference_files.check(REFERENCES / "sandbox_request.json", request_document(request))


@pytest.mark.parametrize("key", [None, "not-a-key", "A" * 32, "0" * 31])
def test_only_a_well_formed_submission_key_names_the_sandbox(key: str | None) -> None:
    labels = {"job_id": "J"} if key is None else {"altar.submission": key}
    assert _request(_spec(labels=labels)).name is None


def test_sandbox_names_are_within_modals_name_rules() -> None:
    name = sandbox_name("0123456789abcdef" * 2)
    assert name == "altar-0123456789abcdef0123456789abcdef"
    assert len(name) < 64
    with pytest.raises(ValueError, match="submission key"):
        sandbox_name("../x")
