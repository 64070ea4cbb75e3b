"""Reading and atomically writing the small JSON documents of a bundle."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from .errors import BundleError


def read_json_object(path: Path, what: str = "adapter JSON") -> dict[str, Any]:
    """Parse ``path`` as one JSON object, naming the file in every error."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BundleError(f"cannot read {what} {path}: {exc}") from exc
    if not isinstance(document, dict):
        raise BundleError(f"{what} must be an object: {path}")
    return document


def write_json_atomic(path: Path, document: object, *, mode: int | None = None) -> Path:
    """Write compact, sorted JSON through a temp file in the same directory, then rename.

    With ``mode`` the temp file gets that mode *before* any byte is written, so a secret
    is never readable by others, not even for an instant.
    """
    text = json.dumps(document, sort_keys=True, separators=(",", ":")) + "\n"
    return write_text_atomic(path, text, mode=mode)


def write_text_atomic(path: Path, text: str, *, mode: int | None = None) -> Path:
    """Write ``text`` through a temp file in the same directory, then rename it into place."""
    if mode is None:
        # mkstemp makes 0600 files; a shareable document keeps its mode (or gets 0644).
        mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp_name, path)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise
    return path
