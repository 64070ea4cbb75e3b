"""Holding submits back while the provider cannot take work: limits and piled-up endings.

Two causes, one mechanism. A submit refused with :class:`ProviderLimitError` (a quota, a
submit limit, a rate limit) holds every further submit back for the provider's
``retry_after_s``, else for a pause that doubles while the refusals go on. Attempts the
provider ended (``provider_ending``) that pile up (:data:`PILE_UP_TASKS` tasks within
:data:`PILE_UP_WINDOW_S`: a drained partition, a dead engine) pause the run's submits the same
way, so the ended tasks' budgets are not burnt against a provider that is down.

After the pause one task goes through as a probe; the hold lifts once the provider takes it
(a limit: the submit is accepted; endings: the probe is seen running, or ends by itself). A
refused or ended probe pauses again, twice as long (at most :data:`MAX_PAUSE_S`). Each hold is
said once when it starts and once when it lifts; no task is failed or charged meanwhile.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence

from altar.execution.errors import ProviderLimitError
from altar.execution.run.results import one_line
from altar.execution.state.records import FAILED, QUEUED, RUNNING, SUBMITTING, SUCCEEDED, TaskRecord
from altar.execution.types import TaskFailure

__all__ = ["LIMIT_PAUSE_S", "MAX_PAUSE_S", "PAUSE_S", "PILE_UP_TASKS", "PILE_UP_WINDOW_S", "Hold"]

PILE_UP_TASKS = 3
PILE_UP_WINDOW_S = 60.0
#: the first pause after endings pile up, and after a limit refusal that names no retry time
PAUSE_S = 15.0
LIMIT_PAUSE_S = 5.0
MAX_PAUSE_S = 600.0

LIMIT = "limit"
ENDINGS = "endings"


class Hold:
    """Whether the run may submit now; fed the run's limit refusals and provider endings."""

    def __init__(self, emit: Callable[[str, str], None]) -> None:
        self._emit = emit
        self.kind: str | None = None  # LIMIT or ENDINGS while submits are held back
        self.cause = ""
        self.until = -float("inf")
        self.pause = 0.0
        self.probe: str | None = None
        self._probe_attempts = 0  # the probe's attempts when it was let through
        self._recent: deque[tuple[float, str]] = deque()

    @property
    def holding(self) -> bool:
        return self.kind is not None

    def limited(self, error: ProviderLimitError, now: float) -> None:
        """A submit was refused by a limit: hold every submit back for a while."""
        first = self.kind != LIMIT
        grown = LIMIT_PAUSE_S if first else min(MAX_PAUSE_S, self.pause * 2)
        self.pause = error.retry_after_s if error.retry_after_s is not None else grown
        self.until = now + self.pause
        self.probe = None
        cause = error.limit or one_line(error)
        if first or cause != self.cause:
            self.kind, self.cause = LIMIT, cause
            self._emit(
                "held",
                f"submits held back by the provider's limit ({one_line(error)}); trying "
                f"again in {self.pause:.0f} s, no task is failed or charged a retry",
            )

    def ended(self, task_id: str, failure: TaskFailure, now: float) -> None:
        """An attempt was ended by the provider; pause submits once such endings pile up."""
        self._recent.append((now, task_id))
        while self._recent and self._recent[0][0] < now - PILE_UP_WINDOW_S:
            self._recent.popleft()
        if self.kind == ENDINGS:
            if task_id == self.probe:  # the provider ended the probe too: pause longer
                self.pause = min(MAX_PAUSE_S, self.pause * 2)
                self.until, self.probe = now + self.pause, None
            return
        if self.kind is None and len({t for _, t in self._recent}) >= PILE_UP_TASKS:
            self.kind, self.pause = ENDINGS, PAUSE_S
            self.until, self.probe = now + self.pause, None
            ending = (failure.provider_ending or "").replace("_", " ")
            self.cause = f"{ending}: {failure.detail or failure.reason}"
            self._emit(
                "paused",
                f"submits paused: the provider ended {len({t for _, t in self._recent})} "
                f"tasks' attempts within {PILE_UP_WINDOW_S:.0f} s (last: {self.cause}); one "
                f"task is tried in {self.pause:.0f} s and the run goes on once it runs",
            )

    def closed(self, now: float) -> bool:
        """True while no submit may go at all (paused, or its probe not yet answered)."""
        return self.kind is not None and (now < self.until or self.probe is not None)

    def admit(self, batch: Sequence[TaskRecord], now: float) -> list[TaskRecord]:
        """The part of ``batch`` that may be submitted now: all of it, one probe, or none."""
        if self.kind is None:
            return list(batch)
        if now < self.until or self.probe is not None or not batch:
            return []
        self.probe = batch[0].id
        self._probe_attempts = len(batch[0].attempts)
        return [batch[0]]

    def observe(self, records: Mapping[str, TaskRecord]) -> None:
        """Lift the hold once its probe shows the provider takes work again."""
        if self.kind is None or self.probe is None:
            return
        record = records[self.probe]
        if record.state == SUBMITTING:
            return  # not yet answered
        if record.state == QUEUED:
            # withdrawn (a limit again: ``limited`` follows), or ended by the provider (``ended``
            # follows), or it ran and failed by itself and waits for its retry: the provider
            # took it, so the hold lifts (else the probe would be held back for ever). A limit
            # lifts once the probe's submit was accepted, even if the provider ended that
            # attempt before the run saw it running (a poll right after its submit can)
            last = record.last
            tried = len(record.attempts) > self._probe_attempts and last is not None
            ran = (
                tried
                and last is not None
                and last.failure is not None
                and last.failure.provider_ending is None
            )
            accepted = tried and last is not None and last.handle is not None
            if not (ran or (self.kind == LIMIT and accepted)):
                return
        elif self.kind == ENDINGS and record.state not in (RUNNING, SUCCEEDED, FAILED):
            return  # accepted, but not yet seen running
        what = "limit" if self.kind == LIMIT else "provider"
        self._emit("hold_lifted", f"submits resume: the {what} took {self.probe} ({self.cause})")
        self.kind, self.probe, self.cause, self.pause = None, None, "", 0.0
        self._recent.clear()
