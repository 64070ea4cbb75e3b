"""Cancelling a run's tasks and releasing what finished tasks hold: plain functions.

Both the tick loop (a cancel request, an early end) and :func:`cancel_run` (a run no process
drives, or a request to the process that does) call these over a
:class:`~altar.execution.run.ledger.Ledger`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

from altar.execution.backend import ExecutionBackend
from altar.execution.errors import CancelIncompleteError, JournalError
from altar.execution.gather import gather_bounded
from altar.execution.run.ledger import Ledger
from altar.execution.run.reconciling import reconcile
from altar.execution.run.results import one_line
from altar.execution.state.journal import (
    CANCELLED,
    FAILED,
    IN_DOUBT,
    PENDING,
    RUNNING,
    SUBMITTING,
    Journal,
    TaskRecord,
    lock_is_held,
    run_lock,
)
from altar.execution.types import TaskFailure, TaskHandle

__all__ = [
    "CANCELS_AT_ONCE",
    "CANCEL_REQUEST",
    "cancel_all",
    "cancel_one",
    "cancel_run",
    "cleanup_finished",
]

#: The file `altar cancel` leaves in a run directory to ask the process driving it to cancel.
CANCEL_REQUEST = "cancel-requested"

CANCELS_AT_ONCE = 32  # a provider round trip each; a bound keeps a big run polite


async def cancel_all(ledger: Ledger, backend: ExecutionBackend, reason: str) -> list[str]:
    """Cancel every unfinished task, many at once; return the ids whose cancel failed.

    A task whose cancel failed keeps its state (it may still be running), so that cancelling
    again retries it; each failure is reported as a ``cancel_failed`` event. Every cancel runs
    to its end and what they changed is journaled before an error is raised.
    """
    unfinished = [record for record in ledger.records.values() if not record.final]
    try:
        outcomes = await gather_bounded(
            [cancel_one(ledger, backend, record, reason) for record in unfinished],
            CANCELS_AT_ONCE,
        )
    finally:
        ledger.flush()
    return [record.id for record, ok in zip(unfinished, outcomes, strict=True) if not ok]


async def cancel_one(
    ledger: Ledger, backend: ExecutionBackend, record: TaskRecord, reason: str
) -> bool:
    """Cancel one task (journaled, not flushed); False if the provider refused."""
    last = record.last
    detail = reason
    if last is not None and record.state in (SUBMITTING, PENDING, RUNNING):
        if last.handle is None:
            # its submit was abandoned (it outlasted the grace): the provider may have
            # started a task for it, and without a handle nothing can cancel that task
            record.in_doubt += 1
            detail = (
                f"{reason}; its submit had not returned, so a task the provider may have "
                "started for it could not be cancelled"
            )
            ledger.emit("in_doubt", f"{record.id}: {detail}", record)
        else:
            try:
                await backend.cancel(last.handle)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                ledger.emit("cancel_failed", f"{record.id}: cancel: {one_line(error)}", record)
                return False
        last.state = FAILED
        last.failure = TaskFailure("cancelled", reason)
        last.finished_at = time.time()
    elif last is not None and last.state == IN_DOUBT and last.handle is None:
        # queued to be submitted again after a submit that never answered: the provider may
        # hold a task for it that only a backend that lists its objects can find (and remove)
        detail = (
            f"{reason}; an earlier submit had not returned, so a task the provider may have "
            "started for it is removed only by a backend that lists the run's tasks"
        )
        last.state = FAILED
        last.failure = TaskFailure("cancelled", reason)
        last.finished_at = time.time()
    ledger.set_state(record, CANCELLED)
    record.detail = detail
    ledger.changed(record)
    ledger.emit("cancelled", f"{record.id} cancelled", record)
    return True


#: Handles per ``cleanup`` call: the journal holds handles compact (``compact_handle``), and a
#: call over every task of a 100,000-task run would build them all at once (about 45 MB).
CLEANUP_BATCH = 10_000


async def cleanup_finished(ledger: Ledger, backend: ExecutionBackend) -> None:
    """``cleanup`` every handle of every finished task not cleaned yet (a call per
    :data:`CLEANUP_BATCH` handles: ``cleanup`` is idempotent, so one that fails midway leaves
    every task to clean again by a later run)."""
    # a backend that names tasks by spec hands out one external_id for every attempt
    seen: dict[str, set[str]] = {}  # external ids by backend (no key tuple per handle)
    batch: list[TaskHandle] = []
    for record in ledger.records.values():
        if not record.final or record.cleaned:  # a task whose cancel failed may still run
            continue
        for attempt in record.attempts:
            handle = attempt.handle
            if handle is None:
                continue
            ids = seen.setdefault(handle.backend, set())
            if handle.external_id in ids:
                continue
            ids.add(handle.external_id)
            batch.append(handle)
            if len(batch) >= CLEANUP_BATCH and not await _cleanup(ledger, backend, batch):
                return
    if batch and not await _cleanup(ledger, backend, batch):
        return
    for record in ledger.records.values():
        record.cleaned = record.final  # one still running (its cancel failed): a later run


async def _cleanup(ledger: Ledger, backend: ExecutionBackend, batch: list[TaskHandle]) -> bool:
    """One ``cleanup`` call over ``batch`` (emptied); False if it failed (and was said)."""
    try:
        await backend.cleanup(list(batch))
    except asyncio.CancelledError:
        raise
    except Exception as error:
        ledger.emit("cleanup_failed", f"cleanup: {one_line(error)}")
        return False
    finally:
        batch.clear()
    return True


async def cancel_run(run_dir: str | Path, backend: ExecutionBackend | None = None) -> str:
    """Cancel a run: directly if no process drives it, else ask the driving process to.

    Returns ``"cancelled"`` or ``"requested"``. ``backend`` is needed for the direct case, which
    raises :class:`CancelIncompleteError` if some tasks could not be cancelled (call it again
    to retry them).
    """
    run_dir = Path(run_dir)
    journal = Journal.load(run_dir)
    if lock_is_held(run_dir):
        (run_dir / CANCEL_REQUEST).write_text("cancel\n")
        return "requested"
    if backend is None:
        raise ValueError("cancelling a run that no process drives needs its backend")
    with run_lock(run_dir):
        journal = Journal.load(run_dir)
        ledger = Ledger(journal)
        try:
            failed = await cancel_all(ledger, backend, "cancelled by `altar cancel`")
        finally:  # stopped midway (Ctrl-C): keep the cancels that were made
            with contextlib.suppress(JournalError):
                ledger.flush()
        await cleanup_finished(ledger, backend)
        await reconcile(ledger, backend, journal.run_id)
        journal.finished = not failed
        journal.save()
    if failed:
        raise CancelIncompleteError(
            f"could not cancel {len(failed)} task(s) of {run_dir}: {', '.join(failed)}; they "
            "may still be running (see `altar status`); cancel again to retry them",
            failed,
        )
    return "cancelled"
