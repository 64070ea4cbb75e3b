"""Minting task handles the same way in every backend."""

from __future__ import annotations

from collections.abc import Mapping

from altar.execution.types import ContainerTaskSpec, TaskHandle

__all__ = ["mint_handle"]


def mint_handle(
    backend: str,
    spec: ContainerTaskSpec,
    external_id: str,
    *,
    extra_labels: Mapping[str, str] | None = None,
) -> TaskHandle:
    """The handle of a task launched from ``spec``: its labels copied, its plugin identity kept.

    ``extra_labels`` (e.g. a provider-side name) are added on top of the spec's labels; the
    handle never shares the spec's dict, so changing one never changes the other.
    """
    labels = dict(spec.labels)
    if extra_labels:
        labels.update(extra_labels)
    return TaskHandle(backend, external_id, labels, spec.plugin_identity)
