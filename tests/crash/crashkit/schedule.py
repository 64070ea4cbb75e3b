"""The kill schedule: which signal, at which observed moment of which run phase, chosen by a seed.

Each :class:`Moment` names a *trigger* the driver watches for in one ``altar run`` process
(its n-th occurrence within that process), then waits a small seeded delay and sends the
signal. Triggers are observations of the run, never bare wall-clock offsets (except the very
first start-up moment, which only has the process's birth to go by):

============  ===============================================================================
phase         trigger
============  ===============================================================================
startup       ``spawn`` (the process exists), ``banner`` (its first line on stderr),
              ``pid`` (its pid is journaled: the run is about to resume or stage)
staging       a temporary file of a copy appears beside an input in the data root
submit        the journal records a submit's intent (the runner is inside ``submit``)
poll          the journal records a task as running
collect       the journal records a success whose outputs are not collected yet
cleanup       every task is settled in the journal (what remains: cleanup, reconcile, tidy)
============  ===============================================================================

The order follows a run's life: start-up and staging first, then the middle phases in
round-robin blocks shuffled by the seed, clean-up last; the SIGINT, SIGTERM and SIGHUP go among
the first half of the middle ones. A moment whose phase is over for good when its process
starts (nothing left to submit, say) is moved to the next phase that can still happen (see
:func:`crashkit.driver.Driver.feasible`), and reported under the phase it landed in.
"""

from __future__ import annotations

import random
import signal
from dataclasses import dataclass

__all__ = ["PHASES", "Moment", "make_schedule"]

PHASES = ("startup", "staging", "submit", "poll", "collect", "cleanup")
STARTUP_TRIGGERS = ("spawn", "banner", "pid")


@dataclass(frozen=True)
class Moment:
    """One interruption: ``signal`` at the ``occurrence``-th ``trigger`` of ``phase``."""

    phase: str
    signal: signal.Signals
    occurrence: int = 1
    delay_s: float = 0.0
    trigger: str = ""

    def describe(self) -> str:
        what = self.trigger or self.phase
        return f"{self.signal.name} at {self.phase}/{what} #{self.occurrence} +{self.delay_s:.2f}s"


def make_schedule(
    seed: int,
    *,
    kills: dict[str, int] | None = None,
    signals: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP),
) -> list[Moment]:
    """The moments for one run, in order. ``kills``: SIGKILLs per phase (default 22 in all)."""
    counts = kills or {
        "startup": 3,
        "staging": 2,
        "submit": 6,
        "poll": 5,
        "collect": 4,
        "cleanup": 2,
    }
    rng = random.Random(seed)
    kill = signal.SIGKILL
    startup = [
        Moment("startup", kill, 1, rng.uniform(0.0, 0.2) if trigger == "spawn" else 0.0, trigger)
        for trigger in (STARTUP_TRIGGERS * 3)[: counts.get("startup", 0)]
    ]
    staging = [
        Moment("staging", kill, 1, rng.uniform(0.0, 0.3)) for _ in range(counts.get("staging", 0))
    ]
    # the middle phases go round-robin in blocks shuffled by the seed, so each phase is spread
    # over the whole run (a phase bunched at its end could find nothing left to interrupt)
    pools = {phase: counts.get(phase, 0) for phase in ("submit", "poll", "collect")}
    middle: list[Moment] = []
    while any(pools.values()):
        block = [phase for phase, left in pools.items() if left]
        rng.shuffle(block)
        for phase in block:
            pools[phase] -= 1
            # a submit kill lands at once (inside the submit call), sometimes at the second
            # submit of a batch; the others a little after what they watch for
            if phase == "submit":
                middle.append(Moment(phase, kill, rng.randint(1, 2), 0.0))
            else:
                middle.append(Moment(phase, kill, 1, rng.uniform(0.0, 0.15)))
    for sig in signals:
        # Ctrl-C and friends while submits are in flight: the grace period is what they test
        phase = "poll" if sig == signal.SIGHUP else "submit"
        middle.insert(rng.randint(0, len(middle) // 2), Moment(phase, sig, rng.randint(1, 2), 0.0))
    # the first lands as the clean-up starts; a later one (a resumed run that only has clean-up
    # left) a little into it
    cleanup = [
        Moment("cleanup", kill, 1, 0.0 if n == 0 else rng.uniform(0.0, 0.05))
        for n in range(counts.get("cleanup", 0))
    ]
    return startup + staging + middle + cleanup
