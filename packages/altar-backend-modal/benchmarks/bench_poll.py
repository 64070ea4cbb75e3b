"""Polling 200 sandboxes with 20 ms per Modal call: concurrent (bounded) vs one after another.

Run: ``uv run python packages/altar-backend-modal/benchmarks/bench_poll.py``. The baseline polls
each handle in turn, as altar 0.3.0 did; the backend polls them concurrently with at most
``max_concurrency`` calls in flight. Target: at least 10x faster. Always exits 0.
"""

from __future__ import annotations

import asyncio
import statistics
import time

from altar.backends.modal import ModalExecutionBackend
from altar.backends.modal.fake import FakeModalRuntime
from altar.execution import ContainerTaskSpec, TaskHandle, TaskStatus

SANDBOXES = 200
LATENCY_S = 0.020
REPETITIONS = 5
TARGET_RATIO = 10.0


async def _sequential(backend: ModalExecutionBackend, handles: list[TaskHandle]) -> None:
    statuses: list[TaskStatus] = []
    for handle in handles:
        statuses.extend(await ModalExecutionBackend.poll(backend, [handle]))
    assert len(statuses) == len(handles)


async def _concurrent(backend: ModalExecutionBackend, handles: list[TaskHandle]) -> None:
    assert len(await backend.poll(handles)) == len(handles)


async def _median(run: object, backend: ModalExecutionBackend, handles: list[TaskHandle]) -> float:
    times = []
    for _ in range(REPETITIONS):
        start = time.perf_counter()
        await run(backend, handles)  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return statistics.median(times)


async def main() -> None:
    fake = FakeModalRuntime()
    backend = ModalExecutionBackend(runtime=fake, max_concurrency=32)
    spec = ContainerTaskSpec(kind="bench", image="busybox:1.36", command=["true"])
    handles = [await backend.submit(spec) for _ in range(SANDBOXES)]
    for i, handle in enumerate(handles):
        if i % 3 == 0:
            fake.finish(handle.external_id, i % 5)
    fake.latency_s = LATENCY_S

    baseline = await _median(_sequential, backend, handles)
    concurrent = await _median(_concurrent, backend, handles)
    ratio = baseline / concurrent
    verdict = "met" if ratio >= TARGET_RATIO else "MISSED"
    print(
        f"poll {SANDBOXES} sandboxes, {LATENCY_S * 1000:.0f} ms per call, "
        f"median of {REPETITIONS}, max_concurrency={backend.max_concurrency}"
    )
    print(f"{'variant':<28}{'median s':>10}")
    print(f"{'baseline: one after another':<28}{baseline:>10.3f}")
    print(f"{'backend.poll (concurrent)':<28}{concurrent:>10.3f}")
    print(f"ratio {ratio:.1f}x, target >= {TARGET_RATIO:.0f}x: {verdict}")


if __name__ == "__main__":
    asyncio.run(main())
