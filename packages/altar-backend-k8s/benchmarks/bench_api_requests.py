"""API requests per poll, resubmit and list_submissions of the Kubernetes backend (fake apiserver).

Run: ``uv run python packages/altar-backend-k8s/benchmarks/bench_api_requests.py``

For 1, 100 and 1000 handles (a tenth of them newly failed) it counts the requests one
``poll`` makes — the first poll after the failures (Job list + Pod list) and a steady-state
poll — and compares them with the naive way (one Job read per handle plus, as altar 0.3.0
did, a Job read and a Pod list per failed Job). It also counts the requests of a submit of
an already-active spec (create → 409, read → adopt) and of ``list_submissions`` for the run
(one Job list). Times are medians of several runs
through the real ``kubernetes`` client over HTTP on 127.0.0.1. Targets: at most 2 requests
per poll whatever the number of handles, 2 requests per adopting submit, 1 per listing.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from altar.backends.kubernetes import KubernetesExecutionBackend, parse_external_id
from altar.backends.kubernetes.sdk_runtime import ClientRuntime
from altar.backends.kubernetes.testing import FakeApiServer
from altar.execution import ContainerTaskSpec, TaskHandle, TaskState, submission_labels

SIZES = (1, 100, 1000)
REPEATS = 5
POLL_TARGET = 2
SUBMIT_TARGET = 2
LIST_TARGET = 1


def spec(i: int) -> ContainerTaskSpec:
    return ContainerTaskSpec(
        kind="bench",
        image="busybox",
        command=["true"],
        labels={"job_id": "bench", "i": str(i), **submission_labels("bench-run", f"t{i}", 1)},
    )


async def naive_poll(runtime: ClientRuntime, handles: list[TaskHandle]) -> None:
    """One Job read per handle; per failed Job a second read and a Pod list (0.3.0)."""
    for handle in handles:
        name, uid = parse_external_id(handle.external_id)
        job = await asyncio.to_thread(runtime.read_job, name, namespace="default")
        if job is not None and job.state is TaskState.FAILED:
            await asyncio.to_thread(runtime.read_job, name, namespace="default")
            await asyncio.to_thread(
                runtime.list_pods, namespace="default", label_selector=f"controller-uid={uid}"
            )


def timed_requests(fake: FakeApiServer, run: object) -> tuple[int, float]:
    fake.reset_requests()
    started = time.perf_counter()
    asyncio.run(run)  # type: ignore[arg-type]
    return len(fake.requests), (time.perf_counter() - started) * 1000


def measure(size: int, kubeconfig: Path, fake: FakeApiServer) -> dict[str, float]:
    runtime = ClientRuntime(kubeconfig=str(kubeconfig))
    backend = KubernetesExecutionBackend(runtime=runtime)

    async def submit_all() -> list[TaskHandle]:
        return [await backend.submit(spec(i)) for i in range(size)]

    handles = asyncio.run(submit_all())
    active = spec(size + 1)  # stays running: the adopting submit
    asyncio.run(backend.submit(active))
    failed = handles[: max(1, size // 10)]
    for handle in failed:
        fake.finish_job(parse_external_id(handle.external_id)[0], exit_code=1)
    results: dict[str, list[float]] = {k: [] for k in ("first", "steady", "naive", "adopt", "list")}
    counts: dict[str, int] = {}
    for _ in range(REPEATS):
        fresh = KubernetesExecutionBackend(runtime=runtime)  # nothing classified yet
        counts["first"], ms = timed_requests(fake, fresh.poll(handles))
        results["first"].append(ms)
        counts["steady"], ms = timed_requests(fake, fresh.poll(handles))
        results["steady"].append(ms)
        counts["naive"], ms = timed_requests(fake, naive_poll(runtime, handles))
        results["naive"].append(ms)
        counts["adopt"], ms = timed_requests(fake, backend.submit(active))
        results["adopt"].append(ms)
        counts["list"], ms = timed_requests(fake, fresh.list_submissions("bench-run"))
        results["list"].append(ms)
    runtime.close()
    for job in fake.jobs():
        fake.remove_job(job["metadata"]["name"])
    return {
        **{f"{k}_requests": float(v) for k, v in counts.items()},
        **{f"{k}_ms": statistics.median(v) for k, v in results.items()},
    }


def main() -> int:
    print(__doc__.strip().splitlines()[0])
    print(f"medians of {REPEATS} runs; a tenth of the handles newly failed\n")
    header = (
        f"{'handles':>7} | {'poll req (first/steady)':>23} | {'naive req':>9} | {'ratio':>6} | "
        f"{'poll ms':>8} | {'naive ms':>9} | {'adopt req':>9} | {'list req':>8} | "
        f"{'target':>14} | result"
    )
    print(header)
    print("-" * len(header))
    with FakeApiServer() as fake, tempfile.TemporaryDirectory() as tmp:
        kubeconfig = fake.write_kubeconfig(Path(tmp) / "kubeconfig")
        for size in SIZES:
            r = measure(size, kubeconfig, fake)
            ours = max(r["first_requests"], r["steady_requests"])
            ok = (
                ours <= POLL_TARGET
                and r["adopt_requests"] == SUBMIT_TARGET
                and r["list_requests"] == LIST_TARGET
            )
            print(
                f"{size:>7} | {int(r['first_requests']):>11} / {int(r['steady_requests']):<9} | "
                f"{int(r['naive_requests']):>9} | {r['naive_requests'] / ours:>5.0f}x | "
                f"{r['first_ms']:>8.1f} | {r['naive_ms']:>9.1f} | {int(r['adopt_requests']):>9} | "
                f"{int(r['list_requests']):>8} | {'<=2 / =2 / =1':>14} | {'OK' if ok else 'MISSED'}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
