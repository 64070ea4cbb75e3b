"""Polling 200 running sandboxes at 20 ms per Modal request: a listing vs one wait per sandbox.

Run: ``uv run python packages/altar-backend-modal/benchmarks/bench_poll.py`` (``nox -s bench``).

The in-memory Modal (``FakeModalRuntime``) charges every gRPC request the SDK runtime would send
``LATENCY_S``, one after another within a call, exactly as the modal client awaits them (its
request counts are checked against the unmodified client in ``tests/test_wire.py``). Variants,
each polling the same 200 handles:

- baseline: one ``SandboxWait`` per sandbox, one after another (altar 0.3.0);
- per-sandbox concurrent: one ``SandboxWait`` per sandbox, ``max_concurrency`` in flight (the
  previous release of this backend);
- ``backend.poll``: ``Sandbox.list(app_id=…, tags={"altar.run": …})``, 100 a page (an assumption:
  Modal does not document its page size), stopping once every handle is seen.

Everything runs twice: on a quiet machine and on a busy one, with one busy-looping process per
core started beside the benchmark. It prints requests per poll, the median of ``REPETITIONS``
runs and the ratio to the baseline run next to it. Targets (issue 16): at most 3 requests and at
least 20x the baseline, on both. Always exits 0: numbers, not a timed assertion.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager

from altar.backends.modal import ModalExecutionBackend
from altar.backends.modal.fake import FakeModalRuntime
from altar.execution import ContainerTaskSpec, TaskHandle, TaskStatus

SANDBOXES = 200
FINISHED_EXTRA = 20
LATENCY_S = 0.020
REPETITIONS = 5
TARGET_RATIO = 20.0
TARGET_REQUESTS = 3

Poll = Callable[[ModalExecutionBackend, list[TaskHandle]], Awaitable[list[TaskStatus]]]


class PerSandbox(ModalExecutionBackend):
    """The previous poll: one wait per sandbox, never a listing."""

    LIST_FROM = sys.maxsize


def _per_sandbox_backend(backend: ModalExecutionBackend) -> PerSandbox:
    return PerSandbox(
        runtime=backend.runtime,
        app_name=backend.app_name,
        volume_name=backend.volume_name,
        max_concurrency=backend.max_concurrency,
    )


async def _sequential(
    backend: ModalExecutionBackend, handles: list[TaskHandle]
) -> list[TaskStatus]:
    one_by_one = _per_sandbox_backend(backend)
    statuses: list[TaskStatus] = []
    for handle in handles:
        statuses.extend(await one_by_one.poll([handle]))
    return statuses


async def _per_sandbox(
    backend: ModalExecutionBackend, handles: list[TaskHandle]
) -> list[TaskStatus]:
    return await _per_sandbox_backend(backend).poll(handles)


async def _listing(backend: ModalExecutionBackend, handles: list[TaskHandle]) -> list[TaskStatus]:
    return await backend.poll(handles)


async def _measure(
    poll: Poll, backend: ModalExecutionBackend, fake: FakeModalRuntime, handles: list[TaskHandle]
) -> tuple[float, int]:
    times = []
    requests = 0
    for _ in range(REPETITIONS):
        fake.rpcs.clear()
        start = time.perf_counter()
        statuses = await poll(backend, handles)
        times.append(time.perf_counter() - start)
        assert len(statuses) == len(handles)
        requests = len(fake.rpcs)
    return statistics.median(times), requests


@contextmanager
def _busy_machine() -> Iterator[int]:
    """One busy-looping process per core for as long as the block runs."""
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(os.cpu_count() or 2)
    ]
    try:
        yield len(hogs)
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait()


async def _setup() -> tuple[
    ModalExecutionBackend, FakeModalRuntime, list[TaskHandle], list[TaskHandle]
]:
    fake = FakeModalRuntime()
    backend = ModalExecutionBackend(runtime=fake, max_concurrency=32)
    handles = []
    for i in range(SANDBOXES + FINISHED_EXTRA):
        spec = ContainerTaskSpec(
            kind="bench",
            image="busybox:1.36",
            command=["true"],
            labels={"altar.run": "bench", "altar.task": f"t{i}"},
        )
        handles.append(await backend.submit(spec))
    for handle in handles[SANDBOXES:]:
        fake.finish(handle.external_id, 0)
    fake.latency_s = LATENCY_S
    return backend, fake, handles[:SANDBOXES], handles


async def _table(label: str) -> list[bool]:
    backend, fake, running, mixed = await _setup()
    rows = [
        ("baseline: one after another", _sequential, running),
        ("per sandbox, 32 at once", _per_sandbox, running),
        ("backend.poll (listing)", _listing, running),
        (f"backend.poll, +{FINISHED_EXTRA} finished", _listing, mixed),
    ]
    print(f"\n{label}: {SANDBOXES} running sandboxes, {LATENCY_S * 1000:.0f} ms per request")
    print(f"{'variant':<34}{'requests':>9}{'median s':>10}{'ratio':>8}")
    baseline = 0.0
    verdicts = []
    for name, poll, handles in rows:
        median, requests = await _measure(poll, backend, fake, handles)
        if poll is _sequential:
            baseline = median
        ratio = baseline / median
        print(f"{name:<34}{requests:>9}{median:>10.3f}{ratio:>7.1f}x")
        if poll is _listing and handles is running:
            verdicts.append(requests <= TARGET_REQUESTS and ratio >= TARGET_RATIO)
    return verdicts


async def main() -> None:
    print(
        f"median of {REPETITIONS}; targets: <= {TARGET_REQUESTS} requests, >= {TARGET_RATIO:.0f}x"
    )
    verdicts = await _table("quiet machine")
    with _busy_machine() as hogs:
        verdicts += await _table(f"busy machine ({hogs} busy-looping processes)")
    print("\ntargets " + ("met" if all(verdicts) else "MISSED") + " on both machines")


if __name__ == "__main__":
    asyncio.run(main())
