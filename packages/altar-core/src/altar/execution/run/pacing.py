"""When a run polls: the backoff, and the early poll of a task whose submit just landed.

The rule (pure: times in, times out, on the run's clock):

- a poll is **due** ``interval`` after the last one; the interval starts at ``poll_interval_s``,
  doubles while nothing changes (up to the cap, which the backend may lower:
  :func:`~altar.execution.backend.poll_interval_cap`) and resets on any change;
- a submit that returned a handle since the last poll makes the next poll **early**: its task
  may be done already (an instant or cached task, a chain's next link). One early poll covers
  every submit landed before it, and it comes no sooner after the last poll returned than that
  poll took, so a backend whose poll is slow spends at most half the run's time answering polls,
  and polls never outnumber the submits that landed plus the backoff's own;
- each poll is one ``poll`` call for every open task: a backend whose poll is an API call
  (Kubernetes, Modal) gets one call per tick, never one per task; one whose provider must be
  queried sparingly paces that query itself (Slurm asks ``squeue`` at most every
  ``queue_interval_s``, whatever the polls).
"""

from __future__ import annotations

__all__ = ["Pace"]


class Pace:
    """The poll schedule of one run."""

    def __init__(self, poll_interval_s: float, max_poll_interval_s: float) -> None:
        self.poll_interval_s = poll_interval_s
        self.max_poll_interval_s = max_poll_interval_s
        self.interval = poll_interval_s  # the backoff: from the last poll to the next
        self.last_poll = -float("inf")  # when the last poll started (clock time)
        self.poll_end = -float("inf")  # when it returned
        self.poll_took = 0.0

    def due(self, now: float, *, landed: bool) -> bool:
        """Poll now: the backoff's poll is due, or ``landed`` and the early poll's time came."""
        return now >= self.last_poll + self.interval or (landed and now >= self.early())

    def next(self, *, landed: bool) -> float:
        """When the next poll is due (clock time)."""
        due = self.last_poll + self.interval
        return min(due, self.early()) if landed else due

    def early(self) -> float:
        return self.poll_end + self.poll_took

    def started(self, now: float) -> None:
        self.last_poll = now

    def ended(self, now: float) -> None:
        self.poll_end = now
        self.poll_took = max(0.0, now - self.last_poll)

    def reset(self) -> None:
        """Something changed: the next poll comes ``poll_interval_s`` after the last."""
        self.interval = self.poll_interval_s

    def back_off(self) -> None:
        """A due poll found nothing new: wait twice as long (up to the cap)."""
        self.interval = min(self.max_poll_interval_s, self.interval * 2)
