"""How long a backend call keeps the event loop from running anything else.

A backend that calls a blocking provider API (an HTTP client, ``subprocess.run``,
``time.sleep``) from a coroutine stalls every other task of the runner for that long. The
stall is measured with a ticker task that wakes every few milliseconds: the longest gap
between two of its ticks around the call is at least the time the loop was blocked.

One gap on a busy machine says little (the process may simply not have been scheduled), so
:func:`measure_blocking` compares like with like in the same run: several calls, each
followed by an idle wait of the same length, and the *smallest* gap of each series. A call
that blocks for ``b`` seconds makes every one of its gaps at least ``b``; a loaded machine
makes some gaps long but rarely all of them, and lengthens the idle ones as much.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

__all__ = ["BLOCKING_BOUND_S", "LAG_ROUNDS", "TICK_S", "Blocking", "measure_blocking"]

T = TypeVar("T")

TICK_S = 0.005
"""How often the ticker wakes."""

LAG_ROUNDS = 5
"""Calls (and idle waits) per measurement."""

BLOCKING_BOUND_S = 0.06
"""How much longer than idle the shortest gap around a call may be: 0.1 s of blocking fails."""


@dataclass(frozen=True)
class Blocking:
    """The shortest loop gap around the calls and around the idle waits, in seconds."""

    call_s: float
    idle_s: float

    @property
    def excess_s(self) -> float:
        return self.call_s - self.idle_s

    @property
    def blocks(self) -> bool:
        return self.excess_s >= BLOCKING_BOUND_S


async def _longest_gap(call: Callable[[], Awaitable[T]]) -> tuple[T, float, float]:
    """Run ``call`` with a ticker beside it: (its result, longest tick gap, its duration)."""
    ticks: list[float] = []
    ticked = asyncio.Event()

    async def tick() -> None:
        while True:
            ticks.append(time.monotonic())
            ticked.set()
            await asyncio.sleep(TICK_S)

    ticker = asyncio.create_task(tick())
    try:
        await ticked.wait()
        start = time.monotonic()
        result = await call()
        end = time.monotonic()
        ticked.clear()
        await ticked.wait()  # one tick after the call: it closes the last gap
    finally:
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker
    first = max(i for i, t in enumerate(ticks) if t <= start)
    last = min(i for i, t in enumerate(ticks) if t >= end)
    window = ticks[first : last + 1]
    gap = max((b - a for a, b in itertools.pairwise(window)), default=0.0)
    return result, gap, end - start


async def measure_blocking(
    call: Callable[[], Awaitable[T]], rounds: int = LAG_ROUNDS
) -> tuple[list[T], Blocking]:
    """Call ``call`` ``rounds`` times, each followed by an idle wait as long as it took."""
    results: list[T] = []
    call_gaps: list[float] = []
    idle_gaps: list[float] = []
    for _ in range(rounds):
        result, gap, took = await _longest_gap(call)
        results.append(result)
        call_gaps.append(gap)
        idle = max(took, TICK_S)
        _, idle_gap, _ = await _longest_gap(functools.partial(asyncio.sleep, idle))
        idle_gaps.append(idle_gap)
    return results, Blocking(min(call_gaps), min(idle_gaps))
