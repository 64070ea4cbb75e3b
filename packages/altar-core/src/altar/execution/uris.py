"""Transfer uris: which ones name a file on this machine, and which file.

A ``file://`` uri (on no host, or on ``localhost``) and a bare path name a local file; a bare
path may be relative and may hold colons (``chr1:100-200.bed`` is a file name, not a uri with
scheme ``chr1``). Anything of the form ``scheme://...`` (``gs://``, ``s3://``, ``https://``)
names bytes elsewhere, which backends that stage from this machine refuse.

A ``file://`` uri's path is percent-decoded (``file://localhost/tmp/a%20b`` is ``/tmp/a b``);
a bare path is taken as written. There is no tilde expansion anywhere: ``~/x`` is the relative
path ``~/x`` (below the working directory), on every backend, because a plan must mean the same
files whoever runs it. Write ``$HOME`` out, or use an absolute path.
"""

from __future__ import annotations

import os
import re
from urllib.parse import unquote, urlsplit

from altar.execution.errors import UnsupportedCapabilityError

__all__ = ["local_file", "local_path", "local_path_or_none"]

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


def _split(uri: str) -> tuple[str | None, str | None, str]:
    """(scheme, host, path) for a ``scheme://`` or ``file:`` uri; (None, None, uri) for a path."""
    if uri.startswith("file:"):
        parts = urlsplit(uri)
        return "file", parts.netloc, unquote(parts.path)
    match = _SCHEME.match(uri)
    if match is None:
        return None, None, uri
    return match.group(1), urlsplit(uri).netloc, uri


def local_path_or_none(uri: str) -> str | None:
    """The local path ``uri`` names, or None if it names bytes elsewhere."""
    scheme, host, path = _split(uri)
    if scheme is None or (scheme == "file" and host in ("", "localhost")):
        return path
    return None


def local_file(uri: str, *, backend: str) -> str:
    """The local path ``uri`` names (as written: a relative path stays relative).

    Raises :class:`~altar.execution.UnsupportedCapabilityError` (capability ``transfer_uri``)
    for a uri naming bytes elsewhere, saying that the ``backend`` backend moves only files on
    this machine.
    """
    scheme, host, path = _split(uri)
    if scheme is None or (scheme == "file" and host in ("", "localhost")):
        return path
    if scheme == "file":
        raise UnsupportedCapabilityError(
            f"transfer uri {uri!r} names host {host!r}; the {backend} backend reads and writes "
            "only files on this machine",
            capability="transfer_uri",
        )
    raise UnsupportedCapabilityError(
        f"transfer uri {uri!r} uses the {scheme!r} scheme; the {backend} backend stages only "
        "local paths and file:// URIs (download it to this machine first)",
        capability="transfer_uri",
    )


def local_path(uri: str, *, backend: str) -> str:
    """The absolute local path ``uri`` names (:func:`local_file`, made absolute, no ``~``).

    The one uri -> path rule every backend that reads or writes this machine's files uses.
    """
    return os.path.abspath(local_file(uri, backend=backend))
