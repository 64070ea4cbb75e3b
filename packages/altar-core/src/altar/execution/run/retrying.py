"""``altar run --retry-failed``: reopen a run's failed tasks and the dependants they skipped.

Before the run is resumed, under its lock, every ``failed`` task goes back to ``queued`` with
a fresh retry budget (its earlier attempts stay in the journal, numbered on), and so does every
``skipped`` task whose skip a reopened task caused. A plan edited only in those tasks (and in
tasks never submitted) is accepted for them (their spec digest is updated); any other changed
task is refused as before. The run then stages what the edits changed (:mod:`.staging`).
One snapshot write makes the change: a run killed halfway has either reopened them all or none.
"""

from __future__ import annotations

from pathlib import Path

from altar.execution.errors import JournalError
from altar.execution.plans.plan import Plan
from altar.execution.state.journal import FAILED, QUEUED, SKIPPED, Journal, run_lock, spec_digest

__all__ = ["reopen_failed", "reopen_failed_in"]


def reopen_failed(journal: Journal, plan: Plan) -> list[str]:
    """Reopen in ``journal`` (in memory) what ``--retry-failed`` reruns; return those task ids."""
    digests = {task.id: spec_digest(task.spec) for task in plan.tasks}
    if list(journal.tasks) != list(digests):
        raise JournalError(
            f"{journal.run_dir} holds a run of other tasks ({', '.join(journal.tasks)}); "
            "--retry-failed reruns the same plan's tasks: use a new run directory"
        )
    reopened = {task_id for task_id, record in journal.tasks.items() if record.state == FAILED}
    # skipped tasks downstream of a reopened one run again too (their dependencies rerun)
    changed = True
    while changed:
        changed = False
        for task_id, record in journal.tasks.items():
            if task_id in reopened or record.state != SKIPPED:
                continue
            if any(dep in reopened for dep in plan.dependencies.get(task_id, ())):
                reopened.add(task_id)
                changed = True
    for task_id, digest in digests.items():
        record = journal.tasks[task_id]
        if record.spec_sha256 != digest and task_id not in reopened and not record.editable:
            raise JournalError(
                f"{journal.run_dir}: task {task_id!r} changed since this run started and it "
                f"did not fail ({record.state}); --retry-failed accepts changes to failed "
                "tasks and the tasks they skipped only: use a new run directory"
            )
    for task_id in reopened:
        record = journal.tasks[task_id]
        record.state = QUEUED
        record.detail = None
        record.spec_sha256 = digests[task_id]
        record.retry_base = len(record.attempts)
        record.outputs_collected = False
        record.cleaned = False  # its new attempts' containers are cleaned up in turn
    if reopened:
        journal.finished = False
    return [task_id for task_id in journal.tasks if task_id in reopened]


def reopen_failed_in(run_dir: Path, plan: Plan) -> list[str]:
    """:func:`reopen_failed` on ``run_dir``'s journal, saved durably under the run's lock."""
    with run_lock(run_dir):
        journal = Journal.load(run_dir)
        reopened = reopen_failed(journal, plan)
        if reopened:
            journal.save()
        return reopened
