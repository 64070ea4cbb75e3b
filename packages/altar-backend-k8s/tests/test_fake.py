"""The seam fake answers as the API server does: each rule checked against both fakes.

``runtime`` is either the in-memory :class:`FakeKubernetesRuntime` or the real client on the
fake API server (whose answers the official client and kubectl accept), so a rule the seam
fake gets wrong shows up as a difference between the two.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from altar.backends.kubernetes import K8sApiError, K8sJobExistsError
from altar.backends.kubernetes.fake import FakeKubernetesRuntime
from altar.backends.kubernetes.sdk_runtime import ClientRuntime
from altar.backends.kubernetes.testing import FakeApiServer
from altar.execution import BackendUnavailableError, TaskState

NS = "default"


def job(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "template": {
                "metadata": {"labels": labels},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "x"}]},
            }
        },
    }


class Both:
    """One runtime and the controls of the fake behind it."""

    def __init__(self, runtime: Any, finish: Any, drop: Any, collect: Any, log: Any) -> None:
        self.runtime, self.finish, self.drop, self.collect = runtime, finish, drop, collect
        self.write_log = log


@pytest.fixture(params=["seam", "apiserver"])
def both(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Both]:
    if request.param == "seam":
        fake = FakeKubernetesRuntime()
        yield Both(
            fake,
            lambda n, code=0: fake.finish(n, exit_code=code),
            fake.drop_created_answers,
            fake.collect_garbage,
            fake.write_log,
        )
        return
    with FakeApiServer(deletion_delay_s=None) as server:
        runtime = ClientRuntime(kubeconfig=str(server.write_kubeconfig(tmp_path / "kc")))
        yield Both(
            runtime,
            lambda n, code=0: server.finish_job(n, exit_code=code),
            server.drop_created_answers,
            server.collect_garbage,
            server.write_log,
        )
        runtime.close()


def test_a_taken_name_is_a_conflict_and_uids_are_fresh(both: Both) -> None:
    first = both.runtime.create_job(job("a"), namespace=NS)
    assert first.uid
    assert first.state is TaskState.RUNNING  # its pod is created and active at once
    with pytest.raises(K8sJobExistsError) as taken:
        both.runtime.create_job(job("a"), namespace=NS)
    assert not taken.value.being_deleted
    assert taken.value.status == 409
    assert both.runtime.create_job(job("b"), namespace=NS).uid != first.uid


def test_a_foreground_delete_holds_the_name_until_collected(both: Both) -> None:
    created = both.runtime.create_job(job("a"), namespace=NS)
    assert both.runtime.delete_job(
        "a", namespace=NS, uid=created.uid, propagation_policy="Foreground"
    )
    held = both.runtime.read_job("a", namespace=NS)
    assert held is not None
    assert held.deleting
    with pytest.raises(K8sJobExistsError) as taken:
        both.runtime.create_job(job("a"), namespace=NS)
    assert taken.value.being_deleted
    both.collect()
    assert both.runtime.read_job("a", namespace=NS) is None
    assert both.runtime.create_job(job("a"), namespace=NS).uid != created.uid


def test_a_uid_precondition_spares_a_newer_job(both: Both) -> None:
    old = both.runtime.create_job(job("a"), namespace=NS)
    assert both.runtime.delete_job("a", namespace=NS, uid=old.uid)
    new = both.runtime.create_job(job("a"), namespace=NS)
    assert not both.runtime.delete_job("a", namespace=NS, uid=old.uid)
    found = both.runtime.read_job("a", namespace=NS)
    assert found is not None
    assert found.uid == new.uid
    assert not both.runtime.delete_job("gone", namespace=NS)


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=x", ["a"]),
        ("app in (x,y)", ["a", "b"]),
        ("app!=x", ["b", "c"]),
        ("!app", ["c"]),
        ("app,tier=web", ["b"]),
        (None, ["a", "b", "c"]),
    ],
)
def test_label_selectors(both: Both, selector: str | None, expected: list[str]) -> None:
    both.runtime.create_job(job("a", app="x"), namespace=NS)
    both.runtime.create_job(job("b", app="y", tier="web"), namespace=NS)
    both.runtime.create_job(job("c"), namespace=NS)
    listed = both.runtime.list_jobs(namespace=NS, label_selector=selector)
    assert [j.name for j in listed] == expected
    pods = both.runtime.list_pods(namespace=NS, label_selector=selector)
    assert sorted(p.job_name for p in pods) == expected


def test_pods_carry_the_job_controller_labels(both: Both) -> None:
    created = both.runtime.create_job(job("a", app="x"), namespace=NS)
    [pod] = both.runtime.list_pods(namespace=NS, label_selector=f"controller-uid={created.uid}")
    assert (pod.job_uid, pod.job_name) == (created.uid, "a")


def test_a_label_the_api_refuses_is_a_422(both: Both) -> None:
    with pytest.raises(K8sApiError) as refused:
        both.runtime.create_job(job("a", run="has spaces $(x)"), namespace=NS)
    assert refused.value.status == 422
    assert both.runtime.list_jobs(namespace=NS) == []


def test_a_dropped_answer_leaves_the_job_created(both: Both) -> None:
    both.drop()
    with pytest.raises(BackendUnavailableError):
        both.runtime.create_job(job("a"), namespace=NS)
    stored = both.runtime.read_job("a", namespace=NS)
    assert stored is not None
    assert stored.uid
    # the next create is answered again
    assert both.runtime.create_job(job("b"), namespace=NS).name == "b"


def test_finishing_sets_the_conditions_kubernetes_sets(both: Both) -> None:
    both.runtime.create_job(job("ok"), namespace=NS)
    both.runtime.create_job(job("bad"), namespace=NS)
    both.finish("ok")
    both.finish("bad", 2)
    ok = both.runtime.read_job("ok", namespace=NS)
    bad = both.runtime.read_job("bad", namespace=NS)
    assert ok is not None
    assert bad is not None
    assert (ok.state, ok.replaceable) == (TaskState.SUCCEEDED, True)
    assert (bad.state, bad.replaceable) == (TaskState.FAILED, True)
    assert {c.type for c in ok.conditions} == {"SuccessCriteriaMet", "Complete"}
    assert {c.type for c in bad.conditions} == {"FailureTarget", "Failed"}
    [pod] = both.runtime.list_pods(namespace=NS, label_selector="job-name=bad")
    assert [(e.name, e.exit_code) for e in pod.container_exits] == [("main", 2)]


@pytest.mark.parametrize(("lines", "expected"), [(2, "two\nthree\n"), (10, "one\ntwo\nthree\n")])
def test_log_tails(both: Both, lines: int, expected: str) -> None:
    both.runtime.create_job(job("a"), namespace=NS)
    both.write_log("a", "one\ntwo\nthree\n")
    [pod] = both.runtime.list_pods(namespace=NS)
    tail = both.runtime.read_log_tail(pod.name, namespace=NS, container="main", lines=lines)
    assert tail == expected
