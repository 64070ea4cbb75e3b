"""staging_progress events: a backend's transfer reports, from its threads, throttled."""

from __future__ import annotations

import itertools

import pytest
from altar.execution import ContainerTaskSpec, Transfer
from altar.execution.plans.plan import Plan, PlanTask
from altar.execution.run.runner import RunEvent, StagingError, run_plan
from altar.execution.run.staging_progress import STAGING_PROGRESS_INTERVAL_S
from altar.execution.transfer_progress import current_callback

MiB = 1 << 20
FAST = {"poll_interval_s": 0.0, "max_poll_interval_s": 0.0}


def plan_with_inputs(*inputs: Transfer) -> Plan:
    spec = ContainerTaskSpec(
        kind="align",
        image="busybox:latest",
        command=["true"],
        labels={"task": "align"},
        inputs=list(inputs),
    )
    return Plan("fake", {}, [PlanTask("align", spec)])


def local_input(tmp_path, name: str, size: int) -> Transfer:
    path = tmp_path / name
    with open(path, "wb") as handle:
        handle.truncate(size)  # sparse: the runner only stats it
    return Transfer(str(path), f"ref/{name}")


async def run(tmp_path, backend, plan, **options) -> list[RunEvent]:
    events: list[RunEvent] = []
    await run_plan(
        plan, backend, run_dir=tmp_path / "run", on_event=events.append, **FAST, **options
    )
    return events


@pytest.mark.asyncio
async def test_reports_from_a_staging_thread_become_throttled_events(
    tmp_path, provider, fake_backend_class
):
    genome = local_input(tmp_path, "genome.fa", 6 * MiB)
    index = local_input(tmp_path, "genome.idx", 4 * MiB)
    provider.stage_bytes = {genome.logical_path: 6 * MiB, index.logical_path: 4 * MiB}
    provider.stage_chunks, provider.stage_step_s = 30, 0.02  # 60 reports over about 1.2 s
    events = await run(
        tmp_path, fake_backend_class(provider=provider), plan_with_inputs(genome, index)
    )

    kinds = [event.kind for event in events]
    first, last = (
        kinds.index("staging_progress"),
        len(kinds) - kinds[::-1].index("staging_progress"),
    )
    assert kinds.index("staging") < first
    assert last <= kinds.index("staged")
    progress = [event for event in events if event.kind == "staging_progress"]
    assert 3 <= len(progress) <= 8, [e.message for e in progress]  # not one per report
    # the local sizes are known before the first byte moves
    assert {event.bytes_total for event in progress} == {10 * MiB}
    done = [event.bytes_done for event in progress]
    assert all(a <= b for a, b in itertools.pairwise(done))
    assert any(0 < d < 6 * MiB for d in done)  # shown while the first file was copied
    # its completion is shown at once (a loop slower than the reports may fold in a few of the
    # next file's reports, 20 ms apart)
    assert any(6 * MiB <= d <= 6 * MiB + 3 * (4 * MiB // 30) for d in done), done
    assert progress[-1].bytes_done == 10 * MiB
    assert progress[-1].message == "staging 10.0 MiB of 10.0 MiB (100%)"
    for before, event in itertools.pairwise(progress):
        completing = 6 * MiB <= event.bytes_done <= 6 * MiB + 3 * (4 * MiB // 30)
        if not completing and event.bytes_done != 10 * MiB:  # others wait out the interval
            assert event.elapsed_s - before.elapsed_s >= STAGING_PROGRESS_INTERVAL_S - 0.05


@pytest.mark.asyncio
async def test_the_total_is_unknown_until_every_size_is(tmp_path, provider, fake_backend_class):
    remote = [Transfer(f"s3://bucket/{name}", f"ref/{name}") for name in ("a", "b")]
    provider.stage_bytes = {"ref/a": 3 * MiB, "ref/b": 1 * MiB}
    provider.stage_chunks, provider.stage_step_s = 5, 0.02
    events = await run(tmp_path, fake_backend_class(provider=provider), plan_with_inputs(*remote))
    progress = [event for event in events if event.kind == "staging_progress"]
    assert progress[0].bytes_total is None  # only "a" has reported its size
    assert progress[0].message.endswith(" so far")
    assert (progress[-1].bytes_done, progress[-1].bytes_total) == (4 * MiB, 4 * MiB)

    provider.stage_reports_size = False
    events = await run(
        tmp_path / "again", fake_backend_class(provider=provider), plan_with_inputs(*remote)
    )
    progress = [event for event in events if event.kind == "staging_progress"]
    assert progress
    assert all(event.bytes_total is None for event in progress)
    assert progress[-1].bytes_done == 4 * MiB
    assert progress[-1].message == "staging 4.0 MiB so far"


@pytest.mark.asyncio
async def test_no_listener_means_no_callback_for_the_backend(
    tmp_path, provider, fake_backend_class
):
    seen = []

    class Watching(fake_backend_class):
        async def stage_inputs(self, transfers):
            seen.append(current_callback())
            await super().stage_inputs(transfers)

    provider.stage_bytes = {"ref/a": MiB}
    plan = plan_with_inputs(Transfer("s3://bucket/a", "ref/a"))
    result = await run_plan(plan, Watching(provider=provider), run_dir=tmp_path / "run", **FAST)
    assert result.ok
    assert seen == [None]
    await run(tmp_path / "listened", Watching(provider=provider), plan)
    assert seen[1] is not None
    assert current_callback() is None  # uninstalled after staging


@pytest.mark.asyncio
async def test_a_failed_staging_emits_no_progress_after_it(tmp_path, provider, fake_backend_class):
    provider.stage_bytes = {"ref/a": MiB}
    provider.stage_error = "disk full"
    events: list[RunEvent] = []
    with pytest.raises(StagingError, match="disk full"):
        await run_plan(
            plan_with_inputs(Transfer("s3://bucket/a", "ref/a")),
            fake_backend_class(provider=provider),
            run_dir=tmp_path / "run",
            on_event=events.append,
            **FAST,
        )
    kinds = [event.kind for event in events]
    assert "staged" not in kinds
    assert kinds[-1] == "staging_progress"  # the reports made before the failure, no more
