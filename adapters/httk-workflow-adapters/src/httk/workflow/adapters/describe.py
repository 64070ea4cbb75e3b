"""What ``remote show`` and ``remote remove`` report: provenance of settings, never a secret."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .bundles import (
    _candidates,
    check_remote_name,
    discover_project,
    project_default_queue,
    read_metadata,
    split_remote,
    validate_adapter_bundle,
)
from .constants import ADAPTER_EXECUTABLE, CREDENTIALS_FILE, DEFAULT_TIMEOUT_SECONDS, METADATA_FILE
from .errors import UnknownRemote
from .settings import credentials_path, read_credentials

DESCRIPTION_FORMAT = "httk-remote-description"


def find_bundle(name: str, *, project: str | os.PathLike[str] | None = None) -> tuple[Path, bool]:
    """The bundle directory a name refers to (project scope first), without validating it.

    The name must be a plain directory entry: ``remote remove ..`` must not delete the
    project (or the configuration home) that holds the remotes directory.
    """
    bare, _ = split_remote(name)
    check_remote_name(bare)
    for bundle, project_local in _candidates(bare, discover_project(project)):
        if bundle.is_dir():
            return bundle, project_local
    raise UnknownRemote(f"unknown remote: {bare}")


def describe_remote(name: str, *, project: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """A secret-free description of a bundle; an invalid bundle is described, not refused."""
    bundle, project_local = find_bundle(name, project=project)
    problem: str | None = None
    try:
        validate_adapter_bundle(bundle)
    except ValueError as exc:
        problem = str(exc)
    try:
        metadata = read_metadata(bundle)
    except ValueError:
        metadata = {}
    queues_doc = metadata.get("queues", {"default": {}})
    queues: dict[str, Any] = {}
    if isinstance(queues_doc, Mapping):
        for queue in sorted(str(q) for q in queues_doc):
            stored = queues_doc[queue]
            settings = dict(stored) if isinstance(stored, Mapping) else {}
            try:
                secrets = sorted(read_credentials(bundle, queue))
            except ValueError as exc:
                problem = problem or str(exc)
                secrets = []
            source = {key: METADATA_FILE for key in settings}
            source.update({key: CREDENTIALS_FILE for key in secrets})
            queues[queue] = {
                "settings": settings,
                "settings_source": dict(sorted(source.items())),
                "credential_keys": secrets,
            }
    credentials = credentials_path(bundle)
    # Described as found, even when malformed (validation has reported that already).
    binaries = metadata.get("required_binaries", [])
    return {
        "format": DESCRIPTION_FORMAT,
        "format_version": 1,
        "name": bundle.name,
        "scope": "project" if project_local else "global",
        "bundle": str(bundle),
        "valid": problem is None,
        "problem": problem,
        "kind": metadata.get("kind"),
        "adapter_version": metadata.get("adapter_version"),
        "timeout_seconds": metadata.get("timeout_seconds", DEFAULT_TIMEOUT_SECONDS),
        "required_binaries": list(binaries) if isinstance(binaries, list) else [binaries],
        "adapter": str(bundle / ADAPTER_EXECUTABLE),
        "queues": queues,
        "credentials_file": str(credentials) if credentials.exists() else None,
        "default_queue": project_default_queue(discover_project(project)) or "default",
    }


def remove_remote(name: str, *, project: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Delete a bundle directory (credentials included)."""
    bundle, project_local = find_bundle(name, project=project)
    shutil.rmtree(bundle)
    return {
        "name": bundle.name,
        "scope": "project" if project_local else "global",
        "bundle": str(bundle),
        "removed": True,
    }
