from __future__ import annotations

from pathlib import Path

import pytest
from altar.backends.kubernetes import KubernetesExecutionBackend
from altar.backends.kubernetes.sdk_runtime import ClientRuntime


def test_entry_point_and_class_attributes() -> None:
    from importlib.metadata import entry_points

    [ep] = [e for e in entry_points(group="altar.execution_backends") if e.name == "kubernetes"]
    assert ep.load() is KubernetesExecutionBackend
    assert KubernetesExecutionBackend.name == "kubernetes"
    assert KubernetesExecutionBackend.input_digest_verification == "task"


def test_options_are_checked(kubeconfig: Path) -> None:
    runtime = ClientRuntime(kubeconfig=str(kubeconfig))
    with pytest.raises(ValueError, match="delete_propagation"):
        KubernetesExecutionBackend(runtime=runtime, delete_propagation="Orphan")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="job_ttl_seconds_after_finished"):
        KubernetesExecutionBackend(runtime=runtime, job_ttl_seconds_after_finished=-5)
