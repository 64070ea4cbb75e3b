"""Which tasks a run starts next: the pure scheduling functions, without an event loop."""

from __future__ import annotations

from altar.execution.run.scheduling import blocked, choose, in_flight, ready, room_for
from altar.execution.state.journal import TaskRecord


def records(**states: str) -> dict[str, TaskRecord]:
    return {
        task_id: TaskRecord(task_id, "k", "sha256:x", state) for task_id, state in states.items()
    }


def ids(found: list[TaskRecord]) -> list[str]:
    return [record.id for record in found]


def test_ready_needs_every_dependency_succeeded_and_collected() -> None:
    recs = records(a="succeeded", b="succeeded", c="queued", d="queued", e="queued", f="running")
    recs["a"].outputs_collected = True
    deps = {"c": ("a",), "d": ("a", "b"), "e": ()}
    assert ids(ready(recs, deps)) == ["c", "e"]  # d waits for b's outputs
    recs["b"].outputs_collected = True
    assert ids(ready(recs, deps)) == ["c", "d", "e"]


def test_blocked_names_the_first_dependency_that_cannot_succeed() -> None:
    recs = records(a="failed", b="skipped", c="cancelled", d="queued", e="queued", f="queued")
    deps = {"d": ("a", "b"), "e": ("c",), "f": ("d",)}
    assert [(r.id, why) for r, why in blocked(recs, deps)] == [
        ("d", "dependency a failed"),
        ("e", "dependency c cancelled"),
    ]  # f only once d is skipped


def test_choose_respects_max_parallel_then_capacity() -> None:
    recs = records(a="running", b="submitting", q1="queued", q2="queued", q3="queued", g="queued")
    queued = [recs[k] for k in ("q1", "q2", "q3", "g")]
    pools = {"g": "a100"}

    def pool(record: TaskRecord) -> str:
        return pools.get(record.id, "cpu")

    everything = recs.values()
    assert ids(choose(queued, records=everything, max_parallel=3, free=None, pool=pool)) == ["q1"]
    assert ids(choose(queued, records=everything, max_parallel=2, free=None, pool=pool)) == []
    # 3 cpu slots free, one taken by b's submit in flight; a pool without a report is let through
    free = {"cpu": 3}
    chosen = choose(queued, records=everything, max_parallel=None, free=free, pool=pool)
    assert ids(chosen) == ["q1", "q2", "g"]
    free = {"cpu": 5, "a100": 0}
    chosen = choose(queued, records=everything, max_parallel=None, free=free, pool=pool)
    assert ids(chosen) == ["q1", "q2", "q3"]
    assert free == {"cpu": 5, "a100": 0}  # the report is not changed
    assert ids(choose(queued, records=everything, max_parallel=None, free={}, pool=pool)) == [
        "q1",
        "q2",
        "q3",
        "g",
    ]


def test_in_flight_and_room() -> None:
    recs = records(a="running", b="submitting", c="pending", d="queued", e="succeeded")
    assert ids(in_flight(recs.values())) == ["a", "b", "c"]
    assert room_for(1, in_flight_count=3, max_parallel=4)
    assert not room_for(1, in_flight_count=4, max_parallel=4)
    assert not room_for(0, in_flight_count=0, max_parallel=None)
    assert room_for(2, in_flight_count=100, max_parallel=None)
