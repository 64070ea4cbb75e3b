"""Timing and the small result table every benchmark here prints."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median_seconds(action: Callable[[], object], *, repeat: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        action()
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def report(
    title: str,
    measured: tuple[str, float],
    baseline: tuple[str, float],
    target: str,
    met: bool,
    *,
    unit: str = "ms",
    scale: float = 1000.0,
    extra: list[str] | None = None,
) -> None:
    ratio = measured[1] / baseline[1] if baseline[1] else float("inf")
    print(f"\n{title}")
    print(f"  {'case':<44}{'median':>12}")
    print(f"  {measured[0]:<44}{measured[1] * scale:>10.1f} {unit}")
    print(f"  {baseline[0]:<44}{baseline[1] * scale:>10.1f} {unit}")
    for line in extra or []:
        print(f"  {line}")
    print(f"  ratio {ratio:.2f}   target {target}   {'met' if met else 'MISSED'}")
