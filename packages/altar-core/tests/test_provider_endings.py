"""Provider endings and limits in the runner: their own budget, a hold, said once (issue 22)."""

from __future__ import annotations

import json

import pytest
from altar.execution import PROVIDER_ENDINGS, ProviderLimitError, TaskFailure
from altar.execution.plans.plan import parse_plan
from altar.execution.run import holding
from altar.execution.run.budget import RetryBudget
from altar.execution.run.holding import Hold
from altar.execution.run.progress import format_table
from altar.execution.run.runner import run_plan
from altar.execution.state.journal import Journal
from altar.execution.state.records import Attempt, TaskRecord
from altar.execution.types import TaskHandle

from .runkit import FAST, simple_plan

_HANDLE = TaskHandle("fake", "fake-1", {})


@pytest.fixture
def quick_holds(monkeypatch):
    """Pauses of a few milliseconds, so a held run finishes in test time."""
    monkeypatch.setattr(holding, "PAUSE_S", 0.02)
    monkeypatch.setattr(holding, "LIMIT_PAUSE_S", 0.02)


# -- the contract word ---------------------------------------------------------------------


def test_a_provider_ending_is_one_of_the_documented_codes_never_deterministic():
    assert set(PROVIDER_ENDINGS) == {
        "preempted",
        "node_lost",
        "evicted",
        "engine_lost",
        "spot_reclaimed",
    }
    TaskFailure("job_failed", "PREEMPTED", provider_ending="preempted")
    with pytest.raises(ValueError, match="must be one of"):
        TaskFailure("job_failed", provider_ending="hamster")
    with pytest.raises(ValueError, match="not deterministic"):
        TaskFailure("job_failed", deterministic=True, provider_ending="preempted")
    with pytest.raises(ValueError, match="no exit status"):
        TaskFailure("exit_137", exit_code=137, provider_ending="evicted")
    assert TaskFailure("job_failed").provider_ending is None  # 0.3.0's shape, unchanged


def test_the_journal_keeps_the_ending_and_writes_nothing_new_without_one():
    ended = Attempt(
        1, "failed", failure=TaskFailure("job_failed", "x", provider_ending="node_lost")
    )
    plain = Attempt(2, "failed", failure=TaskFailure("timeout", "slow"))
    assert Attempt.from_dict(json.loads(json.dumps(ended.to_dict()))) == ended
    assert "provider_ending" not in plain.to_dict()["failure"]  # old journals' bytes unchanged
    assert Attempt.from_dict(plain.to_dict()).failure == plain.failure


# -- the budget ------------------------------------------------------------------------------


def _record(*failures: TaskFailure, retry_base: int = 0) -> TaskRecord:
    attempts = [Attempt(n, "failed", failure=f) for n, f in enumerate(failures, 1)]
    return TaskRecord("t", "fold", "sha", attempts=attempts, retry_base=retry_base)


PREEMPTED = TaskFailure("job_failed", "PREEMPTED", provider_ending="preempted")
TIMEOUT = TaskFailure("timeout", "ran too long")


def test_endings_and_own_failures_draw_on_separate_budgets():
    budget = RetryBudget(max_retries=1, max_provider_retries=2)
    assert budget.allows(_record(PREEMPTED), PREEMPTED)
    assert budget.allows(_record(PREEMPTED, PREEMPTED), PREEMPTED)
    assert not budget.allows(_record(PREEMPTED, PREEMPTED, PREEMPTED), PREEMPTED)
    # two preemptions did not use the one retry a timeout may have
    assert budget.allows(_record(PREEMPTED, PREEMPTED, TIMEOUT), TIMEOUT)
    assert not budget.allows(_record(TIMEOUT, PREEMPTED, TIMEOUT), TIMEOUT)
    # --retry-failed reopened the task after its first two attempts: they no longer count
    assert budget.allows(_record(TIMEOUT, TIMEOUT, TIMEOUT, retry_base=2), TIMEOUT)
    with pytest.raises(ValueError, match="max_provider_retries"):
        RetryBudget(max_provider_retries=-1)


@pytest.mark.asyncio
async def test_a_task_preempted_twice_succeeds_with_no_retries_allowed(
    tmp_path, provider, fake_backend_class
):
    provider.script = {"fold": ["preempted", "preempted", "ok"]}
    events = []
    result = await run_plan(
        simple_plan("fold"),
        fake_backend_class(provider=provider),
        run_dir=tmp_path / "run",
        max_retries=0,
        on_event=events.append,
        **FAST,
    )
    (task,) = result.tasks
    assert (task.status, task.attempts) == ("succeeded", 3)
    assert task.provider_endings == {"preempted": 2}
    assert task.to_dict()["provider_endings"] == {"preempted": 2}
    retries = [e.message for e in events if e.kind == "retry"]
    assert len(retries) == 2
    assert all("preempted" in m and "no retry used" in m for m in retries)
    assert "3 (2 preempted)" in format_table(result.tasks)


@pytest.mark.asyncio
async def test_provider_retries_run_out_and_the_task_fails_saying_so(
    tmp_path, provider, fake_backend_class
):
    provider.script = {"fold": ["node_lost"] * 5, "other": ["timeout", "ok"]}
    events = []
    result = await run_plan(
        simple_plan("fold", "other"),
        fake_backend_class(provider=provider),
        run_dir=tmp_path / "run",
        max_retries=1,
        max_provider_retries=1,
        on_event=events.append,
        **FAST,
    )
    fold, other = result.tasks
    assert (fold.status, fold.attempts, fold.reason) == ("failed", 2, "job_failed")
    assert fold.provider_endings == {"node_lost": 2}
    assert (other.status, other.attempts) == ("succeeded", 2)  # its own retry was its own
    failed = [e.message for e in events if e.kind == "failed"]
    assert failed == ["fold failed: node lost: job_failed (provider retries used up)"]


def test_plans_set_max_provider_retries_and_bad_values_name_the_field(tmp_path):
    plan = parse_plan(
        {"max_provider_retries": 4, "tasks": [{"kind": "k", "image": "i", "command": ["x"]}]},
        source="p.json",
    )
    assert plan.max_provider_retries == 4
    with pytest.raises(Exception, match="max_provider_retries"):
        parse_plan({"max_provider_retries": -1, "tasks": []}, source="p.json")


# -- the hold --------------------------------------------------------------------------------


def _events() -> tuple[list[tuple[str, str]], Hold]:
    said: list[tuple[str, str]] = []
    return said, Hold(lambda kind, message: said.append((kind, message)))


def test_endings_pile_up_pause_submits_then_one_probe_lifts_the_hold():
    said, hold = _events()
    tasks = {n: TaskRecord(n, "k", "s") for n in "abcd"}
    hold.ended("a", PREEMPTED, 0.0)
    hold.ended("a", PREEMPTED, 1.0)  # the same task twice is not a pile-up
    assert not hold.holding
    hold.ended("b", PREEMPTED, 2.0)
    hold.ended("c", PREEMPTED, 3.0)
    assert hold.holding
    assert [k for k, _ in said] == ["paused"]
    batch = list(tasks.values())
    assert hold.admit(batch, 3.0 + holding.PAUSE_S / 2) == []  # still paused
    (probe,) = hold.admit(batch, 3.0 + holding.PAUSE_S)
    assert hold.admit(batch, 100.0) == []  # one probe at a time
    tasks[probe.id].state = "pending"
    hold.observe(tasks)
    assert hold.holding  # accepted is not enough: a drained partition accepts too
    hold.ended(probe.id, PREEMPTED, 20.0)  # the probe was ended as well: pause twice as long
    assert hold.pause == 2 * holding.PAUSE_S
    assert hold.closed(20.0 + holding.PAUSE_S)
    (probe,) = hold.admit(batch, 20.0 + 2 * holding.PAUSE_S)
    tasks[probe.id].state = "running"
    hold.observe(tasks)
    assert not hold.holding
    assert [k for k, _ in said] == ["paused", "hold_lifted"]
    assert hold.admit(batch, 41.0) == batch


def test_endings_spread_out_in_time_do_not_pause():
    said, hold = _events()
    for n, task_id in enumerate("abcdef"):
        hold.ended(task_id, PREEMPTED, n * holding.PILE_UP_WINDOW_S)
    assert not hold.holding
    assert said == []


def test_a_limit_holds_for_the_providers_retry_after_and_says_it_once():
    said, hold = _events()
    tasks = {n: TaskRecord(n, "k", "s") for n in "ab"}
    hold.limited(ProviderLimitError("quota q exceeded", limit="q", retry_after_s=7.0), 0.0)
    hold.limited(ProviderLimitError("quota q exceeded", limit="q", retry_after_s=7.0), 0.5)
    assert [k for k, _ in said] == ["held"]
    assert "quota q exceeded" in said[0][1]
    assert hold.admit(list(tasks.values()), 7.0) == []
    (probe,) = hold.admit(list(tasks.values()), 7.5)
    tasks[probe.id].state = "pending"  # for a limit, accepted is enough
    hold.observe(tasks)
    assert not hold.holding
    assert said[-1][0] == "hold_lifted"


def test_a_limit_lifts_when_its_probe_was_accepted_then_ended_before_seen_running():
    """A poll right after the probe's submit may see it ended by the provider already."""
    said, hold = _events()
    tasks = {n: TaskRecord(n, "k", "s") for n in "ab"}
    hold.limited(ProviderLimitError("rate limit", limit="rate", retry_after_s=1.0), 0.0)
    (probe,) = hold.admit(list(tasks.values()), 1.0)
    record = tasks[probe.id]
    failure = TaskFailure("job_failed", "preempted", provider_ending="preempted")
    record.attempts.append(Attempt(1, "failed", handle=_HANDLE, failure=failure))
    hold.ended(probe.id, failure, 1.1)  # queued again for its free retry, never seen running
    hold.observe(tasks)
    assert not hold.holding  # the provider accepted the submit: the limit is over
    assert said[-1][0] == "hold_lifted"
    withdrawn = TaskRecord("c", "k", "s")  # a probe refused again keeps no attempt: held
    hold.limited(ProviderLimitError("rate limit", limit="rate", retry_after_s=1.0), 2.0)
    hold.admit([withdrawn], 3.0)
    hold.observe({"c": withdrawn})
    assert hold.holding


@pytest.mark.asyncio
async def test_a_limit_holds_the_run_back_without_failing_or_charging_anyone(
    tmp_path, provider, fake_backend_class, quick_holds
):
    provider.script = {"a": ["limit", "limit", "ok"], "b": ["limit", "ok"], "c": ["ok"]}
    events = []
    result = await run_plan(
        simple_plan("a", "b", "c"),
        fake_backend_class(provider=provider),
        run_dir=tmp_path / "run",
        max_retries=0,
        on_event=events.append,
        **FAST,
    )
    assert [(t.id, t.status, t.attempts) for t in result.tasks] == [
        ("a", "succeeded", 1),
        ("b", "succeeded", 1),
        ("c", "succeeded", 1),
    ]
    kinds = [e.kind for e in events]
    assert "backend_unavailable" not in kinds  # the hold speaks for the refusals
    assert kinds.count("held") == 1
    assert kinds.count("hold_lifted") >= 1
    # held: after the first refusals, one probe at a time, not every ready task again
    assert provider.limit_refusals <= 4
    journal = Journal.load(tmp_path / "run")
    assert all(len(r.attempts) == 1 for r in journal.tasks.values())


@pytest.mark.asyncio
async def test_a_pile_up_of_endings_pauses_once_and_the_run_completes(
    tmp_path, provider, fake_backend_class, quick_holds
):
    names = [f"t{n}" for n in range(6)]
    provider.script = {name: ["engine_lost", "ok"] for name in names}
    events = []
    result = await run_plan(
        simple_plan(*names),
        fake_backend_class(provider=provider),
        run_dir=tmp_path / "run",
        max_retries=0,
        on_event=events.append,
        **FAST,
    )
    assert all(t.status == "succeeded" and t.attempts == 2 for t in result.tasks)
    kinds = [e.kind for e in events]
    assert kinds.count("paused") == 1
    assert kinds.count("hold_lifted") == 1
    paused, lifted = kinds.index("paused"), kinds.index("hold_lifted")
    # between the pause and its lifting, exactly one task (the probe) was submitted
    assert kinds[paused:lifted].count("submitted") == 1


def test_a_probe_that_fails_by_itself_and_waits_for_its_retry_lifts_the_hold():
    said, hold = _events()
    tasks = {n: TaskRecord(n, "k", "s") for n in "abcd"}
    for n, task_id in enumerate("abc"):
        hold.ended(task_id, PREEMPTED, float(n))
    (probe,) = hold.admit(list(tasks.values()), 10.0 + holding.PAUSE_S)
    record = tasks[probe.id]
    record.attempts.append(Attempt(len(record.attempts) + 1, "failed", failure=TIMEOUT))
    record.state = "queued"  # its own timeout: the runner queued its retry
    hold.observe(tasks)
    assert not hold.holding  # the provider ran it: a held-back retry would wait for ever
    assert said[-1][0] == "hold_lifted"
    assert hold.admit([record], 100.0) == [record]


def test_a_probe_withdrawn_by_a_limit_keeps_the_hold():
    _, hold = _events()
    tasks = {n: TaskRecord(n, "k", "s") for n in "ab"}
    hold.limited(ProviderLimitError("quota", limit="q", retry_after_s=1.0), 0.0)
    (probe,) = hold.admit(list(tasks.values()), 2.0)
    tasks[probe.id].state = "queued"  # withdrawn: its attempt was popped, none added
    hold.observe(tasks)
    assert hold.holding
