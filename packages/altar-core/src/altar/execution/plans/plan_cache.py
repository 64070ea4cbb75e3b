"""One parse of a plan file per process: the read commands ask for it more than once.

``altar status`` needs the run's plan for its retry budget and again for its resume line; at
100,000 tasks each parse costs seconds (issue 24). The cache is keyed on the file's resolved
path, size and modification time, so an edited plan is parsed again.
"""

from __future__ import annotations

import os
from pathlib import Path

from altar.execution.plans.plan import Plan, load_plan

__all__ = ["cached_plan", "clear"]

_CACHE: dict[tuple[str, int, int], Plan] = {}


def cached_plan(path: str | os.PathLike[str]) -> Plan:
    """``load_plan`` of ``path``, parsed once while the file is unchanged.

    Raises what ``load_plan`` raises (a missing file: ``OSError``/``PlanError``), uncached.
    """
    resolved = Path(path).resolve()
    try:
        stat = resolved.stat()
    except OSError:
        return load_plan(path)  # its own error for a missing file
    key = (str(resolved), stat.st_size, stat.st_mtime_ns)
    plan = _CACHE.get(key)
    if plan is None:
        plan = load_plan(path)
        _CACHE.clear()  # one plan at a time: a long-lived process must not grow
        _CACHE[key] = plan
    return plan


def clear() -> None:
    """Forget the cached plan (tests)."""
    _CACHE.clear()
