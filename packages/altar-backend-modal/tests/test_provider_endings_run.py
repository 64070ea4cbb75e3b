"""End to end (issue 22): ``run_plan`` on the Modal backend against the in-memory Modal.

A sandbox whose worker is preempted or lost is rerun without a retry charged
(``max_retries = 0`` still succeeds), and RESOURCE_EXHAUSTED on create holds the run back
until Modal takes sandboxes again, with no task failed or charged.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from altar.backends.modal import ModalExecutionBackend
from altar.backends.modal.fake import FakeModalRuntime
from altar.execution import ContainerTaskSpec, RunEvent
from altar.execution.plans.plan import Plan, PlanTask
from altar.execution.run import holding
from altar.execution.run.runner import run_plan

pytestmark = pytest.mark.asyncio
POLLS = {"poll_interval_s": 0.01, "max_poll_interval_s": 0.05}


@pytest.fixture
def quick_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pauses of a few milliseconds, so a held run finishes in test time."""
    monkeypatch.setattr(holding, "PAUSE_S", 0.02)
    monkeypatch.setattr(holding, "LIMIT_PAUSE_S", 0.02)


def plan(*folds: str) -> Plan:
    tasks = [
        PlanTask(
            f"f{fold}",
            ContainerTaskSpec(
                kind="score",
                image="busybox:1.36",
                command=["sh", "-c", "echo hi"],
                labels={"job_id": "J", "fold": fold},
            ),
        )
        for fold in folds
    ]
    return Plan("modal", {}, tasks, max_retries=0)


@asynccontextmanager
async def modal_plays(
    fake: FakeModalRuntime, act: Callable[[str, int], None]
) -> AsyncIterator[dict[str, int]]:
    """Call ``act(sandbox id, attempt number of its task)`` once for each new sandbox."""
    attempts: dict[str, int] = {}
    seen: set[str] = set()

    async def drive() -> None:
        while True:
            for sandbox_id in fake.running():
                if sandbox_id in seen:
                    continue
                seen.add(sandbox_id)
                fold = fake.sandboxes[sandbox_id].request.tags["fold"]
                attempts[fold] = attempts.get(fold, 0) + 1
                act(sandbox_id, attempts[fold])
            await asyncio.sleep(0.005)

    driver = asyncio.ensure_future(drive())
    try:
        yield attempts
    finally:
        driver.cancel()


async def test_a_sandbox_whose_worker_is_preempted_then_lost_succeeds_with_no_retries(
    tmp_path: Path, quick_holds: None
) -> None:
    fake = FakeModalRuntime()

    def act(sandbox_id: str, attempt: int) -> None:
        if attempt == 1:
            fake.preempt(sandbox_id)
        elif attempt == 2:
            fake.lose_worker(sandbox_id)
        else:
            fake.finish(sandbox_id, 0)

    events: list[RunEvent] = []
    async with modal_plays(fake, act) as attempts:
        run = run_plan(
            plan("0", "1"),
            ModalExecutionBackend(runtime=fake),
            run_dir=tmp_path / "run",
            max_retries=0,
            on_event=events.append,
            **POLLS,
        )
        result = await asyncio.wait_for(run, 120)
    assert [(t.status, t.attempts) for t in result.tasks] == [("succeeded", 3)] * 2
    assert all(t.provider_endings == {"node_lost": 1, "preempted": 1} for t in result.tasks)
    assert attempts == {"0": 3, "1": 3}
    assert all("no retry used" in e.message for e in events if e.kind == "retry")


async def test_resource_exhausted_holds_the_run_and_it_completes_once_modal_takes_work(
    tmp_path: Path, quick_holds: None
) -> None:
    fake = FakeModalRuntime()
    fake.exhaust_creates(3, retry_after_s=0.05)
    events: list[RunEvent] = []
    async with modal_plays(fake, lambda sandbox_id, _: fake.finish(sandbox_id, 0)):
        run = run_plan(
            plan("0", "1", "2"),
            ModalExecutionBackend(runtime=fake),
            run_dir=tmp_path / "run",
            max_retries=0,
            on_event=events.append,
            **POLLS,
        )
        result = await asyncio.wait_for(run, 120)
    assert [(t.status, t.attempts) for t in result.tasks] == [("succeeded", 1)] * 3
    held = [e.message for e in events if e.kind == "held"]
    assert len(held) == 1
    assert "RESOURCE_EXHAUSTED" in held[0]
    assert not [e for e in events if e.kind in ("retry", "failed", "backend_unavailable")]
