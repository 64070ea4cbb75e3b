"""What a run learns from its backend: one poll for every open task, then the outputs.

Functions over a :class:`~altar.execution.run.ledger.Ledger`, called by the tick loop. A failed
attempt is retried when its failure is not deterministic and attempts remain
(:func:`fail_attempt`); a poll or capacity error that is not transient stops the run
(:class:`~altar.execution.errors.BackendCallError`).
"""

from __future__ import annotations

import asyncio
import errno
import time
from collections.abc import Mapping

from altar.execution.atomic import sweeping_for
from altar.execution.backend import ExecutionBackend
from altar.execution.errors import BackendCallError, BackendUnavailableError, OutputCollectionError
from altar.execution.gather import gather_bounded
from altar.execution.run.budget import RetryBudget
from altar.execution.run.ledger import Ledger
from altar.execution.run.results import one_line
from altar.execution.run.routed import note_attempt, unanswered
from altar.execution.state.journal import (
    FAILED,
    PENDING,
    QUEUED,
    RUNNING,
    SUCCEEDED,
    Attempt,
    TaskRecord,
)
from altar.execution.types import ContainerTaskSpec, TaskFailure, TaskHandle, TaskState, TaskStatus

__all__ = ["call_error", "collect_succeeded", "fail_attempt", "poll_open"]


def fail_attempt(
    ledger: Ledger,
    record: TaskRecord,
    attempt: Attempt,
    failure: TaskFailure,
    *,
    budget: RetryBudget,
) -> None:
    """Mark ``attempt`` failed; queue the task again if it may pass and its budget allows."""
    attempt.state = FAILED
    attempt.failure = failure
    attempt.finished_at = attempt.finished_at or time.time()
    ending = failure.provider_ending
    if ending is not None:
        ledger.ended(record, failure)
    why = f"{ending.replace('_', ' ')}: {failure.reason}" if ending else failure.reason
    if budget.allows(record, failure):
        ledger.set_state(record, QUEUED)
        charge = "; retrying (no retry used)" if ending else "; retrying"
        ledger.emit("retry", f"{record.id} attempt {attempt.number} failed ({why}){charge}", record)
    else:
        ledger.set_state(record, FAILED)
        spent = " (provider retries used up)" if ending else ""
        ledger.emit("failed", f"{record.id} failed: {why}{spent}", record)
    ledger.changed(record)


def call_error(
    backend: ExecutionBackend, call: str, error: Exception, *, submitted: bool = True
) -> BackendCallError:
    """The run stops; ``submitted`` says whether any of its tasks is at the provider."""
    running = "its submitted tasks keep running" if submitted else "no task of it is running"
    return BackendCallError(
        f"backend {backend.name!r} {call} failed: {one_line(error)}; the run stopped "
        f"and {running}: fix the cause, then resume it with the same run directory"
    )


async def poll_open(
    ledger: Ledger, backend: ExecutionBackend, *, budget: RetryBudget
) -> tuple[bool, bool]:
    """One ``poll`` call for every open task: (anything changed, any attempt finished).

    What it learns is marked, not written: the tick's next journal write makes it durable (a
    run stopped before that polls the same tasks again on resume), :func:`collect_succeeded`'s
    when a success has outputs to fetch.
    """
    open_records = [r for r in ledger.in_states(PENDING, RUNNING) if r.last]
    if not open_records:
        return False, False
    handles: list[TaskHandle] = [r.attempts[-1].handle for r in open_records]  # type: ignore[misc]
    try:
        statuses = await backend.poll(handles)
    except BackendUnavailableError as error:
        ledger.emit("backend_unavailable", f"poll: {one_line(error)}")
        return False, False
    except Exception as error:
        raise call_error(backend, "poll", error) from error
    if len(statuses) != len(handles):
        raise BackendCallError(
            f"backend {backend.name!r} returned {len(statuses)} statuses for "
            f"{len(handles)} handles; poll must return one status per handle"
        )
    progress = False
    finished: list[tuple[TaskRecord, TaskStatus]] = []
    now = time.time()
    for record, status in zip(open_records, statuses, strict=True):
        attempt = record.attempts[-1]
        new = status.state.value
        if unanswered(backend, status.handle):
            continue  # its backend is down and this process never saw it: no news
        # against the task's state, not the attempt's: a journal written by an older
        # runner stopped mid-poll may hold a finished attempt of a task still open
        if new == record.state:
            continue
        progress = True
        ledger.changed(record)
        if status.started_at is not None:  # the provider's clock beats our poll's
            attempt.started_at = status.started_at
        elif status.state is TaskState.RUNNING:
            attempt.started_at = attempt.started_at or now
        if status.state.is_terminal:
            # the attempt is marked finished with its task, after the failure detail is
            # read: a run stopped while reading it polls the task again on resume
            finished.append((record, status))
            continue
        attempt.state = new
        ledger.set_state(record, new)
        ledger.emit("state", f"{record.id} {new}", record)
    details = await asyncio.gather(*(_detail(backend, status) for _, status in finished))
    for (record, status), detail in zip(finished, details, strict=True):
        attempt = record.attempts[-1]
        # marked again: a group commit during the await above wrote the record without this
        ledger.changed(record)
        attempt.state = status.state.value
        attempt.finished_at = status.finished_at if status.finished_at is not None else now
        if status.state is TaskState.SUCCEEDED:
            ledger.set_state(record, SUCCEEDED)
            attempt.failure = None
            continue
        failure = status.failure or TaskFailure("job_failed", "backend gave no failure")
        record.detail = detail or failure.detail
        fail_attempt(ledger, record, attempt, failure, budget=budget)
    return progress, bool(finished)


async def _detail(backend: ExecutionBackend, status: TaskStatus) -> str | None:
    if status.state is not TaskState.FAILED:
        return None
    try:
        return await backend.failure_detail(status.handle)
    except asyncio.CancelledError:
        raise
    except Exception:
        return None


async def collect_succeeded(
    ledger: Ledger, backend: ExecutionBackend, specs: Mapping[str, ContainerTaskSpec]
) -> bool:
    """Collect the outputs of tasks that succeeded; True if any task was settled by it.

    A collect the provider did not answer is no news (it is tried again, backing off). Every
    collect runs to its end and is journaled before an error is raised; otherwise what it
    settled is marked, made durable by the tick's next journal write.
    """
    pending = list(ledger.to_collect.values())
    if not pending:
        return False
    if any(specs[r.id].outputs for r in pending):
        # successes are durable before their outputs are fetched: a collect may take long, and
        # a provider may forget a task meanwhile (a resumed run would not find it to poll)
        ledger.flush()
    try:
        # a routed run stages what it collects on the readers' backends: there too, remove
        # what an earlier (killed) process of this run left half written
        with sweeping_for(ledger.journal.pids):
            settled = await gather_bounded(
                [_collect_one(ledger, backend, specs, r) for r in pending]
            )
    except BaseException:
        ledger.flush()
        raise
    return any(settled)


async def _collect_one(
    ledger: Ledger,
    backend: ExecutionBackend,
    specs: Mapping[str, ContainerTaskSpec],
    record: TaskRecord,
) -> bool:
    outputs = specs[record.id].outputs
    if record.last is not None:  # a routed run collects from where the attempt ran
        note_attempt(backend, record.last.handle)
    try:
        if outputs:
            await backend.collect_outputs(list(outputs))
    except BackendUnavailableError as error:
        ledger.emit("backend_unavailable", f"{record.id}: collect: {one_line(error)}", record)
        return False
    except OSError as error:
        if error.errno not in (errno.ENOSPC, errno.EDQUOT):
            return _collection_failed(ledger, record, error)
        raise OutputCollectionError(
            f"{record.id}: its outputs could not be collected: {one_line(error)}; the task "
            "succeeded and keeps its result: free space and resume the run to collect them"
        ) from error
    except Exception as error:
        return _collection_failed(ledger, record, error)
    ledger.collected(record)
    ledger.changed(record)
    duration = record.last.duration_s if record.last else None
    took = f" in {duration:.1f}s" if duration is not None else ""
    ledger.emit("succeeded", f"{record.id} succeeded{took}", record)
    return True


def _collection_failed(ledger: Ledger, record: TaskRecord, error: BaseException) -> bool:
    ledger.set_state(record, FAILED)
    record.detail = one_line(error)
    if record.last is not None:
        record.last.failure = TaskFailure(
            "output_collection_failed", record.detail, deterministic=True
        )
    ledger.changed(record)
    ledger.emit("failed", f"{record.id} failed: its outputs could not be collected", record)
    return True
