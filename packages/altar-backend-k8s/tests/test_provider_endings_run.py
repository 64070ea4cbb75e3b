"""End to end (issue 22): ``run_plan`` on the Kubernetes backend against the fake API server.

A preempted or evicted task is rerun without a retry charged (``max_retries = 0`` still
succeeds), and a full namespace quota holds the run back until the fake frees it, with no
task failed or charged. The fake plays the cluster: a driver task acts on each new Job the
way the scheduler, the kubelet and the quota controller would.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from altar.backends.kubernetes import KubernetesExecutionBackend
from altar.backends.kubernetes.testing import FakeApiServer
from altar.execution import ResourceRequest, RunEvent
from altar.execution.plans.plan import Plan, PlanTask
from altar.execution.run import holding
from altar.execution.run.runner import run_plan

from .specs import spec

Make = Callable[..., KubernetesExecutionBackend]
pytestmark = pytest.mark.asyncio
POLLS = {"poll_interval_s": 0.01, "max_poll_interval_s": 0.05}


@pytest.fixture
def quick_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pauses of a few milliseconds, so a held run finishes in test time."""
    monkeypatch.setattr(holding, "PAUSE_S", 0.02)
    monkeypatch.setattr(holding, "LIMIT_PAUSE_S", 0.02)


def plan(*folds: str, cpu: float | None = None) -> Plan:
    resources = ResourceRequest(cpu=cpu) if cpu is not None else ResourceRequest()
    tasks = [
        PlanTask(f"f{fold}", spec(labels={"job_id": "J", "fold": fold}, resources=resources))
        for fold in folds
    ]
    return Plan("kubernetes", {}, tasks, max_retries=0)


@asynccontextmanager
async def cluster(
    fake: FakeApiServer, act: Callable[[str, int], None]
) -> AsyncIterator[dict[str, int]]:
    """Call ``act(job name, attempt number)`` once for every new Job attempt (uid) it sees;
    attempts are counted per task (its ``fold`` label: each attempt's Job has its own name)."""
    attempts: dict[str, int] = {}
    seen: set[str] = set()

    async def drive() -> None:
        while True:
            for job in fake.jobs():
                uid = job["metadata"]["uid"]
                if uid in seen or not fake.pods_of(uid):
                    continue  # acted on already, or waiting for its pod (a quota holds it)
                seen.add(uid)
                name, fold = job["metadata"]["name"], job["metadata"]["labels"]["fold"]
                attempts[fold] = attempts.get(fold, 0) + 1
                act(name, attempts[fold])
            await asyncio.sleep(0.005)

    driver = asyncio.ensure_future(drive())
    try:
        yield attempts
    finally:
        driver.cancel()


async def test_a_task_preempted_then_evicted_succeeds_with_no_retries_allowed(
    make_backend: Make, fake_apiserver: FakeApiServer, tmp_path: Path, quick_holds: None
) -> None:
    def act(name: str, attempt: int) -> None:
        if attempt == 1:
            fake_apiserver.preempt(name)
        elif attempt == 2:
            fake_apiserver.evict(name)
        else:
            fake_apiserver.finish_job(name)

    events: list[RunEvent] = []
    async with cluster(fake_apiserver, act) as attempts:
        result = await run_plan(
            plan("0", "1"),
            make_backend(),
            run_dir=tmp_path / "run",
            max_retries=0,
            on_event=events.append,
            **POLLS,
        )
    assert [(t.status, t.attempts) for t in result.tasks] == [("succeeded", 3)] * 2
    assert all(t.provider_endings == {"evicted": 1, "preempted": 1} for t in result.tasks)
    assert sorted(attempts.values()) == [3, 3]
    retries = [e.message for e in events if e.kind == "retry"]
    assert len(retries) == 4
    assert all("no retry used" in m for m in retries)


async def test_a_full_quota_holds_the_run_and_it_completes_once_the_quota_frees(
    make_backend: Make, fake_apiserver: FakeApiServer, tmp_path: Path, quick_holds: None
) -> None:
    fake_apiserver.set_quota(
        "compute-quota", {"requests.cpu": "4"}, used_elsewhere={"requests.cpu": "4"}
    )
    events: list[RunEvent] = []

    def on_event(event: RunEvent) -> None:
        events.append(event)
        if event.kind == "held":  # the others' work ends: the quota frees
            fake_apiserver.set_quota("compute-quota", {"requests.cpu": "4"})

    async with cluster(fake_apiserver, lambda name, _: fake_apiserver.finish_job(name)):
        run = run_plan(
            plan("0", "1", "2", cpu=2),
            make_backend(),
            run_dir=tmp_path / "run",
            max_retries=0,
            on_event=on_event,
            **POLLS,
        )
        # a backend that let the quota refuse only the pods would wait here for ever
        result = await asyncio.wait_for(run, 120)
    assert [(t.status, t.attempts) for t in result.tasks] == [("succeeded", 1)] * 3
    held = [e.message for e in events if e.kind == "held"]
    assert len(held) == 1
    assert "ResourceQuota compute-quota" in held[0]
    assert not [e for e in events if e.kind in ("retry", "failed")]
