"""Run a plan on a backend: stage once, submit within limits, poll with backoff, collect, clean up.

The run is a loop of ticks. Each tick starts the submits that fit (they run in the background,
concurrently, so a slow submit never holds up polling), makes one ``poll`` call for every open
task and collects what succeeded. Between ticks it waits: the interval starts at
``poll_interval_s``, doubles while nothing changes and resets on any change; a submit that lands
ends the wait early (its task is polled at once), and a tick that finds a task finished refills
the freed slot straight away, without waiting at all.

The run keeps a journal (:mod:`altar.execution.journal`) in its run directory. Start the same
plan again with the same run directory and the run resumes: it polls the tasks it already
submitted and never has one task running twice at once (see the journal module for the one
crash window a backend that mints fresh ids leaves open).

Failures: a non-deterministic one (``timeout``, ``oom_killed``, ``container_missing``,
``job_failed``, ...) is retried up to ``max_retries`` times; a deterministic one (``exit_<n>``,
``input_digest_mismatch``) stops that task, and its ``failure_detail`` (the log tail) is kept.
A task whose dependency did not succeed is ``skipped``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from altar.execution.backend import ExecutionBackend
from altar.execution.errors import AltarError, BackendUnavailableError, JournalError
from altar.execution.gather import gather_bounded
from altar.execution.journal import (
    CANCELLED,
    FAILED,
    PENDING,
    QUEUED,
    RUNNING,
    SKIPPED,
    SUBMITTING,
    SUCCEEDED,
    Attempt,
    Journal,
    TaskRecord,
    lock_is_held,
    run_lock,
    spec_digest,
)
from altar.execution.plan import Plan, PlanTask
from altar.execution.staging_progress import (
    StagingProgress,
    local_sizes,
)
from altar.execution.transfer_progress import reporting_to
from altar.execution.types import TaskFailure, TaskHandle, TaskState, TaskStatus

__all__ = [
    "CANCEL_REQUEST",
    "BackendCallError",
    "CancelIncompleteError",
    "OutputCollectionError",
    "RunEvent",
    "RunResult",
    "StagingError",
    "TaskResult",
    "cancel_run",
    "run_plan",
    "run_plan_sync",
    "run_status",
]

CANCEL_REQUEST = "cancel-requested"
DEFAULT_MAX_RETRIES = 2
_CANCELS_AT_ONCE = 32  # a provider round trip each; a bound keeps a big run polite
# A run that ends early (Ctrl-C, an error) first lets the submits in flight return for this long:
# a provider that already accepted one keeps running it, so its handle is worth journaling (a
# resumed run then polls it instead of submitting it again and running the task twice).
SUBMIT_GRACE_S = 10.0
TASK_STATES = (QUEUED, SUBMITTING, PENDING, RUNNING, SUCCEEDED, FAILED, SKIPPED, CANCELLED)


class StagingError(AltarError):
    """Staging the plan's inputs failed (a digest mismatch, a missing source, ...)."""


class OutputCollectionError(AltarError):
    """Outputs could not be collected because this machine is out of space; the run stopped.

    The task keeps its success and its outputs are collected when the run resumes, so a full
    disk costs neither the result nor a rerun of the task.
    """


class BackendCallError(AltarError, RuntimeError):
    """The backend's ``poll`` or ``capacity`` failed with an error that is not transient.

    For example a refused credential, or a backend bug. The run stops; its tasks keep running
    and the run resumes from its run directory once the cause is fixed.
    """


class CancelIncompleteError(AltarError):
    """Some tasks could not be cancelled (the provider refused or could not be reached).

    They keep their state in the journal, since they may still be running; cancelling the run
    again retries them. ``task_ids`` names them.
    """

    def __init__(self, message: str, task_ids: list[str]) -> None:
        super().__init__(message)
        self.task_ids = task_ids


@dataclass(frozen=True)
class RunEvent:
    """Something that happened during a run, for progress displays.

    ``kind`` is one of ``staging``, ``staging_progress`` (bytes of the inputs in place so far,
    in ``bytes_done`` and ``bytes_total``; see :mod:`altar.execution.staging_progress`),
    ``staged``, ``resumed``, ``submitted``, ``in_doubt``, ``state`` (a task changed state),
    ``retry``, ``succeeded``, ``failed``, ``skipped``, ``cancelled``, ``cancel_failed``,
    ``backend_unavailable``, ``cleanup_failed``, ``stopping`` (the run is ending early and waits
    for its submits in flight), ``done``.
    """

    kind: str
    message: str
    task_id: str | None = None
    attempt: int | None = None
    state: str | None = None
    counts: Mapping[str, int] = field(default_factory=dict)
    elapsed_s: float = 0.0
    bytes_done: int | None = None  # staging_progress only
    bytes_total: int | None = None  # staging_progress only; None while a size is unknown


@dataclass(frozen=True)
class TaskResult:
    """The outcome of one task (or its current state, from :func:`run_status`)."""

    id: str
    kind: str
    status: str
    attempts: int
    reason: str | None = None
    detail: str | None = None
    exit_code: int | None = None
    duration_s: float | None = None
    external_id: str | None = None
    in_doubt: int = 0  # submits interrupted before their handle was recorded, then redone

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "status": self.status,
            "attempts": self.attempts,
            "reason": self.reason,
            "detail": self.detail,
            "exit_code": self.exit_code,
            "duration_s": self.duration_s,
            "external_id": self.external_id,
            "in_doubt": self.in_doubt,
        }


@dataclass(frozen=True)
class RunResult:
    """Per-task outcomes of a run."""

    run_dir: Path
    backend: str
    tasks: list[TaskResult]
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return all(task.status == SUCCEEDED for task in self.tasks)

    def counts(self) -> dict[str, int]:
        counts = {state: 0 for state in TASK_STATES}
        for task in self.tasks:
            counts[task.status] = counts.get(task.status, 0) + 1
        return {state: n for state, n in counts.items() if n}

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_dir": str(self.run_dir),
            "backend": self.backend,
            "ok": self.ok,
            "elapsed_s": self.elapsed_s,
            "counts": self.counts(),
            "tasks": [task.to_dict() for task in self.tasks],
        }


def _result(record: TaskRecord) -> TaskResult:
    last = record.last
    failure = last.failure if last else None
    if record.state in (SKIPPED, CANCELLED):
        # a cancelled task's last failure may be an earlier attempt's, awaiting its retry
        reason, detail, exit_code = record.state, record.detail, None
    elif failure is not None:
        reason, detail, exit_code = (
            failure.reason,
            record.detail or failure.detail,
            failure.exit_code,
        )
    else:
        reason, detail, exit_code = None, None, None
    return TaskResult(
        id=record.id,
        kind=record.kind,
        status=record.state,
        attempts=len(record.attempts),
        reason=reason,
        detail=detail,
        exit_code=exit_code,
        duration_s=last.duration_s if last else None,
        external_id=last.handle.external_id if last and last.handle else None,
        in_doubt=record.in_doubt,
    )


def _results(journal: Journal, elapsed_s: float = 0.0) -> RunResult:
    tasks = [_result(record) for record in journal.tasks.values()]
    return RunResult(journal.run_dir, journal.backend_type, tasks, elapsed_s)


def _settled(record: TaskRecord) -> bool:
    """Final, and for a success, its outputs collected."""
    return record.final and (record.state != SUCCEEDED or record.outputs_collected)


def _short(external_id: str) -> str:
    """Docker-style 64-hex ids shortened to 12 characters for display."""
    return external_id[:12] if len(external_id) > 24 else external_id


def _resolve(future: asyncio.Future[bool] | None, value: bool) -> None:
    if future is not None and not future.done():
        future.set_result(value)


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class _Run:
    def __init__(
        self,
        plan: Plan,
        backend: ExecutionBackend,
        journal: Journal,
        *,
        max_parallel: int | None,
        max_retries: int,
        poll_interval_s: float,
        max_poll_interval_s: float,
        on_event: Callable[[RunEvent], None] | None,
    ) -> None:
        self.plan = plan
        self.backend = backend
        self.journal = journal
        self.max_parallel = max_parallel
        self.max_retries = max_retries
        self.poll_interval_s = poll_interval_s
        self.max_poll_interval_s = max_poll_interval_s
        self.on_event = on_event
        self.started = time.monotonic()
        self.tasks: dict[str, PlanTask] = {task.id: task for task in plan.tasks}
        self.records = journal.tasks
        # Kept current by set_state, so an event's counts cost O(states), not O(tasks).
        self._counts: Counter[str] = Counter(record.state for record in self.records.values())
        self._commit: asyncio.Future[None] | None = None
        self._submits: set[asyncio.Task[bool]] = set()  # submits in flight, and landed unreaped
        self._landed = False  # a submit landed with news since the tick began
        self._refused = False  # a submit found the provider unavailable since the tick began
        self._waiter: asyncio.Future[bool] | None = None  # the wait between ticks
        self.interval = poll_interval_s  # the backoff: from the last poll to the next
        self.last_poll = -float("inf")  # loop time

    # -- bookkeeping --------------------------------------------------------------------

    def emit(
        self,
        kind: str,
        message: str,
        record: TaskRecord | None = None,
        *,
        bytes_done: int | None = None,
        bytes_total: int | None = None,
    ) -> None:
        if self.on_event is None:
            return
        counts = {state: n for state, n in self._counts.items() if n}
        self.on_event(
            RunEvent(
                kind=kind,
                message=message,
                task_id=record.id if record else None,
                attempt=record.last.number if record and record.last else None,
                state=record.state if record else None,
                counts=counts,
                elapsed_s=time.monotonic() - self.started,
                bytes_done=bytes_done,
                bytes_total=bytes_total,
            )
        )

    def _emit_staging_progress(self, message: str, done: int, total: int | None) -> None:
        self.emit("staging_progress", message, bytes_done=done, bytes_total=total)

    def set_state(self, record: TaskRecord, state: str) -> None:
        """Every change of a record's state goes through here (the counts follow it)."""
        self._counts[record.state] -= 1
        self._counts[state] += 1
        record.state = state

    def changed(self, record: TaskRecord) -> None:
        self.journal.mark(record)

    def flush(self) -> None:
        """Make every marked change durable (one append and fsync)."""
        self.journal.flush()

    async def commit(self) -> None:
        """Make marked changes durable; submits that return together share one fsync.

        The flush runs at the end of the current event-loop turn, after every coroutine that is
        already runnable has recorded its change (group commit). A run cancelled while waiting
        here still writes the change: :meth:`run` flushes in its ``finally``.
        """
        if self._commit is None:
            loop = asyncio.get_running_loop()
            self._commit = loop.create_future()
            self._commit.add_done_callback(lambda f: f.exception())  # retrieved even if unawaited
            loop.call_soon(self._run_commit)
        await asyncio.shield(self._commit)

    def _run_commit(self) -> None:
        future, self._commit = self._commit, None
        assert future is not None
        try:
            self.flush()
        except JournalError as error:
            future.set_exception(error)
        else:
            future.set_result(None)

    def checkpoint(self) -> None:
        """Fold the log into a snapshot once it holds more lines than the plan has tasks."""
        self.journal.flush()
        if self.journal.log_lines > max(256, len(self.records)):
            self.journal.save()

    def in_flight(self) -> list[TaskRecord]:
        return [r for r in self.records.values() if r.state in (SUBMITTING, PENDING, RUNNING)]

    def has_room(self) -> bool:
        """A task is ready and ``max_parallel`` leaves a slot for it (capacity is asked later)."""
        if self.max_parallel is not None and len(self.in_flight()) >= self.max_parallel:
            return False
        return bool(self.ready())

    def pool(self, record: TaskRecord) -> str:
        return self.tasks[record.id].spec.resources.gpu or "cpu"

    # -- phases -------------------------------------------------------------------------

    async def stage(self) -> None:
        if self.journal.staged:
            return
        transfers = self.plan.staged_inputs()
        if transfers:
            self.emit("staging", f"staging {len(transfers)} input(s)")
            tracker = None
            if self.on_event is not None:
                sizes = await asyncio.to_thread(local_sizes, transfers)
                tracker = StagingProgress(
                    self._emit_staging_progress, asyncio.get_running_loop(), sizes
                )
            try:
                with reporting_to(tracker.report if tracker else None):
                    await self.backend.stage_inputs(transfers)
            except (BackendUnavailableError, asyncio.CancelledError):
                raise
            except Exception as error:
                raise StagingError(f"staging inputs failed: {_one_line(error)}") from error
            finally:
                if tracker is not None:
                    tracker.close()
            if tracker is not None:
                tracker.flush()
            self.emit("staged", f"staged {len(transfers)} input(s)")
        self.journal.staged = True
        self.journal.save()

    def resume(self) -> None:
        open_tasks = 0
        for record in self.records.values():
            last = record.last
            if record.state == SUBMITTING and last is not None and last.handle is None:
                # the process stopped inside submit: submit again (see the journal module)
                self.set_state(record, QUEUED)
                record.in_doubt += 1
                record.attempts.pop()
                self.changed(record)
                self.emit(
                    "in_doubt",
                    f"{record.id}: an earlier submit was interrupted before its handle was "
                    "recorded; submitting again",
                    record,
                )
            elif record.state in (PENDING, RUNNING, SUBMITTING):
                open_tasks += 1
        if open_tasks:
            self.emit("resumed", f"resuming: {open_tasks} task(s) already submitted")

    def skip_blocked(self) -> None:
        for record in self.records.values():
            if record.state != QUEUED:
                continue
            for dep in self.plan.dependencies.get(record.id, ()):
                dep_state = self.records[dep].state
                if dep_state in (FAILED, SKIPPED, CANCELLED):
                    self.set_state(record, SKIPPED)
                    record.detail = f"dependency {dep} {dep_state}"
                    self.changed(record)
                    self.emit("skipped", f"{record.id} skipped: {record.detail}", record)
                    break

    def ready(self) -> list[TaskRecord]:
        ready = []
        for record in self.records.values():
            if record.state != QUEUED:
                continue
            deps = self.plan.dependencies.get(record.id, ())
            if all(
                self.records[d].state == SUCCEEDED and self.records[d].outputs_collected
                for d in deps
            ):
                ready.append(record)
        return ready

    async def choose(self, ready: list[TaskRecord]) -> list[TaskRecord]:
        if self.max_parallel is not None:
            ready = ready[: max(0, self.max_parallel - len(self.in_flight()))]
        if not ready:
            return []
        try:
            capacity = await self.backend.capacity()
        except BackendUnavailableError as error:
            self.emit("backend_unavailable", f"capacity: {_one_line(error)}")
            return []
        except Exception as error:
            raise self._call_error("capacity", error) from error
        if not capacity.pools:
            return ready  # autoscaling or no report: submit everything allowed
        free = dict(capacity.pools)
        for record in self.records.values():
            # a submit still in flight may not show in the report yet: count it as taken
            if record.state == SUBMITTING and self.pool(record) in free:
                free[self.pool(record)] -= 1
        chosen = []
        for record in ready:
            pool = self.pool(record)
            if pool not in free:
                chosen.append(record)  # unreported pool: the backend decides at submit
            elif free[pool] > 0:
                free[pool] -= 1
                chosen.append(record)
        return chosen

    def launch(self, batch: list[TaskRecord]) -> None:
        """Journal the intent of every submit in ``batch`` (one fsync), then start them all.

        The submits run concurrently in the background; :meth:`reap` collects them. One that
        lands with news (a handle, a failure) ends the loop's wait; one that finds the provider
        unavailable does not, so the loop backs off before trying again.
        """
        if not batch:
            return
        now = time.time()
        for record in batch:
            number = len(record.attempts) + 1
            record.attempts.append(Attempt(number=number, submitted_at=now))
            self.set_state(record, SUBMITTING)
            self.changed(record)
        self.flush()  # the intent is durable before any submit is called
        for record in batch:
            task = asyncio.ensure_future(self._submit_one(record))
            self._submits.add(task)
            task.add_done_callback(self._on_landed)

    def _on_landed(self, task: asyncio.Task[bool]) -> None:
        if task.cancelled() or task.exception() is not None or task.result():
            self._landed = True  # an error is raised by the loop's next reap
            _resolve(self._waiter, True)

    def reap(self) -> None:
        """Forget the submits that landed; raise the error of one that failed (a journal error)."""
        for task in [t for t in self._submits if t.done()]:
            self._submits.discard(task)
            task.result()

    async def drain(self) -> None:
        """Wait for every submit in flight to land (before cancelling or cleaning up)."""
        if self._submits:
            await asyncio.wait(self._submits)
        self.reap()

    async def abandon(self) -> None:
        """End the submits in flight (the run is ending early).

        Each gets up to :data:`SUBMIT_GRACE_S` to return, so its handle is journaled; the ones
        still in flight after that are cancelled and their attempts stay in doubt.
        """
        tasks = list(self._submits)
        self._submits.clear()
        in_flight = sum(1 for task in tasks if not task.done())
        try:
            if in_flight:
                self.emit(
                    "stopping",
                    f"stopping: waiting up to {SUBMIT_GRACE_S:g}s for {in_flight} submit(s) in "
                    "flight to return, so their tasks are not started twice on resume",
                )
                await asyncio.wait(tasks, timeout=SUBMIT_GRACE_S)
        finally:  # also when the wait itself is interrupted (a second Ctrl-C)
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.wait(tasks)
        for task in tasks:  # retrieved, so none is reported as never retrieved
            if not task.cancelled():
                task.exception()

    def now(self) -> float:
        """The clock of the poll schedule (the event loop's; a test may fake it)."""
        return asyncio.get_running_loop().time()

    async def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True if a submit landed meanwhile (or before)."""
        if self._landed:
            return True
        seconds = max(0.0, seconds)
        if not self._submits:
            await asyncio.sleep(seconds)
            return False
        # a plain future, not asyncio.timeout: that would swallow a cancel requested before it
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        self._waiter = waiter
        timer = loop.call_later(seconds, _resolve, waiter, False)
        try:
            return await waiter
        finally:
            timer.cancel()
            self._waiter = None

    async def _submit_one(self, record: TaskRecord) -> bool:
        attempt = record.attempts[-1]
        spec = self.tasks[record.id].spec
        try:
            handle = await self.backend.submit(spec)
        except BackendUnavailableError as error:
            record.attempts.pop()
            self.set_state(record, QUEUED)
            self.changed(record)
            self.flush()
            self._refused = True
            self.emit("backend_unavailable", f"{record.id}: submit: {_one_line(error)}", record)
            return False
        except ValueError as error:
            failure = TaskFailure("submit_rejected", _one_line(error), deterministic=True)
            self._fail_attempt(record, attempt, failure)
            self.flush()
            return True
        except Exception as error:
            failure = TaskFailure("submit_failed", _one_line(error), deterministic=False)
            self._fail_attempt(record, attempt, failure)
            self.flush()
            return True
        # no await between submit returning and the journal write: a cancelled run keeps it
        attempt.handle = handle
        attempt.submitted_at = time.time()  # accepted now; the intent was written before
        attempt.state = PENDING
        self.set_state(record, PENDING)
        self.changed(record)
        await self.commit()
        self.emit("submitted", f"{record.id} submitted ({_short(handle.external_id)})", record)
        return True

    def _fail_attempt(self, record: TaskRecord, attempt: Attempt, failure: TaskFailure) -> None:
        attempt.state = FAILED
        attempt.failure = failure
        attempt.finished_at = attempt.finished_at or time.time()
        if not failure.deterministic and len(record.attempts) <= self.max_retries:
            self.set_state(record, QUEUED)
            self.emit(
                "retry",
                f"{record.id} attempt {attempt.number} failed ({failure.reason}); retrying",
                record,
            )
        else:
            self.set_state(record, FAILED)
            self.emit("failed", f"{record.id} failed: {failure.reason}", record)
        self.changed(record)

    async def poll(self) -> tuple[bool, bool]:
        """One ``poll`` call for every open task: (anything changed, any attempt finished)."""
        open_records = [
            r for r in self.records.values() if r.state in (PENDING, RUNNING) and r.last
        ]
        if not open_records:
            return False, False
        handles: list[TaskHandle] = [r.attempts[-1].handle for r in open_records]  # type: ignore[misc]
        try:
            statuses = await self.backend.poll(handles)
        except BackendUnavailableError as error:
            self.emit("backend_unavailable", f"poll: {_one_line(error)}")
            return False, False
        except Exception as error:
            raise self._call_error("poll", error) from error
        if len(statuses) != len(handles):
            raise BackendCallError(
                f"backend {self.backend.name!r} returned {len(statuses)} statuses for "
                f"{len(handles)} handles; poll must return one status per handle"
            )
        progress = False
        finished: list[tuple[TaskRecord, TaskStatus]] = []
        now = time.time()
        for record, status in zip(open_records, statuses, strict=True):
            attempt = record.attempts[-1]
            new = status.state.value
            # against the task's state, not the attempt's: a journal written by an older
            # runner stopped mid-poll may hold a finished attempt of a task still open
            if new == record.state:
                continue
            progress = True
            self.changed(record)
            if status.state is TaskState.RUNNING:
                attempt.started_at = attempt.started_at or now
            if status.state.is_terminal:
                # the attempt is marked finished with its task, after the failure detail is
                # read: a run stopped while reading it polls the task again on resume
                finished.append((record, status))
                continue
            attempt.state = new
            self.set_state(record, new)
            self.emit("state", f"{record.id} {new}", record)
        details = await asyncio.gather(
            *(self._detail(record, status) for record, status in finished)
        )
        for (record, status), detail in zip(finished, details, strict=True):
            attempt = record.attempts[-1]
            attempt.state = status.state.value
            attempt.finished_at = now
            if status.state is TaskState.SUCCEEDED:
                self.set_state(record, SUCCEEDED)
                attempt.failure = None
                continue
            failure = status.failure or TaskFailure("job_failed", "backend gave no failure")
            record.detail = detail or failure.detail
            self._fail_attempt(record, attempt, failure)
        self.flush()
        return progress, bool(finished)

    def _call_error(self, call: str, error: Exception) -> BackendCallError:
        return BackendCallError(
            f"backend {self.backend.name!r} {call} failed: {_one_line(error)}; the run stopped "
            f"and its tasks keep running: fix the cause, then resume it with the same run directory"
        )

    async def _detail(self, record: TaskRecord, status: TaskStatus) -> str | None:
        if status.state is not TaskState.FAILED:
            return None
        try:
            return await self.backend.failure_detail(status.handle)
        except asyncio.CancelledError:
            raise
        except Exception:
            return None

    async def collect(self) -> bool:
        """Collect the outputs of tasks that succeeded; True if any task was settled by it.

        A collect the provider did not answer is no news (it is tried again, backing off).
        """
        pending = [
            r for r in self.records.values() if r.state == SUCCEEDED and not r.outputs_collected
        ]
        if not pending:
            return False
        return any(await self._all_journaled([self._collect_one(r) for r in pending]))

    async def _collect_one(self, record: TaskRecord) -> bool:
        outputs = self.tasks[record.id].spec.outputs
        try:
            if outputs:
                await self.backend.collect_outputs(list(outputs))
        except BackendUnavailableError as error:
            self.emit("backend_unavailable", f"{record.id}: collect: {_one_line(error)}", record)
            return False
        except OSError as error:
            if error.errno not in (errno.ENOSPC, errno.EDQUOT):
                return self._collection_failed(record, error)
            raise OutputCollectionError(
                f"{record.id}: its outputs could not be collected: {_one_line(error)}; the task "
                "succeeded and keeps its result: free space and resume the run to collect them"
            ) from error
        except Exception as error:
            return self._collection_failed(record, error)
        record.outputs_collected = True
        self.changed(record)
        duration = record.last.duration_s if record.last else None
        took = f" in {duration:.1f}s" if duration is not None else ""
        self.emit("succeeded", f"{record.id} succeeded{took}", record)
        return True

    def _collection_failed(self, record: TaskRecord, error: BaseException) -> bool:
        self.set_state(record, FAILED)
        record.detail = _one_line(error)
        if record.last is not None:
            record.last.failure = TaskFailure(
                "output_collection_failed", record.detail, deterministic=True
            )
        self.changed(record)
        self.emit("failed", f"{record.id} failed: its outputs could not be collected", record)
        return True

    async def cancel_all(self, reason: str) -> list[str]:
        """Cancel every unfinished task, many at once; return the ids whose cancel failed.

        A task whose cancel failed keeps its state (it may still be running), so that
        cancelling again retries it; each failure is reported as a ``cancel_failed`` event.
        """
        unfinished = [record for record in self.records.values() if not record.final]
        outcomes = await self._all_journaled(
            [self._cancel_one(record, reason) for record in unfinished], limit=_CANCELS_AT_ONCE
        )
        return [record.id for record, ok in zip(unfinished, outcomes, strict=True) if not ok]

    async def _all_journaled(
        self, calls: list[Coroutine[Any, Any, bool]], *, limit: int | None = None
    ) -> list[bool]:
        """Run ``calls`` to their ends, journal what they changed, then raise the first error.

        One call raising must neither stop the others midway (they act on the provider) nor
        keep what they did out of the journal.
        """
        try:
            return await gather_bounded(calls, limit)
        finally:
            self.flush()

    async def _cancel_one(self, record: TaskRecord, reason: str) -> bool:
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
                self.emit("in_doubt", f"{record.id}: {detail}", record)
            else:
                try:
                    await self.backend.cancel(last.handle)
                except asyncio.CancelledError:
                    raise
                except Exception as error:
                    self.emit("cancel_failed", f"{record.id}: cancel: {_one_line(error)}", record)
                    return False
            last.state = FAILED
            last.failure = TaskFailure("cancelled", reason)
            last.finished_at = time.time()
        self.set_state(record, CANCELLED)
        record.detail = detail
        self.changed(record)
        self.emit("cancelled", f"{record.id} cancelled", record)
        return True

    async def cleanup(self) -> None:
        # a backend that names tasks by spec hands out one external_id for every attempt
        unique = {
            (attempt.handle.backend, attempt.handle.external_id): attempt.handle
            for record in self.records.values()
            if record.final and not record.cleaned  # a task whose cancel failed may still run
            for attempt in record.attempts
            if attempt.handle is not None
        }
        handles = list(unique.values())
        if handles:
            try:
                await self.backend.cleanup(handles)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                self.emit("cleanup_failed", f"cleanup: {_one_line(error)}")
                return
        for record in self.records.values():
            record.cleaned = record.final  # one still running (its cancel failed): a later run

    # -- the loop -----------------------------------------------------------------------

    async def run(self) -> RunResult:
        try:
            self.resume()
            await self.stage()
            cancel_file = self.journal.run_dir / CANCEL_REQUEST
            while True:
                if cancel_file.exists():
                    await self.abandon()  # submits in flight get the grace, not forever
                    await self.cancel_all("cancelled by `altar cancel`")
                    cancel_file.unlink(missing_ok=True)
                    break
                self._landed = False
                refused, self._refused = self._refused, False
                self.reap()
                self.skip_blocked()
                collected = await self.collect()
                batch = await self.choose(self.ready())
                self.launch(batch)
                changed = finished = False
                due = self.now() >= self.last_poll + self.interval
                if due:  # a tick woken early by a submit landing does not poll before its time
                    self.last_poll = self.now()
                    changed, finished = await self.poll()
                collected = await self.collect() or collected
                self.skip_blocked()
                self.checkpoint()
                self.reap()
                if not self._submits and all(_settled(r) for r in self.records.values()):
                    break
                # a launch resets the backoff, unless it only retries submits that found the
                # provider down: those are waited out like a poll that finds it down
                if changed or collected or (batch and not refused):
                    self.interval = self.poll_interval_s
                    if (finished or collected) and self.has_room():
                        continue  # a slot was freed or a task became ready: fill it now
                elif due:
                    self.interval = min(self.max_poll_interval_s, self.interval * 2)
                if await self.wait(self.last_poll + self.interval - self.now()):
                    self.interval = self.poll_interval_s  # a submit landed: its task is news
            await self.drain()
            await self.cleanup()
            self.journal.finished = all(record.final for record in self.records.values())
            self.journal.save()
            result = _results(self.journal, time.monotonic() - self.started)
            summary = ", ".join(f"{n} {state}" for state, n in result.counts().items())
            self.emit("done", f"{len(result.tasks)} task(s): {summary}")
            return result
        finally:
            try:
                await self.abandon()
            finally:
                # a cancelled or crashed run keeps what it learned
                with contextlib.suppress(JournalError):
                    self.flush()


def _as_stored(options: Mapping[str, Any]) -> Any:
    """Options as the journal keeps them (JSON), so a tuple equals the list it was saved as."""
    return json.loads(json.dumps(dict(options), sort_keys=True, default=str))


def _options_text(options: Mapping[str, Any]) -> str:
    if not options:
        return "(none)"
    return ", ".join(
        f"{key}={json.dumps(value, default=str)}" for key, value in sorted(options.items())
    )


def _open_journal(
    plan: Plan, backend: ExecutionBackend, run_dir: Path, options: dict[str, Any]
) -> Journal:
    digests = {task.id: spec_digest(task.spec) for task in plan.tasks}
    if Journal.exists(run_dir):
        journal = Journal.load(run_dir)
        if journal.backend_type != backend.name:
            raise JournalError(
                f"{run_dir} is a run on backend {journal.backend_type!r}, not {backend.name!r}; "
                "use a new run directory"
            )
        if list(journal.tasks) != list(digests):
            raise JournalError(
                f"{run_dir} holds a run of other tasks ({', '.join(journal.tasks)}); "
                "use a new run directory for this plan"
            )
        for task_id, digest in digests.items():
            if journal.tasks[task_id].spec_sha256 != digest:
                raise JournalError(
                    f"{run_dir}: task {task_id!r} changed since this run started; "
                    "use a new run directory for the changed plan"
                )
        if _as_stored(options) != _as_stored(journal.backend_options):
            # Another engine, namespace or data root would not find the tasks already
            # submitted (they would be reported missing and run again).
            started = _options_text(journal.backend_options)
            raise JournalError(
                f"{run_dir} was started with backend options {started}, not "
                f"{_options_text(options)}; resume it with the same options (altar run "
                "--option KEY=VALUE) or use a new run directory"
            )
        return journal
    journal = Journal(
        run_dir=run_dir,
        backend_type=backend.name,
        backend_options=options,
        plan_source=plan.source,
        tasks={
            task.id: TaskRecord(task.id, task.spec.kind, digests[task.id]) for task in plan.tasks
        },
    )
    journal.save()
    return journal


async def run_plan(
    plan: Plan,
    backend: ExecutionBackend,
    *,
    run_dir: str | Path,
    max_parallel: int | None = None,
    max_retries: int | None = None,
    poll_interval_s: float | None = None,
    max_poll_interval_s: float = 5.0,
    on_event: Callable[[RunEvent], None] | None = None,
    backend_options: Mapping[str, Any] | None = None,
) -> RunResult:
    """Run ``plan`` on ``backend``, journaling into ``run_dir`` (resumed if it holds a journal).

    ``max_parallel`` and ``max_retries`` default to the plan's values (then unlimited and 2).
    ``backend_options`` (default: the plan's, when its backend type is ``backend.name``) are
    recorded so ``altar status`` and ``altar cancel`` can build the backend again.
    Polling starts every ``poll_interval_s`` (default: the backend's ``poll_interval_s``) and
    doubles up to ``max_poll_interval_s`` while nothing changes; each tick makes one ``poll``
    call for every open task. Submits run concurrently in the background; a slot freed by a
    finished task is refilled at once.
    """
    run_dir = Path(run_dir)
    if poll_interval_s is None:
        poll_interval_s = backend.poll_interval_s
    if max_parallel is None:
        max_parallel = plan.max_parallel
    if max_retries is None:
        max_retries = plan.max_retries if plan.max_retries is not None else DEFAULT_MAX_RETRIES
    if max_parallel is not None and max_parallel < 1:
        raise ValueError(f"max_parallel must be at least 1, got {max_parallel}")
    if max_retries < 0:
        raise ValueError(f"max_retries must be zero or more, got {max_retries}")
    with run_lock(run_dir):
        if backend_options is None and plan.backend_type == backend.name:
            backend_options = plan.backend_options
        journal = _open_journal(plan, backend, run_dir, dict(backend_options or {}))
        run = _Run(
            plan,
            backend,
            journal,
            max_parallel=max_parallel,
            max_retries=max_retries,
            poll_interval_s=poll_interval_s,
            max_poll_interval_s=max_poll_interval_s,
            on_event=on_event,
        )
        return await run.run()


def run_plan_sync(plan: Plan, backend: ExecutionBackend, **kwargs: Any) -> RunResult:
    """:func:`run_plan` for synchronous callers (starts its own event loop)."""
    return asyncio.run(run_plan(plan, backend, **kwargs))


async def run_status(run_dir: str | Path, backend: ExecutionBackend | None = None) -> RunResult:
    """The journal's view of a run, with open tasks polled once on ``backend`` if given.

    Read-only: the journal is not changed (the run that owns it records what it sees).
    """
    journal = Journal.load(Path(run_dir))
    if backend is not None:
        open_records = [
            r
            for r in journal.tasks.values()
            if r.state in (PENDING, RUNNING) and r.last is not None and r.last.handle is not None
        ]
        if open_records:
            handles = [r.attempts[-1].handle for r in open_records]
            statuses = await backend.poll(handles)  # type: ignore[arg-type]
            for record, status in zip(open_records, statuses, strict=True):
                record.state = status.state.value
                record.last.state = status.state.value  # type: ignore[union-attr]
                record.last.failure = status.failure  # type: ignore[union-attr]
    return _results(journal)


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
        plan_free = _Run(
            Plan(journal.backend_type, {}, [], source=journal.plan_source),
            backend,
            journal,
            max_parallel=None,
            max_retries=0,
            poll_interval_s=0.0,
            max_poll_interval_s=0.0,
            on_event=None,
        )
        try:
            failed = await plan_free.cancel_all("cancelled by `altar cancel`")
        finally:  # stopped midway (Ctrl-C): keep the cancels that were made
            with contextlib.suppress(JournalError):
                plan_free.flush()
        await plan_free.cleanup()
        journal.finished = not failed
        journal.save()
    if failed:
        raise CancelIncompleteError(
            f"could not cancel {len(failed)} task(s) of {run_dir}: {', '.join(failed)}; they "
            "may still be running (see `altar status`); cancel again to retry them",
            failed,
        )
    return "cancelled"
