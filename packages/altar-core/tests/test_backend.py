"""The ExecutionBackend base class: defaults, await_completion, poll_sequentially."""

from __future__ import annotations

import pytest
from altar.execution import (
    Capacity,
    ContainerTaskSpec,
    ExecutionBackend,
    PathResolver,
    TaskHandle,
    TaskState,
    TaskStatus,
)
from altar.execution.backend import poll_sequentially

SPEC = ContainerTaskSpec(kind="k", image="busybox", command=["true"], labels={"task": "a"})


class Minimal(ExecutionBackend):
    name = "minimal"
    input_digest_verification = "staging"

    async def submit(self, spec):
        return TaskHandle(self.name, "1", dict(spec.labels))

    async def poll(self, handles):
        return [TaskStatus(h, TaskState.RUNNING) for h in handles]


def test_only_submit_and_poll_are_abstract():
    assert ExecutionBackend.__abstractmethods__ == {"submit", "poll"}
    with pytest.raises(TypeError):
        ExecutionBackend()  # type: ignore[abstract]


@pytest.mark.asyncio
async def test_defaults():
    backend = Minimal()
    handle = await backend.submit(SPEC)
    assert await backend.capacity() == Capacity()
    assert await backend.stage_inputs([]) is None
    assert await backend.collect_outputs([]) is None
    assert await backend.cancel(handle) is None
    assert await backend.cleanup([handle]) is None
    assert await backend.failure_detail(handle) is None
    assert await backend.recover([], banned=set()) == []
    assert isinstance(backend.path_resolver(), PathResolver)
    assert backend.path_resolver().resolve("a/b") == "a/b"


@pytest.mark.asyncio
async def test_await_completion_polls_open_handles_until_terminal(provider, fake_backend_class):
    provider.duration = 3
    backend = fake_backend_class(provider=provider)
    first = await backend.submit(SPEC)
    provider.script = {"b": ["exit_2"]}
    second = await backend.submit(
        ContainerTaskSpec(kind="k", image="i", command=[], labels={"task": "b"})
    )
    statuses = await backend.await_completion([second, first], interval_s=0.0)
    assert [s.state for s in statuses] == [TaskState.FAILED, TaskState.SUCCEEDED]
    assert statuses[0].failure.reason == "exit_2"
    assert all(len(call) <= 2 for call in provider.poll_calls)


@pytest.mark.asyncio
async def test_await_completion_times_out():
    backend = Minimal()
    handle = await backend.submit(SPEC)
    with pytest.raises(TimeoutError, match=r"1 of 1 task\(s\) still open after 0.05 s"):
        await backend.await_completion([handle], interval_s=0.01, timeout_s=0.05)


@pytest.mark.asyncio
async def test_poll_sequentially_keeps_order():
    handles = [TaskHandle("x", str(i)) for i in range(3)]
    seen = []

    async def poll_one(handle):
        seen.append(handle.external_id)
        return TaskStatus(handle, TaskState.PENDING)

    statuses = await poll_sequentially(handles, poll_one)
    assert [s.handle.external_id for s in statuses] == ["0", "1", "2"] == seen
