"""Submits in the background: the intent journaled first, the handle as soon as it returns.

:class:`Submits` starts a batch of submits concurrently (after one fsync of their intent), lets
the tick loop know when one lands with news, and, when the run ends early, gives the submits in
flight a grace period to return so their handles are journaled. How the runner treats what
``submit`` raises (the submit-error rule):

- ``ValueError`` (``UnsupportedCapabilityError`` included): ``submit_rejected``, deterministic;
- ``BackendUnavailableError``: the attempt is withdrawn and tried again later (no attempt used);
- anything else: ``submit_failed``, retried while attempts remain.

Every submit carries the run's identity as reserved labels (:mod:`altar.execution.labels`):
the attempt's submission key is journaled with the intent, before ``submit`` is called, and an
attempt submitted again after an in-doubt submit carries that same key. Such a resubmit counts
as a possible second execution (``reexecuted``) unless the backend adopts submissions by key or
its listing showed that the first never reached the provider.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from altar.execution.backend import ExecutionBackend
from altar.execution.errors import BackendUnavailableError, ProviderLimitError
from altar.execution.labels import submission_key, submission_labels
from altar.execution.run.budget import RetryBudget
from altar.execution.run.ledger import Ledger
from altar.execution.run.observing import fail_attempt
from altar.execution.run.results import one_line
from altar.execution.state.records import IN_DOUBT, PENDING, QUEUED, SUBMITTING, Attempt, TaskRecord
from altar.execution.types import ContainerTaskSpec, TaskFailure

if TYPE_CHECKING:
    from altar.execution.run.lanes import Lanes

__all__ = ["SUBMIT_WINDOW", "Submits"]

#: The most submits in flight at once, by default. It bounds the crash window: at any instant at
#: most this many attempts are journaled ``submitting`` without a handle, which a backend that
#: can neither list nor adopt may run twice on resume (each marked ``reexecuted``). A backend
#: that adopts by key may open it wider (``ExecutionBackend.submit_window``).
SUBMIT_WINDOW = 64
# what a submit's task returns: refused (the provider is down), a handle, a failure
_REFUSED, _HANDLE, _FAILED = 0, 1, 2


def _short(external_id: str) -> str:
    """Docker-style 64-hex ids shortened to 12 characters for display."""
    return external_id[:12] if len(external_id) > 24 else external_id


class Submits:
    """The submits of one run, in flight or landed and not yet reaped."""

    def __init__(
        self,
        ledger: Ledger,
        backend: ExecutionBackend,
        specs: Mapping[str, ContainerTaskSpec],
        *,
        run_id: str,
        budget: RetryBudget,
        grace_s: float,
        on_news: Callable[[], None],
        window: int = SUBMIT_WINDOW,
        lanes: Lanes | None = None,
    ) -> None:
        self.ledger = ledger
        self.backend = backend
        self.specs = specs
        self.run_id = run_id
        #: keys of in-doubt attempts a listing proved the provider never received
        self.absent: set[str] = set()
        self._resumed: dict[str, bool] = {}  # in-doubt attempts in flight again: re-executed?
        self.budget = budget
        self.grace_s = grace_s
        self._on_news = on_news
        self.tasks: set[asyncio.Task[int]] = set()
        self.refused = False  # a submit found the provider unavailable since last asked
        #: limit refusals (task id, error) since the loop last looked
        self.limits: list[tuple[str, ProviderLimitError]] = []
        self.lanes = lanes  # where each attempt goes (a routed run's lanes), if not one backend
        #: the most submits in flight at once, so the most attempts a crash leaves in doubt
        self.window = max(1, window)
        self._active = 0  # submits started and not yet returned
        self._queue: deque[TaskRecord] = deque()  # launched, waiting for room in the window
        #: ids of the queued tasks (still ``queued`` in the journal; the scheduler skips them)
        self.queued: set[str] = set()
        #: a submit returned a handle since the loop last polled (its task may be done already)
        self.landed = False
        #: ids of tasks whose handle returned and is not yet durable and said (see ``settle``)
        self.landing: set[str] = set()
        self._settled: asyncio.Future[None] | None = None  # resolved as a landing ends

    def __bool__(self) -> bool:
        return bool(self.tasks) or bool(self._queue)

    def launch(self, batch: list[TaskRecord]) -> None:
        """Queue ``batch`` for submitting; at most ``window`` submits are ever in flight.

        A queued task stays ``queued`` in the journal: its intent (``submitting`` and its key) is
        journaled only when its submit is about to be called, so a crash leaves at most
        ``window`` attempts in doubt, however large the batch. The intents of the submits
        started in one event-loop turn share one fsync (with the handles landed in that turn).
        One that lands with news (a handle, a failure) calls ``on_news``; one that finds the
        provider unavailable does not, so the loop backs off before trying again.
        """
        for record in batch:
            if record.id not in self.queued:
                self.queued.add(record.id)
                self._queue.append(record)
        if self._refill():
            self.ledger.flush()  # the intents are durable before any of these submits is called

    def _refill(self, *, durable: bool = True) -> bool:
        """Start queued submits while the window has room; True if any started.

        ``durable``: the caller flushes before its next await (else each submit awaits the
        group commit of its intent before calling ``submit``). No await here, so the loop
        cannot interleave.
        """
        started = False
        while self._queue and self._active < self.window:
            record = self._queue.popleft()
            self.queued.discard(record.id)
            self._start(record, durable=durable)
            started = True
        if started and not self._queue:
            self.queued = set()  # a set keeps its table when emptied: 8 MB after 100,000 tasks
        return started

    @property
    def waiting(self) -> deque[TaskRecord]:
        """The queued tasks, in order."""
        return self._queue

    def withdraw_queued(self, like: TaskRecord | None = None) -> None:
        """Give the queued (not yet started) tasks back to the scheduler; they stay ``queued``.

        ``like``: only those going to the same lane as it (the other lanes' provider is up).
        """
        lanes, lane = self.lanes, None
        if like is not None and lanes is not None and lanes.routed is not None:
            lane = lanes.lane(like)
        kept: deque[TaskRecord] = deque()
        for record in self._queue:
            if lanes is not None and lane is not None and lanes.lane(record) != lane:
                kept.append(record)  # another lane's: its provider is up
            else:
                self.ledger.touch(record)  # ready again
        self._queue = kept
        self.queued = {r.id for r in kept}

    def _start(self, record: TaskRecord, *, durable: bool) -> None:
        last = record.last
        if last is not None and last.state == IN_DOUBT and last.handle is None:
            # submitted again with the key journaled before its first submit, never a new one
            last.key = last.key or submission_key(self.run_id, record.id, last.number)
            last.state = SUBMITTING
            bump = not self.backend.adopts_submissions and last.key not in self.absent
            if bump:
                last.reexecuted += 1  # the first may have started: this may run it twice
            self._resumed[record.id] = bump
        else:
            number = len(record.attempts) + 1
            key = submission_key(self.run_id, record.id, number)
            record.attempts.append(Attempt(number=number, submitted_at=time.time(), key=key))
        self.ledger.set_state(record, SUBMITTING)
        self.ledger.changed(record)
        self._active += 1
        task = asyncio.ensure_future(self._submit_one(record, durable=durable))
        self.tasks.add(task)
        task.add_done_callback(self._landed)

    def _withdraw(self, record: TaskRecord, attempt: Attempt) -> None:
        """Undo an intent whose submit did not reach the provider (the task is ``queued``)."""
        if record.id in self._resumed:  # an in-doubt attempt: keep it, and its key
            if self._resumed.pop(record.id):
                attempt.reexecuted -= 1  # this submit did not reach the provider
            attempt.state = IN_DOUBT
        else:
            record.attempts.pop()  # the same number, so the same key, next time
        self.ledger.set_state(record, QUEUED)
        self.ledger.changed(record)

    def _landed(self, task: asyncio.Task[int]) -> None:
        if task.cancelled() or task.exception() is not None:
            self._on_news()  # an error is raised by the loop's next reap
        elif task.result() == _FAILED or (task.result() == _HANDLE and not self._queue):
            # a handle while more of the batch waits is no news the loop can act on before
            # its next poll: waking it for each would scan every task once per submit
            self._on_news()

    async def settle(self) -> None:
        """Let the handles returned so far be journaled and said (``submitted``) before a poll.

        Their group commit is due at the end of this event-loop turn, so this takes a few turns
        at most (handles returning meanwhile are not waited for); a task's ``submitted`` then
        always comes before its first polled state.
        """
        waiting = set(self.landing)
        while waiting & self.landing:
            self._settled = asyncio.get_running_loop().create_future()
            await self._settled

    def reap(self) -> None:
        """Forget the submits that landed; raise the error of one that failed (a journal error)."""
        for task in [t for t in self.tasks if t.done()]:
            self.tasks.discard(task)
            task.result()

    async def drain(self) -> None:
        """Wait for every submit in flight to land (before cancelling or cleaning up)."""
        while self.tasks:  # a submit that returns starts the next queued one
            await asyncio.wait(self.tasks)
            self.reap()

    async def abandon(self) -> None:
        """End the submits in flight (the run is ending early).

        Each gets up to ``grace_s`` to return, so its handle is journaled; the ones still in
        flight after that are cancelled and their attempts stay in doubt.
        """
        self.withdraw_queued()  # never journaled: nothing to undo
        tasks = list(self.tasks)
        self.tasks.clear()
        in_flight = self._active  # submits not yet returned (a landed one may await its commit)
        try:
            if in_flight:
                self.ledger.emit(
                    "stopping",
                    f"stopping: waiting up to {self.grace_s:g}s for {in_flight} submit(s) in "
                    "flight to return, so their tasks are not started twice on resume",
                )
                await asyncio.wait(tasks, timeout=self.grace_s)
        finally:  # also when the wait itself is interrupted (a second Ctrl-C)
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.wait(tasks)
        for task in tasks:  # retrieved, so none is reported as never retrieved
            if not task.cancelled():
                task.exception()

    async def _submit_one(self, record: TaskRecord, *, durable: bool) -> int:
        ledger = self.ledger
        attempt = record.attempts[-1]
        spec = self.labelled(record, attempt)
        try:
            if not durable:  # the intent and its key are durable before submit is called
                await ledger.commit()
        except BaseException as error:
            self._active -= 1
            if isinstance(error, asyncio.CancelledError):
                self._withdraw(record, attempt)  # never submitted: nothing is in doubt
            raise
        try:
            handle = await self.backend.submit(spec)
        except BackendUnavailableError as error:
            self._returned()
            self._withdraw(record, attempt)
            # the provider is down: the loop backs off, then chooses again
            self.withdraw_queued(like=record)
            ledger.flush()
            self.refused = True
            if isinstance(error, ProviderLimitError):
                self.limits.append((record.id, error))  # the lane's hold says it, once
            else:
                ledger.emit(
                    "backend_unavailable", f"{record.id}: submit: {one_line(error)}", record
                )
            return _REFUSED
        except ValueError as error:
            self._returned()
            self._resumed.pop(record.id, None)
            failure = TaskFailure("submit_rejected", one_line(error), deterministic=True)
            fail_attempt(ledger, record, attempt, failure, budget=self.budget)
            await ledger.commit()
            return _FAILED
        except asyncio.CancelledError:
            self._active -= 1
            raise
        except Exception as error:
            self._returned()
            self._resumed.pop(record.id, None)
            failure = TaskFailure("submit_failed", one_line(error), deterministic=False)
            fail_attempt(ledger, record, attempt, failure, budget=self.budget)
            await ledger.commit()
            return _FAILED
        # no await between submit returning and the journal write: a cancelled run keeps it
        self._resumed.pop(record.id, None)
        attempt.handle = handle
        attempt.submitted_at = time.time()  # accepted now; the intent was written before
        attempt.state = PENDING
        ledger.set_state(record, PENDING)
        ledger.changed(record)
        self.landing.add(record.id)
        try:
            self._returned()  # the next intents share this handle's fsync
            await ledger.commit()
        finally:
            self.landing.discard(record.id)
            if self._settled is not None and not self._settled.done():
                self._settled.set_result(None)  # the waiting poll runs after the emit below
        ledger.emit("submitted", f"{record.id} submitted ({_short(handle.external_id)})", record)
        self.landed = True
        return _HANDLE

    def _returned(self) -> None:
        """A submit returned: its slot in the window goes to the next queued task."""
        self._active -= 1
        self._refill(durable=False)

    def labelled(self, record: TaskRecord, attempt: Attempt) -> ContainerTaskSpec:
        """The plan's spec with the run's reserved labels for this attempt added."""
        spec = self.specs[record.id]
        if self.lanes is not None:
            spec = self.lanes.spec_for(record, attempt, spec)
        key = attempt.key or submission_key(self.run_id, record.id, attempt.number)
        labels = {**spec.labels, **submission_labels(self.run_id, record.id, attempt.number, key)}
        return dataclasses.replace(spec, labels=labels)
