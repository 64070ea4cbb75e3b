"""Fixtures for the Kubernetes backend tests: a fake API server and a backend wired to it."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from altar.backends.kubernetes import KubernetesExecutionBackend
from altar.backends.kubernetes.fake import FakeKubernetesRuntime
from altar.backends.kubernetes.sdk_runtime import ClientRuntime
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


@pytest.fixture(scope="session")
def kubectl_binary(service_env: dict[str, str]) -> str:
    """The real kubectl: the pinned one ``scripts/services up`` installs, else one on PATH.

    Absent, the test is skipped, or fails under ``ALTAR_REQUIRE_SERVICES=1`` (as the root
    conftest treats every real provider).
    """
    path = service_env.get("ALTAR_TEST_KUBECTL") or shutil.which("kubectl")
    if not path or not os.access(path, os.X_OK):
        message = "kubectl is not installed; run `scripts/services up` (it installs one)"
        if os.environ.get("ALTAR_REQUIRE_SERVICES") == "1":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return path


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

    def make(
        cls: type[KubernetesExecutionBackend] = KubernetesExecutionBackend, **options: Any
    ) -> KubernetesExecutionBackend:
        options.setdefault("runtime", ClientRuntime(kubeconfig=str(kubeconfig)))
        options.setdefault("recreate_waits_s", (0.0, 0.05, 0.1, 0.2, 0.4))
        options.setdefault("pvc_name", "altar-data")
        made.append(cls(**options))
        return made[-1]

    yield make
    for backend in made:
        backend.close()


@pytest.fixture
def backend(make_backend: Callable[..., KubernetesExecutionBackend]) -> KubernetesExecutionBackend:
    return make_backend()


# --- both fakes behind one face, for rules that must hold against each ----------------------


@dataclass
class Cluster:
    """A backend wired to one of the two fakes, and the few controls tests need."""

    kind: str
    backend: KubernetesExecutionBackend
    finish: Callable[..., None]  # (job name, exit_code=0)
    drop_created_answers: Callable[[], None]
    jobs: Callable[[], list[tuple[str, str]]]  # (name, uid) of every Job in the namespace
    list_calls: Callable[[], int]  # Job list requests so far
    collect_garbage: Callable[[], None]
    new_backend: Callable[..., KubernetesExecutionBackend]  # another process's backend (cls=...)


@pytest.fixture
def seam() -> FakeKubernetesRuntime:
    return FakeKubernetesRuntime()


@pytest.fixture
def make_seam_backend(
    seam: FakeKubernetesRuntime,
) -> Callable[..., KubernetesExecutionBackend]:
    def make(
        cls: type[KubernetesExecutionBackend] = KubernetesExecutionBackend, **options: Any
    ) -> KubernetesExecutionBackend:
        options.setdefault("runtime", seam)
        options.setdefault("recreate_waits_s", (0.0, 0.0, 0.0))
        options.setdefault("pvc_name", "altar-data")
        return cls(**options)

    return make


@pytest.fixture(params=["seam", "apiserver"])
def cluster(request: pytest.FixtureRequest) -> Cluster:
    if request.param == "seam":
        fake: FakeKubernetesRuntime = request.getfixturevalue("seam")
        make = request.getfixturevalue("make_seam_backend")
        return Cluster(
            kind="seam",
            backend=make(),
            finish=lambda name, exit_code=0: fake.finish(name, exit_code=exit_code),
            drop_created_answers=fake.drop_created_answers,
            jobs=lambda: [(j.name, j.uid or "") for j in fake.jobs.values()],
            list_calls=lambda: fake.calls["list_jobs"],
            collect_garbage=fake.collect_garbage,
            new_backend=make,
        )
    server: FakeApiServer = request.getfixturevalue("fake_apiserver")
    make_http = request.getfixturevalue("make_backend")
    backend = make_http()
    return Cluster(
        kind="apiserver",
        backend=backend,
        finish=lambda name, exit_code=0: server.finish_job(name, exit_code=exit_code),
        drop_created_answers=server.drop_created_answers,
        jobs=lambda: [(j["metadata"]["name"], j["metadata"]["uid"]) for j in server.jobs()],
        list_calls=lambda: sum(
            1 for r in server.requests if r.method == "GET" and r.path.endswith("/jobs")
        ),
        collect_garbage=server.collect_garbage,
        new_backend=make_http,
    )
