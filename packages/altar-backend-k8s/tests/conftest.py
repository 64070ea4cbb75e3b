"""Fixtures for the Kubernetes backend tests: a fake API server and a backend wired to it."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from altar.backends.kubernetes import KubernetesExecutionBackend
from altar.backends.kubernetes.client import ClientRuntime
from altar.backends.kubernetes.testing import FakeApiServer


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "kubernetes_live: runs against a real Kubernetes cluster (ALTAR_K8S_LIVE=1 and KUBECONFIG)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("ALTAR_K8S_LIVE") == "1":
        return
    skip = pytest.mark.skip(reason="needs a real cluster: set ALTAR_K8S_LIVE=1 and KUBECONFIG")
    for item in items:
        if "kubernetes_live" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def fake_apiserver() -> Iterator[FakeApiServer]:
    with FakeApiServer() as fake:
        yield fake


@pytest.fixture
def kubeconfig(fake_apiserver: FakeApiServer, tmp_path: Path) -> Path:
    return fake_apiserver.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def runtime(kubeconfig: Path) -> Iterator[ClientRuntime]:
    runtime = ClientRuntime(kubeconfig=str(kubeconfig), sleep=lambda _: None)
    yield runtime
    runtime.close()


@pytest.fixture
def make_backend(
    kubeconfig: Path,
) -> Iterator[Callable[..., KubernetesExecutionBackend]]:
    made: list[KubernetesExecutionBackend] = []

    def make(**options: Any) -> KubernetesExecutionBackend:
        options.setdefault("runtime", ClientRuntime(kubeconfig=str(kubeconfig)))
        options.setdefault("recreate_waits_s", (0.0, 0.05, 0.1, 0.2, 0.4))
        options.setdefault("pvc_name", "altar-data")
        made.append(KubernetesExecutionBackend(**options))
        return made[-1]

    yield make
    for backend in made:
        backend.close()


@pytest.fixture
def backend(make_backend: Callable[..., KubernetesExecutionBackend]) -> KubernetesExecutionBackend:
    return make_backend()
