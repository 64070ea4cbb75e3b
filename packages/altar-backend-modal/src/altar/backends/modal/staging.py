"""Staging records on the Volume and local paths for transfer URIs.

A staged input with a digest gets a one-line record beside it on the volume, at
``<path>.sha256-staged`` (altar 0.3.0's format)::

    staged-file/1 sha256:<64 hex> <version>

``<version>`` is what the runtime reports for the uploaded file (the SDK runtime: its size and
mtime on the volume). A later ``stage_inputs`` skips the upload while the file's current
version still renders the same line; rewriting the file changes its version and voids it.
"""

from __future__ import annotations

from pathlib import Path

from altar.execution import uris

__all__ = [
    "STAGING_RECORD_FORMAT",
    "STAGING_RECORD_SUFFIX",
    "local_path",
    "staging_record_line",
    "staging_record_path",
]

STAGING_RECORD_SUFFIX = ".sha256-staged"
STAGING_RECORD_FORMAT = "staged-file/1"
_RECORD_READ_LIMIT = 512


def staging_record_path(remote_path: str) -> str:
    return remote_path + STAGING_RECORD_SUFFIX


def staging_record_line(digest: str, version: str) -> str:
    """The record line (without newline) for a digest and the file's version on the volume."""
    return f"{STAGING_RECORD_FORMAT} {digest} {version}"


def record_matches(raw: bytes | None, digest: str, version: str | None) -> bool:
    """True if a stored record vouches for ``digest`` at the file's current ``version``."""
    if raw is None or version is None:
        return False
    line = raw[:_RECORD_READ_LIMIT].decode("ascii", errors="replace").removesuffix("\n")
    return line == staging_record_line(digest, version)


def local_path(uri: str) -> Path:
    """The local file a transfer URI names: altar-core's one rule (:func:`uris.local_path`).

    A bare path or a ``file://`` URI, made absolute; ``~`` is an ordinary directory name, as on
    every backend. Other schemes (``gs://``, ``s3://``, ``http://``) are refused: this backend
    moves bytes between this machine and the volume only.
    """
    return Path(uris.local_path(uri, backend="Modal"))
