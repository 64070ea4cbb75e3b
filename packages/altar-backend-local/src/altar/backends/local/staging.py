"""Staging into the data root: altar-core's :class:`~altar.execution.LocalStager`, configured.

The local backend used to carry its own stager (with an ``altar-local-staging/1`` index beside
the ``verified-file/1`` records). It now uses the one core gives every backend whose tasks read
a local directory (issue 12): one-pass verified copies renamed into place, ``verified-file/1``
records as the only "already there" mechanism, written when a staging ends. What stays local is
the containment rule: a logical path, or a symlink a task made, must not lead out of the data
root, for staging and for collecting alike.

``Stager``, ``local_path`` and ``StageAction`` keep their names for one release (altar 0.4).
"""

from __future__ import annotations

from functools import partial

from altar.backends.local.render import contained_host_path
from altar.execution import LocalStager, StageAction, Transfer, collect_output
from altar.execution.uris import local_path as _core_local_path

__all__ = ["BACKEND", "StageAction", "Stager", "local_path"]

BACKEND = "local"


def local_path(uri: str) -> str:
    """The absolute host path a transfer ``uri`` names (altar-core's one reading of uris)."""
    return _core_local_path(uri, backend=BACKEND)


class Stager(LocalStager):
    """The core stager over ``data_root``, refusing paths that leave it (blocking)."""

    def __init__(self, data_root: str, *, trust_records: bool = True) -> None:
        super().__init__(
            partial(contained_host_path, data_root), backend=BACKEND, trust_records=trust_records
        )
        self.data_root = data_root

    def collect(self, transfer: Transfer) -> None:
        """Copy one output back to its ``uri``, its declared digest checked; the output itself
        must not be a symlink a task pointed out of the data root."""
        source = contained_host_path(self.data_root, transfer.logical_path, follow_last=True)
        collect_output(source, transfer, backend=BACKEND)
