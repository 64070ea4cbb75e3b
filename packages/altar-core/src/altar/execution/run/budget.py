"""The retry budgets: what a task's own failures may cost, and what the provider's endings may.

A failure the task may have caused (``timeout``, ``oom_killed``, ``job_failed``, ...) draws on
``max_retries``. An attempt the provider ended (``TaskFailure.provider_ending``: preempted,
node lost, evicted, engine lost, spot reclaimed) draws on ``max_provider_retries`` instead, so
a drained partition or a restarted engine never spends the retries a plan allows for the
task's own failures. Both count attempts made since ``--retry-failed`` last reopened the task.
"""

from __future__ import annotations

from dataclasses import dataclass

from altar.execution.plans.plan import Plan
from altar.execution.run.results import ended_counts
from altar.execution.state.records import TaskRecord
from altar.execution.types import TaskFailure

__all__ = [
    "DEFAULT_MAX_PROVIDER_RETRIES",
    "DEFAULT_MAX_RETRIES",
    "RetryBudget",
    "plan_budget",
]

DEFAULT_MAX_RETRIES = 2
#: Generous on purpose: a provider ending says nothing about the task, and a pile-up of them
#: pauses the run (see :mod:`altar.execution.run.holding`) before it reaches this.
DEFAULT_MAX_PROVIDER_RETRIES = 10


@dataclass(frozen=True)
class RetryBudget:
    """How many times a task is submitted again, per kind of failure."""

    max_retries: int = DEFAULT_MAX_RETRIES
    max_provider_retries: int = DEFAULT_MAX_PROVIDER_RETRIES

    def __post_init__(self) -> None:
        for name in ("max_retries", "max_provider_retries"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be zero or more, got {value!r}")

    def allows(self, record: TaskRecord, failure: TaskFailure) -> bool:
        """Whether ``record`` is submitted again after its last attempt failed with ``failure``."""
        if failure.deterministic:
            return False
        earlier = record.attempts[record.retry_base : -1]
        ended = sum(ended_counts(earlier).values())
        if failure.provider_ending is not None:
            return ended + 1 <= self.max_provider_retries
        return len(earlier) - ended + 1 <= self.max_retries


def plan_budget(
    plan: Plan, max_retries: int | None = None, max_provider_retries: int | None = None
) -> RetryBudget:
    """The budget a run of ``plan`` uses: the arguments, else the plan's values, else defaults."""
    if max_retries is None:
        max_retries = plan.max_retries if plan.max_retries is not None else DEFAULT_MAX_RETRIES
    if max_provider_retries is None:
        max_provider_retries = (
            plan.max_provider_retries
            if plan.max_provider_retries is not None
            else DEFAULT_MAX_PROVIDER_RETRIES
        )
    return RetryBudget(max_retries, max_provider_retries)
