"""Polling many sandboxes: one listing of the running ones, a wait per sandbox it misses."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncGenerator, Mapping

import pytest
from altar.backends.modal import ModalExecutionBackend
from altar.backends.modal.fake import FakeModalRuntime
from altar.backends.modal.runtime import ListedSandbox
from altar.execution import (
    BackendUnavailableError,
    ContainerTaskSpec,
    TaskHandle,
    TaskState,
)


def _spec(run: str = "R", task: str = "t") -> ContainerTaskSpec:
    return ContainerTaskSpec(
        kind="score",
        image="busybox:1.36",
        command=["true"],
        labels={"altar.run": run, "altar.task": task},
    )


async def _submit(backend: ModalExecutionBackend, count: int, run: str = "R") -> list[TaskHandle]:
    return [await backend.submit(_spec(run, f"t{i}")) for i in range(count)]


def _rpcs(fake: FakeModalRuntime) -> Counter[str]:
    counts = Counter(fake.rpcs)
    fake.rpcs.clear()
    return counts


@pytest.mark.asyncio
async def test_200_running_sandboxes_take_at_most_three_requests() -> None:
    fake = FakeModalRuntime()
    backend = ModalExecutionBackend(runtime=fake)
    handles = await _submit(backend, 200)
    _rpcs(fake)
    statuses = await backend.poll(handles)
    assert [s.state for s in statuses] == [TaskState.RUNNING] * 200
    assert [s.handle for s in statuses] == handles
    counts = _rpcs(fake)
    assert counts == Counter({"SandboxList": 2})  # 100 a page; stops once all 200 are seen


@pytest.mark.asyncio
async def test_finished_sandboxes_are_asked_about_by_id_after_the_listing() -> None:
    fake = FakeModalRuntime()
    backend = ModalExecutionBackend(runtime=fake)
    handles = await _submit(backend, 30)
    for i, handle in enumerate(handles[:5]):
        fake.finish(handle.external_id, i)
    fake.oom_kill(handles[5].external_id)
    missing = TaskHandle("modal", "sb-" + "M" * 22, {"altar.run": "R"})
    _rpcs(fake)
    statuses = await backend.poll([*handles, missing])
    assert [s.state for s in statuses[:6]] == [TaskState.SUCCEEDED] + [TaskState.FAILED] * 5
    assert [s.failure.reason for s in statuses[1:6] if s.failure] == [
        "exit_1",
        "exit_2",
        "exit_3",
        "exit_4",
        "oom_killed",
    ]
    assert [s.state for s in statuses[6:30]] == [TaskState.RUNNING] * 24
    assert statuses[30].failure is not None
    assert statuses[30].failure.reason == "container_missing"
    # one page and the empty page that ends the listing, then one wait per sandbox it missed
    assert _rpcs(fake) == Counter({"SandboxList": 2, "SandboxWait": 7})


@pytest.mark.asyncio
async def test_one_runs_handles_list_only_that_runs_sandboxes() -> None:
    fake = FakeModalRuntime(list_page_size=10)
    backend = ModalExecutionBackend(runtime=fake)
    await _submit(backend, 45, run="other")
    mine = await _submit(backend, 9, run="mine")
    _rpcs(fake)
    assert {s.state for s in await backend.poll(mine)} == {TaskState.RUNNING}
    assert _rpcs(fake) == Counter({"SandboxList": 1})
    # handles of several runs: the whole app is listed (54 running, 10 a page)
    mixed = [*mine, *(await _submit(backend, 1, run="third"))]
    _rpcs(fake)
    assert {s.state for s in await backend.poll(mixed)} == {TaskState.RUNNING}
    assert _rpcs(fake)["SandboxList"] == 1  # the newest ten are exactly these


@pytest.mark.asyncio
async def test_a_small_poll_asks_by_id_and_duplicates_share_one_answer() -> None:
    fake = FakeModalRuntime()
    backend = ModalExecutionBackend(runtime=fake)
    handles = await _submit(backend, 3)
    _rpcs(fake)
    statuses = await backend.poll([*handles, handles[0]])
    assert len(statuses) == 4
    assert statuses[3].handle == handles[0]
    assert _rpcs(fake) == Counter({"SandboxWait": 3})


@pytest.mark.asyncio
async def test_an_unreachable_listing_is_transient() -> None:
    fake = FakeModalRuntime()
    backend = ModalExecutionBackend(runtime=fake)
    handles = await _submit(backend, 10)
    fake.unreachable = True
    with pytest.raises(BackendUnavailableError):
        await backend.poll(handles)


@pytest.mark.asyncio
async def test_a_sandbox_past_its_deadline_is_not_listed_and_reads_as_timeout() -> None:
    now = [1_800_000_000.0]
    fake = FakeModalRuntime(clock=lambda: now[0])
    backend = ModalExecutionBackend(runtime=fake)
    handles = [
        await backend.submit(
            ContainerTaskSpec(kind="k", image="busybox:1.36", command=["true"], timeout_s=60 + i)
        )
        for i in range(10)
    ]
    now[0] += 66
    statuses = await backend.poll(handles)
    reasons = [s.failure.reason if s.failure else s.state.value for s in statuses]
    assert reasons[:6] == ["timeout"] * 6
    assert {s.state for s in statuses[6:]} == {TaskState.RUNNING}


@pytest.mark.asyncio
async def test_an_outage_after_the_first_page_is_transient_never_missing() -> None:
    fake = FakeModalRuntime(list_page_size=10)
    backend = ModalExecutionBackend(runtime=fake)
    handles = await _submit(backend, 25)
    listing = fake.list_running

    async def cut_after_one_page(
        app_name: str, tags: Mapping[str, str]
    ) -> AsyncGenerator[ListedSandbox, None]:
        async for entry in listing(app_name, tags):
            yield entry
            if fake.rpcs.count("SandboxList") == 1:
                fake.unreachable = True  # the next page's request fails

    fake.list_running = cut_after_one_page  # type: ignore[method-assign]
    fake.rpcs.clear()
    with pytest.raises(BackendUnavailableError):
        await backend.poll(handles)
    assert fake.rpcs == ["SandboxList"]  # one page came back, the second failed
    fake.unreachable = False
    fake.list_running = listing  # type: ignore[method-assign]
    assert {s.state for s in await backend.poll(handles)} == {TaskState.RUNNING}
