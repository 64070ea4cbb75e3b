"""Specs, plans and a stand-in for a killed runner, shared by the runner's tests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from altar.execution import ContainerTaskSpec, ExecutionBackend
from altar.execution.plans.plan import Plan, PlanTask
from altar.execution.run.runner import RunEvent, run_plan
from altar.execution.state.journal import JOURNAL_NAME, LOG_NAME

#: Poll at once and never back off: the fake provider advances one step per poll.
FAST = {"poll_interval_s": 0.0, "max_poll_interval_s": 0.0}


def spec(task_id: str, kind: str = "fold", **changes: Any) -> ContainerTaskSpec:
    """A small spec labelled with its task id (the fake provider keys its tasks by it)."""
    values: dict[str, Any] = {
        "kind": kind,
        "image": "busybox:latest",
        "command": ["sh", "-c", f"echo {task_id}"],
        "labels": {"task": task_id, "job_id": "J"},
    }
    values.update(changes)
    return ContainerTaskSpec(**values)


def simple_plan(*keys: str) -> Plan:
    """Independent tasks, one per key."""
    return Plan("fake", {}, [PlanTask(k, spec(k)) for k in keys])


def journal_bytes(run_dir: Path) -> tuple[bytes, bytes]:
    """The journal's snapshot and log, byte for byte."""
    return (run_dir / JOURNAL_NAME).read_bytes(), (run_dir / LOG_NAME).read_bytes()


async def run_until(
    plan: Plan,
    backend: ExecutionBackend,
    run_dir: Path,
    stop_when: Callable[[RunEvent], bool],
    poll_interval_s: float = 0.0,
) -> None:
    """Start a run and cancel its task (a crash, as far as the runner can tell) on an event."""
    task: asyncio.Future[Any] | None = None

    def on_event(event: RunEvent) -> None:
        if stop_when(event) and task is not None:
            task.cancel()

    task = asyncio.ensure_future(
        run_plan(plan, backend, run_dir=run_dir, on_event=on_event, poll_interval_s=poll_interval_s)
    )
    with pytest.raises(asyncio.CancelledError):
        await task
