"""Queue settings: shareable ones in ``remote.json``, everything else in ``credentials.json``."""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ._jsonio import read_json_object, write_json_atomic, write_text_atomic
from .bundles import metadata_path, read_metadata
from .constants import CREDENTIALS_FILE, PERSISTABLE_QUEUE_SETTINGS
from .errors import BundleError, InsecureCredentialsWarning


def split_settings(settings: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(persistable, credentials)``: a key the engine does not know is treated as a secret."""
    persistable = {k: v for k, v in settings.items() if k in PERSISTABLE_QUEUE_SETTINGS}
    credentials = {k: v for k, v in settings.items() if k not in PERSISTABLE_QUEUE_SETTINGS}
    return persistable, credentials


def parse_assignment(value: str) -> tuple[str, str]:
    """One ``KEY=VALUE`` from the command line; the value stays a string."""
    key, equals, setting = value.partition("=")
    if not equals or not key:
        raise BundleError(f"adapter setting must use KEY=VALUE: {value!r}")
    return key, setting


def parse_assignments(values: list[str] | None) -> dict[str, str]:
    """Several ``KEY=VALUE``; a later duplicate wins."""
    return dict(parse_assignment(value) for value in values or [])


@contextlib.contextmanager
def _settings_lock(bundle: str | os.PathLike[str]) -> Iterator[None]:
    """Serialise the read-merge-write of one bundle's settings between processes.

    The lock is an ``flock`` on the bundle directory itself: the settings files are replaced
    (temp file + rename), so a lock on them would guard an inode that is about to go away,
    and a lock file would add a file to the bundle's layout.
    """
    try:
        import fcntl
    except ImportError:  # not POSIX: no other process to race with that we could stop
        yield
        return
    fd = os.open(Path(bundle).expanduser(), os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


GITIGNORE = ".gitignore"
#: What a bundle's .gitignore keeps out of version control: the secrets and their temp files.
IGNORED = (CREDENTIALS_FILE, f".{CREDENTIALS_FILE}.*")


def credentials_path(bundle: str | os.PathLike[str]) -> Path:
    return Path(bundle).expanduser() / CREDENTIALS_FILE


def ignore_credentials(bundle: str | os.PathLike[str]) -> None:
    """Make sure the bundle's ``.gitignore`` names ``credentials.json``.

    A project's remotes live inside the project, so ``git add -A`` would otherwise stage
    the secrets. Lines the operator added are kept; nothing is written if all are there.
    """
    path = Path(bundle).expanduser() / GITIGNORE
    try:
        present = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        present = []
    missing = [line for line in IGNORED if line not in present]
    if missing:
        write_text_atomic(path, "".join(f"{line}\n" for line in [*present, *missing]))


def check_credentials_mode(path: Path) -> None:
    """Warn (:class:`InsecureCredentialsWarning`) when others may read ``path``."""
    try:
        mode = path.stat().st_mode & 0o777
    except FileNotFoundError:
        return
    if mode & 0o077:
        warnings.warn(
            f"{path} is readable by others (mode {mode:04o}); run: chmod 600 {path}",
            InsecureCredentialsWarning,
            stacklevel=3,
        )


def _credentials_document(bundle: str | os.PathLike[str]) -> dict[str, Any]:
    path = credentials_path(bundle)
    if not path.exists():
        return {}
    check_credentials_mode(path)
    return read_json_object(path, "credentials JSON")


def read_credentials(bundle: str | os.PathLike[str], queue: str) -> dict[str, Any]:
    """The secrets stored for one queue (a copy); none stored → ``{}``."""
    section = _credentials_document(bundle).get(queue)
    return dict(section) if isinstance(section, Mapping) else {}


def store_credentials(
    bundle: str | os.PathLike[str], queue: str, settings: Mapping[str, Any]
) -> Path:
    """Merge secrets for one queue into ``credentials.json`` (mode 0600, written atomically)."""
    with _settings_lock(bundle):
        document = _credentials_document(bundle)
        section = document.get(queue)
        merged = dict(section) if isinstance(section, Mapping) else {}
        merged.update(settings)
        document[queue] = merged
        ignore_credentials(bundle)
        return write_json_atomic(credentials_path(bundle), document, mode=0o600)


def store_queue_settings(
    bundle: str | os.PathLike[str], queue: str, settings: Mapping[str, Any]
) -> Path:
    """Merge persistable settings into ``remote.json`` ``queues[queue]`` (atomically)."""
    with _settings_lock(bundle):
        metadata = read_metadata(bundle)
        queues = metadata.get("queues")
        queues = dict(queues) if isinstance(queues, Mapping) else {}
        current = queues.get(queue)
        merged = dict(current) if isinstance(current, Mapping) else {}
        merged.update(settings)
        queues[queue] = merged
        metadata["queues"] = queues
        return write_json_atomic(metadata_path(bundle), metadata)


def queue_settings(bundle: str | os.PathLike[str], queue: str) -> dict[str, Any]:
    """The one flat view an adapter sees: ``remote.json`` settings with credentials laid over."""
    queues = read_metadata(bundle).get("queues")
    section = queues.get(queue) if isinstance(queues, Mapping) else None
    merged = dict(section) if isinstance(section, Mapping) else {}
    merged.update(read_credentials(bundle, queue))
    return merged


def persist_settings(
    bundle: str | os.PathLike[str], queue: str, settings: Mapping[str, Any]
) -> tuple[Path | None, Path | None, list[str]]:
    """Store configured settings split by name; returns the files written and the secret names."""
    persistable, credentials = split_settings(settings)
    metadata_file = store_queue_settings(bundle, queue, persistable) if persistable else None
    credentials_file = store_credentials(bundle, queue, credentials) if credentials else None
    return metadata_file, credentials_file, sorted(credentials)


def unset_settings(
    bundle: str | os.PathLike[str], queue: str, keys: list[str]
) -> dict[str, list[str]]:
    """Remove settings or credentials of one queue; which file each key left.

    A key stored in neither file is an error naming it, and nothing is changed.
    """
    with _settings_lock(bundle):
        metadata = read_metadata(bundle)
        queues = metadata.get("queues")
        queues = dict(queues) if isinstance(queues, Mapping) else {}
        stored = dict(queues.get(queue) or {})
        document = _credentials_document(bundle)
        secrets = dict(document.get(queue) or {})
        unknown = [key for key in keys if key not in stored and key not in secrets]
        if unknown:
            raise BundleError(f"queue {queue} has no setting or credential {', '.join(unknown)}")
        removed: dict[str, list[str]] = {"remote.json": [], CREDENTIALS_FILE: []}
        for key in keys:
            if key in stored:
                del stored[key]
                removed["remote.json"].append(key)
            if key in secrets:
                del secrets[key]
                removed[CREDENTIALS_FILE].append(key)
        if removed["remote.json"]:
            queues[queue] = stored
            metadata["queues"] = queues
            write_json_atomic(metadata_path(bundle), metadata)
        if removed[CREDENTIALS_FILE]:
            if secrets:
                document[queue] = secrets
            else:
                document.pop(queue, None)
            write_json_atomic(credentials_path(bundle), document, mode=0o600)
        return removed


def add_queue(
    bundle: str | os.PathLike[str], queue: str, settings: Mapping[str, Any] | None = None
) -> None:
    """A new, empty (or ``settings``) queue in ``remote.json``; an existing one is an error."""
    if not queue or ":" in queue or any(ch < " " for ch in queue):
        raise BundleError(f"invalid queue name: {queue!r}")
    with _settings_lock(bundle):
        metadata = read_metadata(bundle)
        queues = metadata.get("queues", {"default": {}})
        queues = dict(queues) if isinstance(queues, Mapping) else {}
        if queue in queues:
            raise BundleError(f"queue {queue} already exists")
        queues[queue] = dict(settings or {})
        metadata["queues"] = queues
        write_json_atomic(metadata_path(bundle), metadata)


def remove_queue(bundle: str | os.PathLike[str], queue: str) -> None:
    """Remove a queue and its credentials; the last queue cannot be removed."""
    with _settings_lock(bundle):
        metadata = read_metadata(bundle)
        queues = metadata.get("queues", {"default": {}})
        queues = dict(queues) if isinstance(queues, Mapping) else {}
        if queue not in queues:
            raise BundleError(f"remote does not configure queue {queue!r}")
        if len(queues) == 1:
            raise BundleError("remote adapter must configure at least one queue")
        del queues[queue]
        metadata["queues"] = queues
        write_json_atomic(metadata_path(bundle), metadata)
        document = _credentials_document(bundle)
        if queue in document:
            del document[queue]
            write_json_atomic(credentials_path(bundle), document, mode=0o600)
