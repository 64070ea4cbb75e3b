"""Bundle validation, the two scopes a bundle lives in, and name resolution."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._jsonio import read_json_object
from .constants import (
    ADAPTER_EXECUTABLE,
    ADAPTER_FORMAT,
    ADAPTER_VERSION,
    DEFAULT_TIMEOUT_SECONDS,
    FORMAT_VERSION,
    MAINTAINED_TEMPLATES,
    METADATA_FILE,
)
from .errors import BundleError, InvalidRemoteName, UnknownRemote

PROJECT_DIRECTORY = ".httk-project"
PROJECT_FILE = "project.json"
REMOTES_DIRECTORY = "remotes"
#: ``add_remote`` outside a project, without ``global_scope`` (the contract's exact text).
NO_PROJECT = "a project is required unless --global is used"
TEMPLATES = Path(__file__).resolve().parent / "templates"


@dataclass(frozen=True)
class RemoteTarget:
    """A resolved ``NAME[:QUEUE]``: which bundle, which queue, and from which scope."""

    name: str
    queue: str
    bundle: Path
    project_local: bool


def metadata_path(bundle: str | os.PathLike[str]) -> Path:
    """Where the bundle's ``remote.json`` is (not resolved)."""
    return Path(bundle).expanduser() / METADATA_FILE


def read_metadata(bundle: str | os.PathLike[str]) -> dict[str, Any]:
    """The bundle's ``remote.json`` as a dict, unvalidated."""
    return read_json_object(metadata_path(bundle))


def validate_adapter_bundle(bundle: str | os.PathLike[str]) -> dict[str, Any]:
    """Check a bundle the way every resolve, add and run does, and return its metadata."""
    root = Path(bundle).expanduser().resolve()
    metadata = read_metadata(root)
    if metadata.get("format") != ADAPTER_FORMAT or metadata.get("format_version") != FORMAT_VERSION:
        raise BundleError("remote.json must use httk-computer-adapter format version 1")
    version = metadata.get("adapter_version")
    if version != ADAPTER_VERSION or isinstance(version, bool):
        raise BundleError(f"unsupported remote adapter version: {version!r}")
    executable = root / ADAPTER_EXECUTABLE
    if not executable.is_file() or not os.access(executable, os.X_OK):
        raise BundleError(f"adapter executable is not runnable: {executable}")
    queues = metadata.get("queues", {"default": {}})
    if not isinstance(queues, Mapping) or not queues:
        raise BundleError("remote adapter must configure at least one queue")
    if not all(isinstance(k, str) and isinstance(v, Mapping) for k, v in queues.items()):
        raise BundleError("remote adapter queues must map names to objects")
    timeout = metadata.get("timeout_seconds", DEFAULT_TIMEOUT_SECONDS)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise BundleError("adapter timeout_seconds must be positive")
    binaries = metadata.get("required_binaries", [])
    if isinstance(binaries, str | bytes) or not isinstance(binaries, Sequence):
        raise BundleError("required_binaries must be an array")
    for binary in binaries:
        if not isinstance(binary, str) or not binary:
            raise BundleError("required_binaries entries must be nonempty strings")
    for binary in binaries:
        if shutil.which(binary) is None:
            raise BundleError(f"required adapter binary is unavailable: {binary}")
    return metadata


def check_remote_name(name: str) -> str:
    """A remote's name is one directory entry below a remotes root, never a path."""
    if not name or "/" in name or name in {".", ".."}:
        raise InvalidRemoteName("invalid remote name")
    if ":" in name or any(ch < " " or ch == "\x7f" for ch in name):
        # NAME:QUEUE is split on the first colon, so such a remote could never be named again.
        raise InvalidRemoteName(
            f"invalid remote name: {name!r} (':' separates NAME:QUEUE; no control characters)"
        )
    return name


def split_remote(value: str) -> tuple[str, str | None]:
    """``NAME`` or ``NAME:QUEUE``, split on the first colon."""
    name, colon, queue = value.partition(":")
    if not name:
        raise BundleError("remote name cannot be empty")
    if colon and not queue:
        raise BundleError("queue name cannot be empty")
    return name, (queue if colon else None)


def config_home() -> Path:
    """``$HTTK_CONFIG_HOME``, else ``${XDG_CONFIG_HOME:-~/.config}/httk``."""
    explicit = os.environ.get("HTTK_CONFIG_HOME")
    if explicit:
        return Path(explicit).expanduser().resolve()
    base = os.environ.get("XDG_CONFIG_HOME") or "~/.config"
    return (Path(base).expanduser() / "httk").resolve()


def remotes_home() -> Path:
    """The global bundle root."""
    return config_home() / REMOTES_DIRECTORY


def discover_project(start: str | os.PathLike[str] | None = None) -> Path | None:
    """The nearest directory at or above ``start`` holding ``.httk-project/project.json``."""
    here = Path.cwd() if start is None else Path(start).expanduser()
    here = here.resolve()
    for candidate in (here, *here.parents):
        if (candidate / PROJECT_DIRECTORY / PROJECT_FILE).is_file():
            return candidate
    return None


def project_remote_roots(project_root: str | os.PathLike[str]) -> tuple[Path, ...]:
    """The project-scope bundle roots of a project."""
    return (Path(project_root) / PROJECT_DIRECTORY / REMOTES_DIRECTORY,)


def project_default_queue(project_root: Path | None) -> str | None:
    """``default_queue`` from the project's ``project.json``, if it names one."""
    if project_root is None:
        return None
    path = project_root / PROJECT_DIRECTORY / PROJECT_FILE
    if not path.is_file():
        return None
    value = read_json_object(path, "project JSON").get("default_queue")
    return value if isinstance(value, str) and value else None


def _candidates(name: str, project_root: Path | None) -> list[tuple[Path, bool]]:
    found: list[tuple[Path, bool]] = []
    if project_root is not None:
        found += [(root / name, True) for root in project_remote_roots(project_root)]
    found.append((remotes_home() / name, False))
    return found


def resolve_remote(value: str, *, project: str | os.PathLike[str] | None = None) -> RemoteTarget:
    """Find and validate the bundle ``NAME[:QUEUE]`` names (project scope shadows global)."""
    name, queue = split_remote(value)
    project_root = discover_project(project)
    for bundle, project_local in _candidates(name, project_root):
        if not bundle.is_dir():
            continue
        metadata = validate_adapter_bundle(bundle)
        chosen = queue or project_default_queue(project_root) or "default"
        queues = metadata.get("queues", {})
        if not isinstance(queues, Mapping) or chosen not in queues:
            raise BundleError(f"remote {name!r} does not configure queue {chosen!r}")
        return RemoteTarget(name, chosen, bundle, project_local)
    raise UnknownRemote(f"unknown remote: {name}")


def list_remotes(project: str | os.PathLike[str] | None = None) -> list[dict[str, str]]:
    """Every bundle directory in both scopes; a project bundle replaces a global one."""
    rows: dict[str, dict[str, str]] = {}
    roots: list[tuple[Path, str]] = [(remotes_home(), "global")]
    project_root = discover_project(project)
    if project_root is not None:
        roots += [(root, "project") for root in project_remote_roots(project_root)]
    for root, scope in roots:
        if not root.is_dir():
            continue
        for entry in root.iterdir():
            if entry.is_dir():
                rows[entry.name] = {"name": entry.name, "scope": scope, "path": str(entry)}
    return [rows[name] for name in sorted(rows)]


def template_path(template: str) -> Path:
    """The packaged template directory for a maintained kind."""
    if template not in MAINTAINED_TEMPLATES:
        raise BundleError(f"unknown maintained remote template: {template}")
    return TEMPLATES / template


def add_remote(
    name: str,
    *,
    template: str,
    global_scope: bool = False,
    project: str | os.PathLike[str] | None = None,
) -> Path:
    """Copy a maintained template into the project (or, with ``global_scope``, the global) root."""
    check_remote_name(name)
    source = template_path(template)
    if global_scope:
        destination = remotes_home() / name
    else:
        project_root = discover_project(project)
        if project_root is None:
            raise BundleError(NO_PROJECT)
        destination = project_remote_roots(project_root)[0] / name
    if destination.exists():
        raise FileExistsError(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    # Build beside the destination and rename, so a failed copy leaves nothing behind.
    staging = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=destination.parent))
    try:
        shutil.copytree(source, staging, dirs_exist_ok=True)
        # An installer that dropped the mode bit must not leave an unusable bundle.
        (staging / ADAPTER_EXECUTABLE).chmod(0o755)
        staging.chmod(0o755)
        from .settings import ignore_credentials  # settings imports this module

        ignore_credentials(staging)
        validate_adapter_bundle(staging)
        staging.rename(destination)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    validate_adapter_bundle(destination)
    return destination
