"""What a Job manifest launches, read back for the conformance suite's ``launched_task``.

Shared by the conformance runs over the fake API server and over the 0.3.0-style async runtime,
so both read a manifest the same way (quantities as Kubernetes writes them).
"""

from __future__ import annotations

import re
from typing import Any

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def cpu_of(quantity: str | None) -> float | None:
    """``"250m"`` -> 0.25, ``"2"`` -> 2.0."""
    if quantity is None:
        return None
    return int(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


def memory_of(quantity: str | None) -> int | None:
    """``"512Mi"`` -> bytes; a plain number is bytes."""
    if quantity is None:
        return None
    match = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti)?", quantity)
    assert match, f"unexpected memory quantity {quantity!r}"
    return int(match.group(1)) * _BINARY.get(match.group(2) or "", 1)


def launched_from_template(template: dict[str, Any], launched_task: type) -> Any:
    """The ``main`` container of a pod template as a conformance ``LaunchedTask``."""
    [main] = [c for c in template["spec"]["containers"] if c["name"] == "main"]
    resources = main.get("resources") or {}
    limits = resources.get("limits") or {}
    requests = resources.get("requests") or {}
    return launched_task(
        image=main["image"],
        command=list(main.get("args") or []),
        env={e["name"]: e["value"] for e in main.get("env") or []},
        labels=dict(template["metadata"]["labels"]),
        cpu=cpu_of(requests.get("cpu")),
        memory_bytes=memory_of(limits.get("memory")),
        gpu_count=int(limits.get("nvidia.com/gpu", "0")),
    )


def provider_task_from_template(template: dict[str, Any], provider_task: type) -> Any:
    """The ``main`` container as the cluster holds it: image, reserved CPUs, memory limit."""
    [main] = [c for c in template["spec"]["containers"] if c["name"] == "main"]
    resources = main.get("resources") or {}
    limits = resources.get("limits") or {}
    requests = resources.get("requests") or {}
    return provider_task(
        image=main["image"],
        cpu=cpu_of(limits.get("cpu") or requests.get("cpu")),
        memory_bytes=memory_of(limits.get("memory")),
    )
