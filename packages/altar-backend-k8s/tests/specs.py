"""The spec most backend tests start from (its Job name is pinned where a test needs one)."""

from __future__ import annotations

from typing import Any

from altar.execution import ContainerTaskSpec


def spec(**overrides: Any) -> ContainerTaskSpec:
    """A small scoring task; ``overrides`` replace its fields."""
    values: dict[str, Any] = {
        "kind": "score",
        "image": "busybox:local",
        "command": ["sh", "-c", "echo hi"],
        "labels": {"job_id": "J", "fold": "0"},
        "timeout_s": 600,
    }
    values.update(overrides)
    return ContainerTaskSpec(**values)
