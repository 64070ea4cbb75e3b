"""Claims: a run computing a key says so, so that two runs sharing a store compute it once.

``claims/<64 hex>.claim`` holds the holder's host, pid and run id; it is made with
``O_EXCL`` (one run wins) and its mtime is the lease, refreshed at every tick of the run.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["CLAIM_LEASE_S", "Claims"]

#: A claim its holder has not refreshed for this long is stale (its holder on another machine
#: is gone); a holder on this machine is judged by its pid at once.
CLAIM_LEASE_S = 600.0

_HOST = socket.gethostname()


class Claims:
    """The claims directory of a store."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, key: str) -> Path:
        return self.directory / f"{key.removeprefix('sha256:')}.claim"

    def claim(self, key: str, run_id: str, *, now: float | None = None) -> dict[str, Any] | None:
        """Claim ``key`` for ``run_id``: None if it is ours now, else the live holder's claim.

        Two runs of one plan sharing a store then compute each task once: the second waits for
        the first's entry. A claim of our own run (a resumed run) is ours; a stale one (its
        process gone, or not refreshed for :data:`CLAIM_LEASE_S`) is broken and taken.
        """
        path = self.path(key)
        mine = {"host": _HOST, "pid": os.getpid(), "run_id": run_id}
        path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(3):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                holder = _holder(path)
                if holder is None:
                    continue  # released meanwhile: try again
                if holder.get("run_id") == run_id:
                    self.refresh(key)
                    return None
                if not _stale(holder, path, time.time() if now is None else now):
                    return holder
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)  # a dead holder's: break it and claim again
                continue
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(json.dumps(mine))
            return None
        holder = _holder(path)
        return holder or mine

    def refresh(self, key: str) -> None:
        """Keep our claim alive (its mtime is the lease)."""
        with contextlib.suppress(OSError):
            os.utime(self.path(key))

    def release(self, key: str, run_id: str) -> None:
        """Drop our claim on ``key`` (another run's claim is left alone)."""
        path = self.path(key)
        holder = _holder(path)
        if holder is not None and holder.get("run_id") == run_id:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def _holder(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}  # being written, or damaged: judged by its age alone
    return data if isinstance(data, dict) else {}


def _stale(holder: Mapping[str, Any], path: Path, now: float) -> bool:
    if holder.get("host") == _HOST and isinstance(holder.get("pid"), int):
        try:
            os.kill(holder["pid"], 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass  # alive, another user's
    try:
        return now - path.stat().st_mtime > CLAIM_LEASE_S
    except FileNotFoundError:
        return True
