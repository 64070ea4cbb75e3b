"""One bounded gather, with one error rule, for backends and the runner.

:func:`gather_bounded` runs awaitables with at most ``limit`` in flight and returns their
results in order. The error rule: every awaitable runs to its end even when one fails (they
usually act on a provider, and stopping them midway would leave work half done and unrecorded),
then the first error *in input order* is raised. Cancelling the caller cancels them all.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable
from typing import TypeVar

__all__ = ["gather_bounded"]

T = TypeVar("T")


async def gather_bounded(awaitables: Iterable[Awaitable[T]], limit: int | None = None) -> list[T]:
    """Await every item with at most ``limit`` in flight (None: no bound); results in order.

    All items run to completion; then the first exception, in input order, is raised (the
    others are retrieved, so none is reported as never retrieved).
    """
    import asyncio  # here, not at the top: importing the contract must not load asyncio
    import inspect

    if limit is not None and limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    semaphore = asyncio.Semaphore(limit) if limit is not None else None

    async def one(awaitable: Awaitable[T]) -> T:
        if semaphore is None:
            return await awaitable
        async with semaphore:
            return await awaitable

    items = list(awaitables)
    try:
        outcomes = await asyncio.gather(*(one(a) for a in items), return_exceptions=True)
    finally:
        # cancelled before some started: close those, or they warn "never awaited"
        for item in items:
            if inspect.iscoroutine(item) and inspect.getcoroutinestate(item) == "CORO_CREATED":
                item.close()
    results: list[T] = []
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
        results.append(outcome)
    return results
