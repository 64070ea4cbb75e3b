"""Lanes of a routed run (issue 26): max_parallel, capacity and holds per backend; fallback."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from altar.execution.errors import PlanError
from altar.execution.plans.plan import Plan, PlanTask, parse_plan
from altar.execution.run import holding
from altar.execution.run.routed import LABEL_ROUTE, RoutedBackend
from altar.execution.run.runner import run_plan
from altar.execution.state.journal import Journal
from altar.execution.types import ContainerTaskSpec, TaskHandle

from .conftest import FakeBackend, FakeProvider
from .runkit import FAST, spec

ONE = [f"a{n}" for n in range(4)]  # tasks on backend "one"
TWO = [f"b{n}" for n in range(4)]  # tasks on backend "two"


def _routed(
    providers: dict[str, FakeProvider],
    routes: dict[str, str],
    decls: dict[str, dict[str, Any]] | None = None,
    fallbacks: dict[str, str] | None = None,
) -> RoutedBackend:
    decls = decls or {}
    return RoutedBackend(
        backends={name: {"type": "fake", **decls.get(name, {})} for name in providers},
        routes=routes,
        default=next(iter(providers)),
        fallbacks=fallbacks,
        built={name: FakeBackend(provider=p) for name, p in providers.items()},
    )


def _plan(*ids: str) -> Plan:
    return Plan("routed", {}, [PlanTask(i, spec(i)) for i in ids])


def _two_lanes(
    first: FakeProvider, second: FakeProvider, **decls: dict[str, Any]
) -> tuple[Plan, RoutedBackend]:
    routes = {t: "one" for t in ONE} | {t: "two" for t in TWO}
    return _plan(*ONE, *TWO), _routed({"one": first, "two": second}, routes, decls)


def _between(events: list[Any], first: str, last: str) -> list[Any]:
    kinds = [e.kind for e in events]
    start = kinds.index(first)
    return events[start : kinds.index(last, start)]


@pytest.mark.asyncio
async def test_each_backend_keeps_its_own_max_parallel(tmp_path: Path) -> None:
    one, two = FakeProvider(duration=3), FakeProvider(duration=3)
    plan, routed = _two_lanes(one, two, one={"max_parallel": 1}, two={"max_parallel": 3})
    result = await run_plan(plan, routed, run_dir=tmp_path / "run", **FAST)
    assert result.ok
    assert (one.max_live, two.max_live) == (1, 3)


@pytest.mark.asyncio
async def test_the_runs_max_parallel_bounds_every_lane_together(tmp_path: Path) -> None:
    one, two = FakeProvider(duration=3), FakeProvider(duration=3)
    plan, routed = _two_lanes(one, two, one={"max_parallel": 1})
    peak = 0

    class Both(FakeBackend):
        async def submit(self, spec: ContainerTaskSpec) -> TaskHandle:
            nonlocal peak
            handle = await super().submit(spec)
            peak = max(peak, len(one.live()) + len(two.live()))
            return handle

    routed.lanes = {name: Both(provider=p) for name, p in (("one", one), ("two", two))}
    result = await run_plan(plan, routed, run_dir=tmp_path / "run", max_parallel=3, **FAST)
    assert result.ok
    assert (peak, one.max_live) == (3, 1)


@pytest.mark.asyncio
async def test_a_lane_full_by_capacity_leaves_the_other_submitting(tmp_path: Path) -> None:
    one, two = FakeProvider(duration=3, slots=1), FakeProvider(duration=3)
    plan, routed = _two_lanes(one, two)
    result = await run_plan(plan, routed, run_dir=tmp_path / "run", **FAST)
    assert result.ok
    assert (one.max_live, two.max_live) == (1, 4)  # one's slot is not lent to two, nor two's


@pytest.mark.asyncio
async def test_a_limit_on_one_backend_holds_back_only_its_tasks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(holding, "LIMIT_PAUSE_S", 1.0)
    one, two = FakeProvider(duration=2), FakeProvider(duration=2)
    two.script = {t: ["limit", "ok"] for t in TWO}
    plan, routed = _two_lanes(one, two, one={"max_parallel": 1})
    events: list[Any] = []
    result = await run_plan(
        plan, routed, run_dir=tmp_path / "run", max_retries=0, on_event=events.append, **FAST
    )
    assert result.ok
    assert all(len(t.attempts) == 1 for t in Journal.load(tmp_path / "run").tasks.values())
    [held] = [e.message for e in events if e.kind == "held"]
    assert held.startswith("backend two: submits held back by the provider's limit")
    during = _between(events, "held", "hold_lifted")
    # one's tasks go one at a time (its max_parallel): all but the first go during two's hold
    assert {e.task_id for e in during if e.kind == "submitted"} >= set(ONE[1:])
    assert not {e.task_id for e in during if e.kind == "submitted"} & set(TWO[1:])


@pytest.mark.asyncio
async def test_endings_piling_up_on_one_backend_pause_only_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(holding, "PAUSE_S", 1.0)
    one, two = FakeProvider(duration=2), FakeProvider(duration=2)
    two.script = {t: ["engine_lost", "ok"] for t in TWO}
    plan, routed = _two_lanes(one, two, one={"max_parallel": 1})
    events: list[Any] = []
    result = await run_plan(
        plan, routed, run_dir=tmp_path / "run", max_retries=0, on_event=events.append, **FAST
    )
    assert result.ok
    [paused] = [e.message for e in events if e.kind == "paused"]
    assert paused.startswith("backend two: submits paused")
    during = _between(events, "paused", "hold_lifted")
    submitted = [e.task_id for e in during if e.kind == "submitted"]
    assert set(ONE) - set(submitted) <= {ONE[0]}  # one kept submitting through two's pause
    assert len([t for t in submitted if t in TWO]) == 1  # two sent only its probe


# -- fallback ------------------------------------------------------------------------------


def _fallback_run(
    spot: FakeProvider, hpc: FakeProvider, **fallback: Any
) -> tuple[Plan, RoutedBackend]:
    routes = {"fold": "spot", "other": "hpc"}
    task = {"fallbacks": {"fold": "hpc"}} if not fallback else {}
    routed = _routed({"spot": spot, "hpc": hpc}, routes, fallback.get("decls"), **task)
    return _plan("fold", "other"), routed


def _routes(run_dir: Path, task: str) -> list[str]:
    record = Journal.load(run_dir).tasks[task]
    return [a.handle.labels[LABEL_ROUTE] for a in record.attempts if a.handle is not None]


@pytest.mark.asyncio
@pytest.mark.parametrize("where", ["task", "backend"])
async def test_a_preempted_attempt_falls_back_to_the_other_backend(
    tmp_path: Path, where: str
) -> None:
    spot, hpc = FakeProvider(), FakeProvider()
    spot.script = {"fold": ["preempted", "preempted", "preempted"]}
    decls = {"decls": {"spot": {"fallback": "hpc"}}} if where == "backend" else {}
    plan, routed = _fallback_run(spot, hpc, **decls)
    result = await run_plan(plan, routed, run_dir=tmp_path / "run", max_retries=0, **FAST)
    assert result.ok
    assert _routes(tmp_path / "run", "fold") == ["spot", "hpc"]
    assert (spot.submits, hpc.submits) == ({"fold": 1}, {"fold": 1, "other": 1})


@pytest.mark.asyncio
async def test_a_task_failure_never_falls_back(tmp_path: Path) -> None:
    spot, hpc = FakeProvider(), FakeProvider()
    spot.script = {"fold": ["timeout", "oom", "ok"]}
    plan, routed = _fallback_run(spot, hpc)
    result = await run_plan(plan, routed, run_dir=tmp_path / "run", max_retries=2, **FAST)
    assert result.ok
    assert _routes(tmp_path / "run", "fold") == ["spot", "spot", "spot"]
    assert hpc.submits == {"other": 1}


@pytest.mark.asyncio
async def test_resume_keeps_the_fallback(tmp_path: Path) -> None:
    """Stopped while the fallback attempt runs: the resumed run polls it on the fallback."""
    spot, hpc = FakeProvider(), FakeProvider(duration=10**9)
    spot.script = {"fold": ["preempted", "ok"]}
    plan, routed = _fallback_run(spot, hpc)
    run = asyncio.create_task(run_plan(plan, routed, run_dir=tmp_path / "run", **FAST))
    for _ in range(2000):
        if hpc.submits.get("fold"):
            break
        await asyncio.sleep(0.005)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    hpc.duration = 2
    _, again = _fallback_run(spot, hpc)  # a new process: a routed backend that knows nothing
    result = await run_plan(plan, again, run_dir=tmp_path / "run", **FAST)
    assert result.ok
    assert _routes(tmp_path / "run", "fold") == ["spot", "hpc"]
    assert (spot.submits["fold"], hpc.submits["fold"]) == (1, 1)


def _data(spot: dict[str, Any], **task: Any) -> dict[str, Any]:
    fold = {"id": "fold", "kind": "fold", "image": "i", "command": ["x"], **task}
    return {
        "backends": {"spot": {"type": "fake", **spot}, "hpc": {"type": "fake", "max_parallel": 2}},
        "tasks": [fold],
    }


def test_fallback_and_max_parallel_are_read_and_checked() -> None:
    plan = parse_plan(_data({"fallback": "hpc"}, fallback="hpc"))
    assert plan.routing is not None
    assert plan.routing.fallbacks == {"fold": "hpc"}
    assert plan.routing.backends["hpc"].max_parallel == 2
    assert plan.routing.backends["spot"].fallback == "hpc"
    for data, message in [
        (_data({"fallback": "gpu"}), "backends.spot.fallback: no backend 'gpu'"),
        (_data({"fallback": "spot"}), "must name another backend"),
        (_data({}, fallback="gpu"), r"tasks\[0\].fallback: no backend 'gpu'"),
        (_data({}, backend="hpc", fallback="hpc"), "is the task's own backend"),
        (_data({"max_parallel": 0}), "backends.spot.max_parallel: must be a whole number"),
        (
            {"backend": {"type": "fake"}, "tasks": _data({}, fallback="hpc")["tasks"]},
            "no \\[backends",
        ),
    ]:
        with pytest.raises(PlanError, match=message):
            parse_plan(data)


@pytest.mark.asyncio
@pytest.mark.parametrize("arrived", [True, False], ids=["arrived", "never-arrived"])
async def test_killed_inside_the_fallbacks_submit_resumes_it_on_the_fallback_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, arrived: bool
) -> None:
    """The runner stops (no grace) while the fallback attempt's submit is in flight: the
    resumed run finds it on the fallback by its key, or submits it there again, never on the
    backend that preempted it."""
    from altar.execution.run import runner

    from .conftest import AdoptingFakeBackend

    spot, hpc = FakeProvider(), FakeProvider()
    spot.script = {"fold": ["preempted", "ok"]}
    if arrived:
        hpc.slow_submits = {"fold": 3600.0}  # created on the provider, submit not returned
    else:
        hpc.hang_submits = {"fold"}  # the provider never saw it
    lanes = {"spot": AdoptingFakeBackend(provider=spot), "hpc": AdoptingFakeBackend(provider=hpc)}

    def routed() -> RoutedBackend:
        return RoutedBackend(
            backends={name: {"type": "fake"} for name in lanes},
            routes={"fold": "spot", "other": "hpc"},
            default="spot",
            fallbacks={"fold": "hpc"},
            built=lanes,
        )

    assert routed().adopts_submissions
    monkeypatch.setattr(runner, "SUBMIT_GRACE_S", 0.0)
    plan, run_dir = _plan("fold", "other"), tmp_path / "run"
    run = asyncio.create_task(run_plan(plan, routed(), run_dir=run_dir, **FAST))
    for _ in range(2000):
        record = (
            Journal.load(run_dir).tasks["fold"] if (run_dir / "journal.json").exists() else None
        )
        if record is not None and len(record.attempts) == 2 and record.state == "submitting":
            break
        await asyncio.sleep(0.005)
    await asyncio.sleep(0.02)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    record = Journal.load(run_dir).tasks["fold"]
    assert (len(record.attempts), record.attempts[-1].handle) == (2, None)  # in doubt
    hpc.slow_submits.clear()
    result = await run_plan(plan, routed(), run_dir=run_dir, **FAST)
    assert result.ok
    assert _routes(run_dir, "fold") == ["spot", "hpc"]
    assert (spot.executions("fold"), hpc.executions("fold")) == (1, 1)
    assert [t.attempts for t in result.tasks if t.id == "fold"] == [2]


def test_a_routed_run_takes_the_narrowest_submit_window_of_its_lanes() -> None:
    from .conftest import AdoptingFakeBackend

    class Wide(AdoptingFakeBackend):
        submit_window = 500

    class Narrow(AdoptingFakeBackend):
        submit_window = 100

    def routed(lanes: dict[str, FakeBackend]) -> RoutedBackend:
        return RoutedBackend(
            backends={name: {"type": "fake"} for name in lanes},
            routes={},
            default=next(iter(lanes)),
            built=lanes,
        )

    wide, narrow = Wide(provider=FakeProvider()), Narrow(provider=FakeProvider())
    assert routed({"a": wide, "b": narrow}).submit_window == 100
    # a lane that keeps the driver's window, or does not adopt, keeps it for the whole run
    assert (
        routed({"a": wide, "b": AdoptingFakeBackend(provider=FakeProvider())}).submit_window is None
    )
    assert routed({"a": wide, "b": FakeBackend(provider=FakeProvider())}).submit_window is None
