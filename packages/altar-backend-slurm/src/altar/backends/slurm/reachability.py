"""Whether the login node answers, and when a run should stop waiting for it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

from altar.backends.slurm.runtime import (
    LoginNodeLostError,
    LoginNodeUnknownError,
    LoginNodeUnreachableError,
)

__all__ = ["DEFAULT_UNREACHABLE_AFTER_S", "Reachability"]

#: How long the login node may stay unreachable before a run stops (``unreachable_after_s``).
DEFAULT_UNREACHABLE_AFTER_S = 300.0
_T = TypeVar("_T")


class Reachability:
    """Remembers since when the login node has not answered (one per backend).

    An unreachable login node is transient (BackendUnavailableError) until it has not
    answered for ``unreachable_after_s``, or at once when its name does not resolve; then it
    is lost: :meth:`raise_if_lost` raises :class:`LoginNodeLostError`, which is not
    transient, so the run stops with the reason and resumes later.
    """

    def __init__(self, unreachable_after_s: float | None) -> None:
        if unreachable_after_s is not None and not unreachable_after_s >= 0:
            raise ValueError(
                f"unreachable_after_s must be zero or more, or None, got {unreachable_after_s!r}"
            )
        self.unreachable_after_s = unreachable_after_s
        self._lost_since: float | None = None
        self._lost_error: LoginNodeUnreachableError | None = None

    async def watched(self, call: Callable[[], _T], *, poll: bool = False) -> _T:
        """``call`` in a thread, noting whether the login node answered. With ``poll`` a
        lost node raises :class:`LoginNodeLostError`; a submit never does (that would use
        an attempt)."""
        try:
            result = await asyncio.to_thread(call)
        except LoginNodeUnreachableError as error:
            if self._lost_since is None:
                self._lost_since = time.monotonic()
            self._lost_error = error
            if poll:
                self.raise_if_lost()
            raise
        self._lost_since = self._lost_error = None
        return result

    def raise_if_lost(self) -> None:
        error, since = self._lost_error, self._lost_since
        if error is None or since is None:
            return
        if isinstance(error, LoginNodeUnknownError):
            raise LoginNodeLostError(
                f"the login node's name does not resolve ({error}); check ssh_host, or the "
                "ssh_config alias it names"
            )
        waited = time.monotonic() - since
        if self.unreachable_after_s is not None and waited >= self.unreachable_after_s:
            raise LoginNodeLostError(
                f"the login node has not answered for {waited:.0f} s ({error}); check "
                "ssh_host, ssh_port and ssh_user, or raise unreachable_after_s"
            )
