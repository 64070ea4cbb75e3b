"""Importing an httk v1 "computer" definition as a maintained bundle, without running any of it."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import Any

from ._jsonio import write_json_atomic
from .bundles import add_remote, read_metadata
from .constants import METADATA_FILE
from .errors import BundleError

LEGACY_EXECUTABLES = ("command", "install", "push", "pull", "start-taskmgr", "config")
_LEGACY_NAME = re.compile(r"[A-Z][A-Z0-9_]*")
_QUEUE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def parse_legacy_config(path: Path) -> dict[str, str]:
    """Read ``NAME=VALUE`` lines as data; anything a shell would have to evaluate is refused."""
    values: dict[str, str] = {}
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError as exc:
            raise BundleError(f"unsafe legacy adapter configuration at {path}:{number}") from exc
        if not tokens:
            continue
        name, equals, value = tokens[0].partition("=")
        if len(tokens) != 1 or not equals or not _LEGACY_NAME.fullmatch(name):
            raise BundleError(
                f"legacy adapter configuration is not a simple assignment at {path}:{number}"
            )
        values[name] = value
    return values


def _template(config: dict[str, str]) -> str:
    if "REMOTE_HOST" in config:
        return "ssh-slurm"
    if any(key.startswith("SLURM_") for key in config):
        return "local-slurm"
    if "LOCAL_HTTK_DIR" in config:
        return "local"
    raise BundleError("legacy computer definition cannot be mapped to a maintained adapter")


def import_v1_remote(
    source: str | os.PathLike[str],
    *,
    name: str | None = None,
    global_scope: bool = False,
    project: str | os.PathLike[str] | None = None,
) -> Path:
    """Map a v1 definition onto a maintained template; its scripts are never copied or run."""
    root = Path(source).expanduser().resolve()
    if not all((root / item).is_file() for item in LEGACY_EXECUTABLES):
        raise BundleError(
            "legacy computer definition does not contain the recognized executable set"
        )
    config = parse_legacy_config(root / "config")
    template = _template(config)
    queues: dict[str, dict[str, Any]] = {}
    for path in sorted([root / "config", *root.glob("config.*")]):
        queue = "default" if path.name == "config" else path.name.removeprefix("config.")
        if not _QUEUE_NAME.fullmatch(queue):
            raise BundleError(f"invalid legacy queue name: {queue!r}")
        legacy = dict(config) if queue == "default" else {**config, **parse_legacy_config(path)}
        row: dict[str, Any] = {"legacy_settings": legacy}
        base = legacy.get("REMOTE_HTTK_DIR" if template == "ssh-slurm" else "LOCAL_HTTK_DIR")
        if base:
            row["workspace"] = f"{base.rstrip('/')}/Runs/{queue}"
        if template == "ssh-slurm":
            row["host"] = legacy["REMOTE_HOST"]
            if legacy.get("USERNAME"):
                row["username"] = legacy["USERNAME"]
        queues[queue] = row
    bundle = add_remote(
        name or root.name, template=template, global_scope=global_scope, project=project
    )
    metadata = read_metadata(bundle)
    metadata["queues"] = queues
    metadata["legacy_import"] = {
        "format": "httk-v1-computer-import",
        "source": str(root),
        "legacy_executables_copied": False,
    }
    write_json_atomic(bundle / METADATA_FILE, metadata)
    return bundle
