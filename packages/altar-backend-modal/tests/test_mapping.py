"""The pure spec → Sandbox.create mapping and the result → TaskStatus normalization."""

from __future__ import annotations

import pytest
from altar.backends.modal.mapping import (
    DEFAULT_POOL_ACCELERATORS,
    MODAL_MAX_SANDBOX_TIMEOUT_S,
    check_accelerators,
    modal_gpu,
    modal_timeout,
    sandbox_request,
    status_from_result,
    volume_path,
)
from altar.backends.modal.runtime import ResultStatus, SandboxResult
from altar.execution import (
    ContainerTaskSpec,
    ResourceRequest,
    TaskHandle,
    TaskState,
    UnsupportedCapabilityError,
)

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


# -- normalization ---------------------------------------------------------------------------

HANDLE = TaskHandle("modal", "sb-" + "A" * 22, {"job_id": "J"})


def _status(status: ResultStatus, code: int | None = None, message: str = ""):
    return status_from_result(HANDLE, SandboxResult(status, code, message))


def test_live_states() -> None:
    assert _status(ResultStatus.RUNNING).state is TaskState.RUNNING
    assert _status(ResultStatus.PENDING).state is TaskState.PENDING
    assert _status(ResultStatus.RUNNING).failure is None


def test_success() -> None:
    status = _status(ResultStatus.SUCCESS, 0)
    assert (status.state, status.failure) == (TaskState.SUCCEEDED, None)


@pytest.mark.parametrize("code", [1, 3, 124, 137, 255])
def test_exit_codes_are_deterministic_exit_reasons_even_124_and_137(code: int) -> None:
    status = _status(ResultStatus.FAILURE, code)
    assert status.state is TaskState.FAILED
    assert status.failure is not None
    assert (status.failure.reason, status.failure.exit_code) == (f"exit_{code}", code)
    assert status.failure.deterministic
    assert HANDLE.external_id in (status.failure.detail or "")


def test_timeout_comes_from_the_status_not_the_return_code() -> None:
    status = _status(ResultStatus.TIMEOUT, 0)
    assert status.failure is not None
    assert (status.failure.reason, status.failure.deterministic) == ("timeout", False)


@pytest.mark.parametrize(
    ("result_status", "detail"),
    [
        (ResultStatus.KERNEL_OOM_KILL, "kernel"),
        (ResultStatus.MEMORY_MANAGER_EVICTION, "memory manager"),
        (ResultStatus.MEMORY_THRASHING_EVICTION, "thrashing"),
    ],
)
def test_oom_kills_and_memory_evictions_are_oom_killed(
    result_status: ResultStatus, detail: str
) -> None:
    status = _status(result_status, 137, "Out of memory")
    assert status.failure is not None
    assert status.failure.reason == "oom_killed"
    assert not status.failure.deterministic
    assert status.failure.exit_code == 137
    assert detail in (status.failure.detail or "")
    assert "Out of memory" in (status.failure.detail or "")


def test_termination_is_cancelled() -> None:
    status = _status(ResultStatus.TERMINATED, 0)
    assert status.failure is not None
    assert status.failure.reason == "cancelled"
    assert "terminated" in (status.failure.detail or "")


@pytest.mark.parametrize(
    "result_status",
    [
        ResultStatus.INIT_FAILURE,
        ResultStatus.INTERNAL_FAILURE,
        ResultStatus.IDLE_TIMEOUT,
        ResultStatus.UNKNOWN,
    ],
)
def test_platform_failures_are_job_failed_with_modals_message(result_status: ResultStatus) -> None:
    status = _status(result_status, 0, "image pull failed: manifest unknown")
    assert status.failure is not None
    assert (status.failure.reason, status.failure.deterministic) == ("job_failed", False)
    assert "manifest unknown" in (status.failure.detail or "")


def test_failure_status_with_exit_zero_is_not_a_success() -> None:
    status = _status(ResultStatus.FAILURE, 0)
    assert status.state is TaskState.FAILED
    assert status.failure is not None
    assert status.failure.reason == "job_failed"
