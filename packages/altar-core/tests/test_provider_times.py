"""TIME comes from the provider's own start/finish times when the backend reports them."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from altar.execution import TaskState, TaskStatus
from altar.execution.plans.plan import parse_plan
from altar.execution.run.runner import run_plan, run_status

STARTED = 1_700_000_000.0


def plan():
    return parse_plan(
        {"tasks": [{"kind": "k", "image": "busybox", "command": ["true"]}]}, source="plan.toml"
    )


def test_a_backend_that_reports_times_gives_the_tasks_own_duration(
    fake_backend_class, provider, tmp_path
):
    class Timed(fake_backend_class):
        async def poll(self, handles):
            statuses = await super().poll(handles)
            return [
                replace(
                    s,
                    started_at=STARTED if s.state is not TaskState.PENDING else None,
                    finished_at=STARTED + 4.0 if s.state.is_terminal else None,
                )
                for s in statuses
            ]

    result = asyncio.run(
        run_plan(plan(), Timed(provider=provider), run_dir=tmp_path / "r", poll_interval_s=0.0)
    )
    assert result.tasks[0].duration_s == 4.0
    assert asyncio.run(run_status(tmp_path / "r")).tasks[0].duration_s == 4.0


def test_a_0_3_0_status_has_no_times_and_the_run_measures_them(
    fake_backend_class, provider, tmp_path
):
    status = TaskStatus(handle=None, state=TaskState.RUNNING)  # type: ignore[arg-type]
    assert (status.started_at, status.finished_at) == (None, None)
    result = asyncio.run(
        run_plan(
            plan(),
            fake_backend_class(provider=provider),
            run_dir=tmp_path / "r",
            poll_interval_s=0.0,
        )
    )
    assert result.tasks[0].duration_s is not None
    assert result.tasks[0].duration_s < 60
