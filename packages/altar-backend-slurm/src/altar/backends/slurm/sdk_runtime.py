"""The real login nodes: this machine, or a host reached over ssh (rsync for files).

Both reuse the httk adapters' stdlib runtime (``httk.workflow.adapter_runtime``) instead of a
copy of it: its ``LocalTarget``/``SshTarget`` run argument vectors (ssh quotes each word
through the far side's login shell with the adapters' single quoting helper, and multiplexes
one connection), and its ``rsync`` moves files with ``--protect-args``. This module only adds
the two ssh options the adapters' queues do not have (``-F`` config, ``-i`` identity) and
turns the runtime's failures into this backend's seam errors.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from altar.backends.slurm.runtime import (
    CommandResult,
    LoginNodeUnknownError,
    LoginNodeUnreachableError,
    TransferError,
)
from httk.workflow.adapter_runtime.targets import LocalTarget, SshTarget
from httk.workflow.adapter_runtime.transfer import copy_local, rsync

__all__ = ["LocalLoginNode", "SshLoginNode"]

#: ssh's own exit status when it could not connect or authenticate (the command never ran).
SSH_FAILURE = 255
#: What OpenSSH prints when the host name does not resolve (the getaddrinfo failure).
_UNRESOLVED = re.compile(r"Could not resolve hostname")


class LocalLoginNode:
    """``sbatch`` and friends on this machine's ``PATH``; the data root is a local path."""

    remote = False

    def __init__(self) -> None:
        self._target = LocalTarget({})

    def __repr__(self) -> str:
        return "LocalLoginNode()"

    def run(self, argv: Sequence[str]) -> CommandResult:
        try:
            done = self._target.run(argv)
        except OSError as error:
            raise LoginNodeUnreachableError(f"cannot run {argv[0]!r} here: {error}") from error
        return CommandResult(done.returncode, done.stdout, done.stderr)

    def push(self, local: str, remote: str) -> None:
        _copy_if_changed(Path(local), Path(remote))

    def pull(self, remote: str, local: str) -> None:
        _copy_if_changed(Path(remote), Path(local))


def _copy_if_changed(source: Path, destination: Path) -> None:
    """Copy unless ``destination`` already has the size and mtime (rsync's quick check)."""
    try:
        theirs, ours = destination.stat(), source.stat()
        if theirs.st_size == ours.st_size and theirs.st_mtime_ns == ours.st_mtime_ns:
            return
    except FileNotFoundError:
        pass
    try:
        copy_local(source, destination)
    except OSError as error:
        raise TransferError(f"cannot copy {source} to {destination}: {error}") from error


class _Target(SshTarget):
    """The adapters' ssh target, plus ``-F`` and ``-i`` for every connection it makes."""

    def __init__(self, settings: dict[str, str], config: str | None, identity: str | None) -> None:
        super().__init__(settings)
        self._extra = [*(["-F", config] if config else []), *(["-i", identity] if identity else [])]

    def base_options(self) -> list[str]:
        return [*self._extra, *super().base_options()]


class SshLoginNode:
    """A login node reached with the local ``ssh`` client, one multiplexed connection.

    ``host`` may be an alias from ``ssh_config``; ``user``/``port`` override it.
    """

    remote = True

    def __init__(
        self,
        host: str,
        *,
        user: str | None = None,
        port: int | None = None,
        ssh_config: str | None = None,
        identity_file: str | None = None,
        multiplex_s: int = 60,
    ) -> None:
        settings = {"host": host, "ssh_multiplex": str(multiplex_s) if multiplex_s else "no"}
        if user:
            settings["username"] = user
        if port is not None:
            settings["port"] = str(port)
        for name, path in (("ssh_config", ssh_config), ("identity_file", identity_file)):
            if path is not None and not os.path.isfile(path):
                raise ValueError(f"{name} {path!r} is not a file")
        try:
            self._target = _Target(settings, ssh_config, identity_file)
        except ValueError as error:
            raise ValueError(f"slurm backend ssh options: {error}") from error
        self.destination = self._target.destination

    def __repr__(self) -> str:
        return f"SshLoginNode({self.destination!r})"

    def run(self, argv: Sequence[str]) -> CommandResult:
        try:
            done = self._target.run(argv)
        except OSError as error:
            raise LoginNodeUnreachableError(f"cannot start ssh: {error}") from error
        if done.returncode == SSH_FAILURE:
            said = done.stderr.strip() or "exit 255"
            unknown = _UNRESOLVED.search(said) is not None
            kind = LoginNodeUnknownError if unknown else LoginNodeUnreachableError
            raise kind(f"ssh to {self.destination} failed: {said}")
        return CommandResult(done.returncode, done.stdout, done.stderr)

    def push(self, local: str, remote: str) -> None:
        self._rsync(source=local, destination=remote, push=True)

    def pull(self, remote: str, local: str) -> None:
        self._rsync(source=remote, destination=local, push=False)

    def _rsync(self, *, source: str, destination: str, push: bool) -> None:
        try:
            rsync(
                self._target,
                source=source,
                destination=destination,
                directory=False,
                files=None,
                push=push,
            )
        except (OSError, RuntimeError) as error:
            raise TransferError(str(error)) from error
