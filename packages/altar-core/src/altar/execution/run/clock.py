"""The run's time, injected: tests drive the poll schedule without sleeping or patching."""

from __future__ import annotations

import asyncio

__all__ = ["Clock", "LoopClock"]


def _resolve(future: asyncio.Future[bool], value: bool) -> None:
    if not future.done():
        future.set_result(value)


class Clock:
    """What a run asks of time (the base class is the event loop's clock).

    :meth:`now` times the poll schedule. :meth:`wait` pauses between ticks: ``seconds`` long,
    or, given ``wake``, until ``wake`` is resolved if that comes first (then with its result).
    """

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    async def wait(self, seconds: float, wake: asyncio.Future[bool] | None = None) -> bool:
        seconds = max(0.0, seconds)
        if wake is None:
            await asyncio.sleep(seconds)
            return False
        # a plain future, not asyncio.timeout: that would swallow a cancel requested before it
        timer = asyncio.get_running_loop().call_later(seconds, _resolve, wake, False)
        try:
            return await wake
        finally:
            timer.cancel()


LoopClock = Clock
