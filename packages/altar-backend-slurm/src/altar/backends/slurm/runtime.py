"""The runtime seam: a Slurm login node that runs argument vectors and moves files.

:class:`LoginNode` is all the backend talks to. :mod:`.sdk_runtime` implements it on this
machine (``sbatch`` on ``PATH``) or over ssh with rsync, reusing the httk adapters' runtime;
:mod:`.fake` implements it in memory, answering ``sbatch``/``squeue``/``sacct``/``scancel``
the way Slurm 22.05 does. Only plain values cross the seam and every method is synchronous
(the backend calls them through :func:`asyncio.to_thread`).

Errors crossing the seam:

- :class:`LoginNodeUnreachableError` (a :class:`~altar.execution.BackendUnavailableError`):
  the command could not be started at all (no ssh connection, no such program);
  :class:`LoginNodeUnknownError` when the host name does not resolve;
- :class:`TransferError`: a file could not be copied to or from the login node.

A command that ran and failed is not an error here: its :class:`CommandResult` carries the
exit status and stderr, and the backend decides what Slurm meant by it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from altar.execution import BackendUnavailableError

__all__ = [
    "CommandResult",
    "LoginNode",
    "LoginNodeLostError",
    "LoginNodeUnknownError",
    "LoginNodeUnreachableError",
    "TransferError",
]


class LoginNodeUnreachableError(BackendUnavailableError):
    """The login node could not be asked (ssh refused or timed out, program missing)."""


class LoginNodeUnknownError(LoginNodeUnreachableError):
    """The login node's name does not resolve (a typo, or a host that is gone)."""


class LoginNodeLostError(RuntimeError):
    """The login node has stayed unreachable too long, or its name does not resolve.

    Not a :class:`~altar.execution.BackendUnavailableError`: retrying would not help, so a
    run stops (and resumes once the cause is fixed) instead of waiting for ever.
    """


class TransferError(RuntimeError):
    """A file could not be copied between this machine and the login node."""


@dataclass(frozen=True)
class CommandResult:
    """What one command on the login node reported."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


class LoginNode(Protocol):
    """Where ``sbatch`` and friends run, and where the cluster's shared data root is visible."""

    #: True when paths on the login node are not this machine's paths (ssh).
    remote: bool

    def run(self, argv: Sequence[str]) -> CommandResult:
        """Run ``argv`` (never through a shell of ours) and wait for it."""
        ...

    def push(self, local: str, remote: str) -> None:
        """Copy the local file ``local`` to ``remote`` (parents made; unchanged files skipped)."""
        ...

    def pull(self, remote: str, local: str) -> None:
        """Copy the login node's file ``remote`` to ``local`` (parents made)."""
        ...
