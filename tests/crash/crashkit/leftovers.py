"""What a run may leave behind: temporary files, processes, containers, in-process task records."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "Container",
    "containers",
    "in_process_records",
    "journal_handles",
    "processes_with",
    "temporary_files",
]


def temporary_files(roots: Iterable[Path]) -> list[Path]:
    """Every temporary file under ``roots``: altar's pattern, and ``*.tmp`` and ``*.partial``."""
    found: list[Path] = []
    for root in roots:
        for directory, _, names in os.walk(root):
            for name in names:
                if ".altar-tmp-" in name or name.endswith((".tmp", ".partial")):
                    found.append(Path(directory) / name)
    return sorted(found)


def processes_with(marker: str) -> list[tuple[int, str]]:
    """Live processes whose command line carries ``marker`` (every task's does)."""
    found = []
    me = os.getpid()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            raw = Path(entry.path, "cmdline").read_bytes()
        except OSError:
            continue  # gone meanwhile
        if marker.encode() in raw:
            found.append((int(entry.name), raw.replace(b"\0", b" ").decode(errors="replace")[:80]))
    return found


@dataclass(frozen=True)
class Container:
    id: str
    state: str
    labels: dict[str, str]


def containers(docker_host: str, filters: dict[str, Any] | None = None) -> list[Container]:
    """The containers of the engine at ``docker_host`` (all states), optionally filtered."""
    import docker  # the local backend's dependency; imported only where Docker is tested

    client = docker.APIClient(base_url=docker_host, version="auto", timeout=60)
    try:
        rows = client.containers(all=True, filters=filters or {})
    finally:
        client.close()
    return [
        Container(row["Id"], row.get("State", ""), dict(row.get("Labels") or {})) for row in rows
    ]


def in_process_records(data_root: Path) -> list[Path]:
    """Task records the in-process backend keeps in the data root (cleanup removes them)."""
    tasks = data_root / ".altar-in-process" / "tasks"
    return sorted(tasks.iterdir()) if tasks.is_dir() else []


def journal_handles(snapshot: dict[str, Any]) -> set[str]:
    """The external ids of every attempt the journal holds a handle for."""
    found = set()
    for record in (snapshot.get("tasks") or {}).values():
        for attempt in record.get("attempts") or []:
            handle = attempt.get("handle")
            if handle:
                found.add(str(handle["external_id"]))
    return found
