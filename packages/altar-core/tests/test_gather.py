"""The one bounded gather and its error rule."""

from __future__ import annotations

import asyncio

import pytest
from altar.execution.gather import gather_bounded


@pytest.mark.asyncio
async def test_results_in_order_with_at_most_limit_in_flight() -> None:
    in_flight = peak = 0

    async def one(n: int) -> int:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.001 * (5 - n % 5))
        in_flight -= 1
        return n * n

    assert await gather_bounded([one(n) for n in range(12)], 3) == [n * n for n in range(12)]
    assert peak == 3


@pytest.mark.asyncio
async def test_every_call_finishes_then_the_first_error_in_input_order_is_raised() -> None:
    finished: list[str] = []

    async def ok(name: str) -> str:
        await asyncio.sleep(0.01)
        finished.append(name)
        return name

    async def boom(name: str, delay: float) -> str:
        await asyncio.sleep(delay)
        raise RuntimeError(name)

    with pytest.raises(RuntimeError, match=r"^first$"):
        # 'second' fails sooner, but 'first' comes first in the input
        await gather_bounded([ok("a"), boom("first", 0.005), boom("second", 0.0), ok("b")], 2)
    assert sorted(finished) == ["a", "b"]


@pytest.mark.asyncio
async def test_no_limit_and_a_bad_limit() -> None:
    assert await gather_bounded([asyncio.sleep(0, result=1)]) == [1]
    assert await gather_bounded([]) == []
    with pytest.raises(ValueError, match="at least 1"):
        await gather_bounded([], 0)
