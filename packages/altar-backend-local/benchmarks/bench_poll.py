"""Polling N running containers: one ``poll`` of the local backend vs one ``docker inspect`` each.

altar 0.3.0 polled with one ``docker inspect`` subprocess per container; this backend lists all
the handles' containers in one Engine API request. The benchmark starts N ``sleep`` containers
(network disabled, labelled so they are removed afterwards), then times both ways of learning
their state and counts the Engine API requests of the backend's poll.

    uv run python packages/altar-backend-local/benchmarks/bench_poll.py [--containers 500]

Needs a Docker engine (DOCKER_HOST, as in /tmp/altar-services/env) with busybox:latest. Targets:
at least 50x faster, at most 3 Engine API requests per poll.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from _engine import docker_host
from altar.backends.local import DockerSdkRuntime, LocalDockerExecutionBackend
from altar.execution import ContainerTaskSpec, TaskHandle, TaskState

TARGET_RATIO = 50.0
TARGET_REQUESTS = 3
INSPECT_FORMAT = (
    "{{.State.Status}} {{.State.ExitCode}} {{.State.OOMKilled}} {{.State.StartedAt}} "
    '{{.State.FinishedAt}} {{index .Config.Labels "altar.timeout_s"}}'
)


def start_containers(
    backend: LocalDockerExecutionBackend, count: int, tag: str
) -> list[TaskHandle]:
    spec = ContainerTaskSpec(
        kind="bench",
        image=os.environ.get("ALTAR_TEST_IMAGE", "busybox:latest"),
        command=["sleep", "3600"],
        labels={"altar.bench": tag},
        timeout_s=7200,
    )

    async def submit_all() -> list[TaskHandle]:
        semaphore = asyncio.Semaphore(8)

        async def one() -> TaskHandle:
            async with semaphore:
                return await backend.submit(spec)

        return list(await asyncio.gather(*(one() for _ in range(count))))

    return asyncio.run(submit_all())


def baseline_inspect_each(handles: list[TaskHandle]) -> float:
    """altar 0.3.0: ``docker inspect --format F <id>`` per handle, one after another."""
    started = time.perf_counter()
    for handle in handles:
        result = subprocess.run(
            ["docker", "inspect", "--format", INSPECT_FORMAT, handle.external_id],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0 or not result.stdout.startswith("running"):
            raise SystemExit(f"bench_poll: unexpected inspect result: {result.stdout!r}")
    return time.perf_counter() - started


def backend_poll(
    host: str, data_root: str, handles: list[TaskHandle]
) -> tuple[float, int, float, int]:
    """A fresh backend (as after a restart) polls every handle, then polls them again.

    Returns (fresh seconds, fresh requests, warm seconds, warm requests).
    """
    runtime = DockerSdkRuntime(host)
    requests = 0

    def count(response: object, *args: object, **kwargs: object) -> None:
        nonlocal requests
        requests += 1

    backend = LocalDockerExecutionBackend(data_root=data_root, runtime=runtime, watchdog=False)
    started = time.perf_counter()
    client = runtime.client()  # negotiating the API version is one request; counted below
    requests += 1
    client.hooks["response"].append(count)
    statuses = asyncio.run(backend.poll(handles))
    fresh_s, fresh_requests = time.perf_counter() - started, requests
    requests = 0
    started = time.perf_counter()
    statuses += asyncio.run(backend.poll(handles))
    warm_s, warm_requests = time.perf_counter() - started, requests
    if any(s.state is not TaskState.RUNNING for s in statuses):
        raise SystemExit("bench_poll: a container is not running")
    client.close()
    return fresh_s, fresh_requests, warm_s, warm_requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--containers", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--baseline-repeats", type=int, default=3)
    args = parser.parse_args()
    host = docker_host("bench_poll")
    tag = uuid.uuid4().hex[:12]
    data_root = tempfile.mkdtemp(prefix="altar-bench-poll-")
    backend = LocalDockerExecutionBackend(data_root=data_root, watchdog=False)
    print(f"starting {args.containers} sleep containers (network none) on {host} ...", flush=True)
    created = time.perf_counter()
    handles = start_containers(backend, args.containers, tag)
    print(f"  started in {time.perf_counter() - created:.1f} s", flush=True)
    try:
        ours = [backend_poll(host, data_root, handles) for _ in range(args.repeats)]
        theirs = [baseline_inspect_each(handles) for _ in range(args.baseline_repeats)]
    finally:
        runtime = DockerSdkRuntime(host)
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(runtime.remove, [h.external_id for h in handles]))
        runtime.client().close()
    inspect_s = statistics.median(theirs)
    fresh_s = statistics.median(r[0] for r in ours)
    warm_s = statistics.median(r[2] for r in ours)
    fresh_requests = max(r[1] for r in ours)
    warm_requests = max(r[3] for r in ours)
    n = args.containers
    rows = [
        ("altar 0.3.0: docker inspect per container", inspect_s, len(theirs), n),
        ("local backend: poll, fresh instance", fresh_s, len(ours), fresh_requests),
        ("local backend: poll, warm instance", warm_s, len(ours), warm_requests),
    ]
    print()
    print(f"polling {n} running containers (medians)")
    print(f"| {'method':<42} | {'seconds':>8} | {'runs':>4} | {'requests':>8} | {'speed-up':>8} |")
    print(f"|{'-' * 44}|{'-' * 10}|{'-' * 6}|{'-' * 10}|{'-' * 10}|")
    for name, seconds, runs, requests in rows:
        print(
            f"| {name:<42} | {seconds:8.3f} | {runs:4} | {requests:8} | "
            f"{inspect_s / seconds:7.0f}x |"
        )
    ratio = inspect_s / fresh_s
    met = ratio >= TARGET_RATIO and fresh_requests <= TARGET_REQUESTS
    print()
    print(
        f"target: >= {TARGET_RATIO:.0f}x and <= {TARGET_REQUESTS} Engine API requests per poll, "
        f"judged on the fresh instance (its requests include API version negotiation): "
        f"{ratio:.0f}x, {fresh_requests} requests: "
        f"{'met' if met else 'MISSED'}"
    )


if __name__ == "__main__":
    main()
