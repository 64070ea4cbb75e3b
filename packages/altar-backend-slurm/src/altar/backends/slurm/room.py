"""What the site's submit limit leaves: the limit (read once) less this backend's live jobs."""

from __future__ import annotations

import time
from collections.abc import Iterable

from altar.backends.slurm.limits import SiteLimits, read_limits
from altar.backends.slurm.render import SlurmPlacement
from altar.backends.slurm.runtime import LoginNode

__all__ = ["LIMITS_RETRY_S", "LIVE_HORIZON_S", "SubmitRoom"]

#: A job no poll has mentioned for this long no longer counts against the submit limit (its
#: handle was given up): a stale count must never hold the run back for ever.
LIVE_HORIZON_S = 600.0
#: How soon the limits are read again after sacctmgr could not answer.
LIMITS_RETRY_S = 300.0


class SubmitRoom:
    """The site's limits (read once; None: Slurm cannot tell) and the jobs counted live."""

    def __init__(
        self, node: LoginNode, placement: SlurmPlacement, *, query_timeout_s: float | None
    ) -> None:
        self.node = node
        self.placement = placement
        self.query_timeout_s = query_timeout_s
        self._limits: SiteLimits | None = None
        self._limits_at: float | None = None
        # job id -> when a submit or a poll last saw it live
        self._live: dict[str, float] = {}

    def due(self) -> bool:
        """Whether the limits are to be read (never yet, or unknown for a while)."""
        return self._limits_at is None or (
            self._limits is None and time.monotonic() - self._limits_at > LIMITS_RETRY_S
        )

    def limit(self) -> tuple[int, str] | None:
        """The live-job limit this backend's jobs are under (read once), or None."""
        if self.due():
            self._limits_at = time.monotonic()
            self._limits = read_limits(self.node, timeout_s=self.query_timeout_s)
        if self._limits is None:
            return None
        return self._limits.submit_limit(
            account=self.placement.account,
            partition=self.placement.partition,
            qos=self.placement.qos,
        )

    def live(self, job_id: str) -> None:
        """A submit or a poll saw ``job_id`` pending or running."""
        self._live[job_id] = time.monotonic()

    def seen(self, live: Iterable[str], ended: Iterable[str]) -> None:
        now = time.monotonic()
        for job_id in ended:
            self._live.pop(job_id, None)
        for job_id in live:
            self._live[job_id] = now

    def free(self) -> int | None:
        """How many more jobs the site's submit limit takes now, or None: no limit."""
        limit = self.limit()
        if limit is None:
            return None
        horizon = time.monotonic() - LIVE_HORIZON_S
        return max(0, limit[0] - sum(1 for seen in self._live.values() if seen >= horizon))
