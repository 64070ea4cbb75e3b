from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from altar.backends.local.render import (
    BACKEND_LABEL,
    TIMEOUT_LABEL,
    container_name,
    create_body,
    create_body_json,
    host_path,
    memory_bytes,
    nano_cpus,
    render_request,
    timeout_from_labels,
)
from altar.execution import ContainerTaskSpec, ResourceRequest, UnsupportedCapabilityError

HOSTILE = ["sh", "-c", 'echo "$(id)" \'quoted\' `uname`; printf "a\\nb"', "with space", "..", ""]


def render(spec: ContainerTaskSpec, **overrides: object):
    options: dict[str, object] = {
        "data_root": "/data root",
        "user": "1000:1000",
        "network_mode": "none",
        "gpu_devices": None,
    }
    options.update(overrides)
    return render_request(spec, **options)  # type: ignore[arg-type]


def test_image_command_env_and_labels_pass_through_unchanged() -> None:
    spec = ContainerTaskSpec(
        kind="score",
        image="registry.example/model:1@sha256:" + "a" * 64,
        command=HOSTILE,
        labels={"job_id": "J 1", "fold": "$(rm -rf /)"},
        env={"PATH_LIKE": "/a b:$HOME", "NEWLINE": "x\ny"},
        timeout_s=90,
    )
    request = render(spec)
    assert request.image == spec.image
    assert request.command == HOSTILE
    assert request.environment == {"PATH_LIKE": "/a b:$HOME", "NEWLINE": "x\ny"}
    assert request.labels == {
        "job_id": "J 1",
        "fold": "$(rm -rf /)",
        BACKEND_LABEL: "local",
        TIMEOUT_LABEL: "90",
    }
    assert request.binds == {"/data root": "/mnt/volume"}
    assert request.user == "1000:1000"
    assert request.network_mode == "none"
    assert request.gpu_count == 0


def test_no_timeout_means_no_deadline_label() -> None:
    request = render(ContainerTaskSpec(kind="k", image="i", command=[]))
    assert timeout_from_labels(request.labels) is None


def test_no_timeout_blanks_a_deadline_the_image_could_carry() -> None:
    """Docker merges the image's labels into the container's: a deadline label must always be
    set by the backend, so an image (e.g. a ``docker commit`` of a task) cannot impose one."""
    request = render(ContainerTaskSpec(kind="k", image="i", command=[]))
    assert request.labels[TIMEOUT_LABEL] == ""
    image_labels = {TIMEOUT_LABEL: "2", BACKEND_LABEL: "other"}
    assert timeout_from_labels({**image_labels, **request.labels}) is None


@pytest.mark.parametrize("key", [TIMEOUT_LABEL, BACKEND_LABEL])
def test_spec_labels_cannot_override_backend_labels(key: str) -> None:
    spec = ContainerTaskSpec(kind="k", image="i", command=[], labels={key: "999999"})
    with pytest.raises(ValueError, match="reserved by the local backend"):
        render(spec)


def test_resources_map_to_exact_limits() -> None:
    spec = ContainerTaskSpec(
        kind="k", image="i", command=[], resources=ResourceRequest(memory_gb=1.5, cpu=0.25)
    )
    request = render(spec)
    assert request.memory_bytes == 1536 * 1024 * 1024
    assert request.nano_cpus == 250_000_000
    assert memory_bytes(7.5) == int(7.5 * 1024**3)
    assert nano_cpus(2) == 2_000_000_000


@pytest.mark.parametrize("cpu", [1e-10, 1e-9, 0.001, 0.0099])
def test_a_cpu_limit_below_dockers_floor_is_refused(cpu: float) -> None:
    """Docker (the kernel's CFS quota) cannot go below 0.01 CPUs: below 0.5e-9 the quota was
    0, which Docker reads as no limit at all; a little above, the engine failed the start
    with a raw cgroup error."""
    spec = ContainerTaskSpec(kind="k", image="i", command=[], resources=ResourceRequest(cpu=cpu))
    with pytest.raises(UnsupportedCapabilityError, match=r"0\.01 CPUs") as caught:
        render(spec)
    assert caught.value.capability == "cpu"
    ok = ContainerTaskSpec(kind="k", image="i", command=[], resources=ResourceRequest(cpu=0.01))
    assert render(ok).nano_cpus == 10_000_000


def test_gpu_request_asks_for_exactly_count_devices() -> None:
    spec = ContainerTaskSpec(
        kind="k", image="i", command=[], resources=ResourceRequest(gpu="a100", count=3)
    )
    assert render(spec).gpu_count == 3
    assert render(spec, gpu_devices=4).gpu_count == 3


def test_gpu_request_above_the_hosts_devices_is_refused() -> None:
    spec = ContainerTaskSpec(
        kind="k", image="i", command=[], resources=ResourceRequest(gpu="gpu", count=2)
    )
    with pytest.raises(UnsupportedCapabilityError, match="has 1") as caught:
        render(spec, gpu_devices=1)
    assert caught.value.capability == "gpu"


def test_count_without_gpu_is_cpu_work() -> None:
    spec = ContainerTaskSpec(kind="k", image="i", command=[], resources=ResourceRequest(count=4))
    assert render(spec).gpu_count == 0


@pytest.mark.parametrize("value", ["", "0", "-5", "1.5", "ten", "١٢"])
def test_malformed_timeout_labels_are_no_limit(value: str) -> None:
    assert timeout_from_labels({TIMEOUT_LABEL: value}) is None


def test_host_path_refuses_to_leave_the_data_root() -> None:
    assert host_path("/data", "models/w.bin") == "/data/models/w.bin"
    assert host_path("/data", "/abs/x") == "/data/abs/x"
    with pytest.raises(ValueError, match="leaves the data root"):
        host_path("/data", "../etc/passwd")
    with pytest.raises(ValueError, match="leaves the data root"):
        host_path("/data", "a/../../x")
    for logical in (".", "/", "a/.."):
        with pytest.raises(ValueError, match="names the data root itself"):
            host_path("/data", logical)


REFERENCES = Path(__file__).parent / "references"
KEY = "0123456789abcdef0123456789abcdef"


def test_a_submission_key_names_the_container() -> None:
    labels = {"altar.run": "r", "altar.submission": KEY}
    request = render(ContainerTaskSpec(kind="k", image="i", command=[], labels=labels))
    assert request.name == f"altar-{KEY}"
    assert request.labels["altar.submission"] == KEY
    assert container_name({}) is None


@pytest.mark.parametrize(
    "key",
    ["", KEY.upper(), KEY[:-1], KEY + "0", "../" + KEY[3:], KEY[:31] + "\n", "$(id)" + KEY[5:]],
)
def test_a_malformed_submission_key_is_refused_not_named(key: str) -> None:
    spec = ContainerTaskSpec(kind="k", image="i", command=[], labels={"altar.submission": key})
    with pytest.raises(ValueError, match="32 lowercase hex"):
        render(spec)


@pytest.mark.parametrize(
    ("name", "spec", "options"),
    [
        (
            "create-hostile",
            ContainerTaskSpec(
                kind="score",
                image="registry.example/model:1@sha256:" + "a" * 64,
                command=HOSTILE,
                labels={
                    "job_id": "J 1",
                    "fold": "$(rm -rf /)",
                    "multi": "a\nb",
                    "altar.run": "run 2026-12-01 $(x)",
                    "altar.task": "tasks[3]",
                    "altar.attempt": "2",
                    "altar.submission": KEY,
                },
                env={"PATH_LIKE": "/a b:$HOME", "NEWLINE": "x\ny", "EMPTY": ""},
                resources=ResourceRequest(memory_gb=1.5, cpu=0.25),
                timeout_s=90,
            ),
            {},
        ),
        (
            "create-gpu-bridge-image-user",
            ContainerTaskSpec(
                kind="train",
                image="busybox:latest",
                command=["nvidia-smi"],
                resources=ResourceRequest(gpu="a100", count=2),
            ),
            {"user": None, "network_mode": "bridge", "gpu_devices": 4},
        ),
    ],
    ids=["hostile", "gpu"],
)
def test_the_create_request_matches_its_reference_file(
    reference_files: Any, name: str, spec: ContainerTaskSpec, options: dict[str, object]
) -> None:
    """The exact ``POST /containers/create`` body the engine receives, saved for review."""
    reference_files.check(REFERENCES / f"{name}.json", create_body_json(render(spec, **options)))


def test_the_create_body_is_what_the_engine_is_sent() -> None:
    body = create_body(render(ContainerTaskSpec(kind="k", image="i", command=["a", "b c"])))
    assert body["Cmd"] == ["a", "b c"]
    assert body["HostConfig"]["Mounts"] == [
        {"Target": "/mnt/volume", "Source": "/data root", "Type": "bind", "ReadOnly": False}
    ]
    assert "Memory" not in body["HostConfig"]
    assert "NanoCpus" not in body["HostConfig"]
    assert "DeviceRequests" not in body["HostConfig"]
