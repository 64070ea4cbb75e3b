"""Matching what the provider holds for a run against what the journal owns.

On resume and at a run's end the runner asks the backend for every provider object labelled
with this run (:meth:`~altar.execution.ExecutionBackend.list_submissions`). An object whose
``altar.submission`` key is that of a journaled attempt still in doubt (its submit never
answered) is *adopted*: its handle is journaled and the task is polled from there, in whatever
state it is. Any other object the journal does not own (a duplicate, the object of an attempt
given up, one created after its run stopped) is *removed*: cancelled and cleaned up, with a
``removed`` event and an entry in the journal. A backend that cannot list (the default) is left
alone: the in-doubt attempt is then submitted again with its journaled key.

An object carrying the key of a queued task's *next* attempt is adopted as that attempt too: a
submit the provider accepted but reported as unavailable (the connection cut off mid-answer) is
withdrawn and tried again with the same number, so the same key; if the runner was killed
before trying again, that object is the task, not a stray.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from altar.execution.backend import ExecutionBackend
from altar.execution.errors import BackendUnavailableError
from altar.execution.labels import LABEL_ATTEMPT, LABEL_SUBMISSION, LABEL_TASK, submission_key
from altar.execution.run.ledger import Ledger
from altar.execution.run.results import one_line
from altar.execution.state.records import IN_DOUBT, PENDING, QUEUED, Attempt, TaskRecord
from altar.execution.types import ContainerTaskSpec, TaskHandle

__all__ = ["Reconciliation", "reconcile", "start_adopted"]


class Reconciliation:
    """What one reconciliation did; ``absent`` holds in-doubt keys the listing proved unused."""

    def __init__(self) -> None:
        self.listed = False
        self.adopted: list[str] = []
        self.removed: list[str] = []
        self.absent: set[str] = set()


def _in_doubt(records: dict[str, TaskRecord]) -> dict[str, tuple[TaskRecord, Attempt]]:
    found = {}
    for record in records.values():
        last = record.last
        if (
            record.state == QUEUED
            and last is not None
            and last.state == IN_DOUBT
            and last.handle is None
            and last.key
        ):
            found[last.key] = (record, last)
    return found


def _upcoming(records: dict[str, TaskRecord], run_id: str) -> dict[str, TaskRecord]:
    """Queued tasks by the key their next attempt will carry."""
    return {
        submission_key(run_id, record.id, len(record.attempts) + 1): record
        for record in records.values()
        if record.state == QUEUED
    }


async def reconcile(ledger: Ledger, backend: ExecutionBackend, run_id: str) -> Reconciliation:
    """Adopt the run's in-doubt submissions the provider holds; remove what no journal entry owns.

    Never raises for the listing or for a removal that fails (each is reported as an event);
    the journal is flushed and saved if anything changed.
    """
    outcome = Reconciliation()
    try:
        listed = await backend.list_submissions(run_id)
    except asyncio.CancelledError:
        raise
    except BackendUnavailableError as error:
        ledger.emit("backend_unavailable", f"list_submissions: {one_line(error)}")
        return outcome
    except Exception as error:
        ledger.emit("cleanup_failed", f"list_submissions: {one_line(error)}")
        return outcome
    if listed is None:
        return outcome
    outcome.listed = True
    owned = {
        held
        for record in ledger.records.values()
        for attempt in record.attempts
        if (held := attempt.handle_key) is not None
    }
    waiting = _in_doubt(ledger.records)
    upcoming = _upcoming(ledger.records, run_id)
    strays: list[TaskHandle] = []
    for handle in listed:
        if (handle.backend, handle.external_id) in owned:
            continue
        key = handle.labels.get(LABEL_SUBMISSION, "")
        if key in waiting:
            record, attempt = waiting.pop(key)
        elif key in upcoming and upcoming[key].id not in outcome.adopted:
            record = upcoming.pop(key)
            attempt = Attempt(number=len(record.attempts) + 1, key=key)
            record.attempts.append(attempt)
        else:
            strays.append(handle)
            continue
        _adopt(ledger, record, attempt, handle)
        owned.add((handle.backend, handle.external_id))
        outcome.adopted.append(record.id)
    outcome.absent = set(waiting)
    for handle in strays:
        if await _remove(ledger, backend, handle):
            outcome.removed.append(handle.external_id)
    if outcome.adopted or outcome.removed:
        ledger.flush()
        ledger.journal.save()
    return outcome


def _adopt(ledger: Ledger, record: TaskRecord, attempt: Attempt, handle: TaskHandle) -> None:
    attempt.handle = handle
    attempt.adopted = True
    attempt.state = PENDING
    attempt.submitted_at = attempt.submitted_at or time.time()
    ledger.set_state(record, PENDING)
    ledger.changed(record)
    ledger.emit(
        "adopted",
        f"{record.id}: found the task its interrupted submit started ({handle.external_id}); "
        "following it instead of starting another",
        record,
    )


async def _remove(ledger: Ledger, backend: ExecutionBackend, handle: TaskHandle) -> bool:
    task = handle.labels.get(LABEL_TASK, "?")
    try:
        await backend.cancel(handle)
        await backend.cleanup([handle])
    except asyncio.CancelledError:
        raise
    except Exception as error:
        ledger.emit("cancel_failed", f"{task}: removing {handle.external_id}: {one_line(error)}")
        return False
    ledger.journal.removed.append(
        {
            "external_id": handle.external_id,
            "task": task,
            "attempt": handle.labels.get(LABEL_ATTEMPT),
            "key": handle.labels.get(LABEL_SUBMISSION),
            "at": time.time(),
        }
    )
    ledger.emit(
        "removed",
        f"{task}: removed {handle.external_id}, a task of this run the journal does not own",
    )
    return True


async def start_adopted(
    ledger: Ledger,
    backend: ExecutionBackend,
    labelled: Callable[[TaskRecord, Attempt], ContainerTaskSpec],
    task_ids: list[str],
) -> None:
    """Submit each adopted attempt again with its key (found by tests/crash, issue 13).

    A listing only finds the object an interrupted submit made; if that submit was cut off
    between creating and starting it (a Docker container ``created``, an in-process record
    without its supervisor), nothing would ever start it: the task waited for ever, or failed
    after the provider's grace and was run again. A backend that adopts submissions answers
    this submit with the same object, starting it if it never ran. ``labelled``: the spec to
    submit for an attempt (with the run's reserved labels).
    """
    for task_id in task_ids:
        record = ledger.records[task_id]
        attempt = record.last
        if attempt is None or attempt.handle is None:
            continue
        try:
            handle = await backend.submit(labelled(record, attempt))
        except asyncio.CancelledError:
            raise
        except Exception as error:  # the listed handle stays; the next resume tries again
            kind = (
                "backend_unavailable"
                if isinstance(error, BackendUnavailableError)
                else "cleanup_failed"
            )
            ledger.emit(kind, f"{task_id}: starting its adopted task: {one_line(error)}", record)
            continue
        attempt.handle = handle
        ledger.changed(record)
    ledger.flush()
