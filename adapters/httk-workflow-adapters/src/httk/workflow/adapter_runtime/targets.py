"""Where an operation's commands run: this machine, or a login node over ssh."""

from __future__ import annotations

import os
import sys

from .process import Completed
from .process import run as _run
from .requests import host_of, httk_prefix, port_of, text, username_of

# Typing names only: importing typing costs every adapter call start-up time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any, Protocol

    class Target(Protocol):
        """The seam every operation runs commands through."""

        remote: bool

        def run(self, argv: Sequence[str], *, cwd: str | None = None) -> Completed: ...

        def httk(self, argv: Sequence[str]) -> list[str]: ...


CONNECT_TIMEOUT = 20
DEFAULT_CONTROL_PERSIST = 60
_SOCKET_PATH_LIMIT = 104


class LocalTarget:
    """Commands run here, as argument vectors."""

    remote = False

    def __init__(self, settings: Mapping[str, Any]) -> None:
        self.settings = settings

    def run(self, argv: Sequence[str], *, cwd: str | None = None) -> Completed:
        return _run(argv, cwd=cwd)

    def httk(self, argv: Sequence[str]) -> list[str]:
        if not argv or argv[0] != "httk":
            return list(argv)
        prefix = httk_prefix(self.settings)
        if prefix is not None:
            return [*prefix, *argv[1:]]
        import shutil

        if shutil.which("httk") is None:
            return [sys.executable, "-m", "httk.core.cli", *argv[1:]]
        return list(argv)


def control_directory() -> str:
    """A per-user directory for ssh control sockets, refused unless private (0700, ours)."""
    import contextlib
    import stat
    import tempfile

    name = f"httk-ssh-{os.getuid()}"
    bases = [os.environ.get("XDG_RUNTIME_DIR") or "", tempfile.gettempdir(), "/tmp"]  # noqa: S108
    # A unix socket path must fit in 108 bytes; the socket name takes 32 more (+ .lock).
    usable = [b for b in bases if b and len(os.path.join(b, name)) + 41 < _SOCKET_PATH_LIMIT]
    if not usable:
        raise ValueError("no directory short enough for ssh control sockets; set XDG_RUNTIME_DIR")
    directory = os.path.join(usable[0], name)
    with contextlib.suppress(FileExistsError):
        os.mkdir(directory, 0o700)
    info = os.lstat(directory)
    if (
        not stat.S_ISDIR(info.st_mode)
        or info.st_uid != os.getuid()
        or stat.S_IMODE(info.st_mode) & 0o077
    ):
        raise ValueError(
            f"ssh control directory {directory} must be a directory owned by you with mode 0700"
        )
    return directory


def control_persist(settings: Mapping[str, Any]) -> int | None:
    """Seconds a multiplexing master outlives its last client, or ``None`` when not opted in."""
    value = text(settings, "ssh_multiplex")
    if value is None or value.lower() in {"0", "false", "no", "off"}:
        return None
    if value.isascii() and value.isdigit():
        return int(value)
    if value.lower() in {"1", "true", "yes", "on", "auto"}:
        return DEFAULT_CONTROL_PERSIST
    raise ValueError(f"queue setting ssh_multiplex must be yes, no or seconds: {value!r}")


def control_path(directory: str, destination: str, port: str | None) -> str:
    """The master's socket: one per destination and port, named without ssh's help.

    Naming it here (rather than with ssh's ``%C``) lets a client find a live master by
    connecting to the socket, instead of starting ``ssh -O check`` before every command.
    """
    import hashlib

    key = hashlib.sha256(f"{destination}\0{port or ''}".encode()).hexdigest()[:32]
    return os.path.join(directory, key)


def _socket_answers(path: str) -> bool:
    import socket

    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(2)
    try:
        probe.connect(path)
    except OSError:
        return False
    finally:
        probe.close()
    return True


class SshTarget:
    """Commands run on ``[username@]host`` through the local ``ssh`` client."""

    remote = True

    def __init__(self, settings: Mapping[str, Any]) -> None:
        self.settings = settings
        host = host_of(settings)
        if host is None:
            raise ValueError("the ssh-slurm adapter needs a queue setting host=HOSTNAME")
        username = username_of(settings)
        self.destination = host if username is None else f"{username}@{host}"
        self.port = port_of(settings)
        self.persist = control_persist(settings)
        self.control_path = (
            control_path(control_directory(), self.destination, self.port)
            if self.persist is not None
            else None
        )
        self._master_checked = False

    def base_options(self) -> list[str]:
        options = ["-p", self.port] if self.port is not None else []
        return [*options, "-o", "BatchMode=yes", "-o", f"ConnectTimeout={CONNECT_TIMEOUT}"]

    def transport(self) -> list[str]:
        """The ssh program and options every connection of this queue uses."""
        options = ["ssh", *self.base_options()]
        if self.control_path is not None:
            # Clients only ever join an existing master (started by ensure_master);
            # a client that became master itself would keep our pipes open.
            options += ["-o", "ControlMaster=no", "-o", f"ControlPath={self.control_path}"]
        return options

    def rsync_shell(self) -> str:
        """The transport as rsync's ``-e`` value, which rsync splits on whitespace.

        rsync (not a shell) reads that value, treating blanks, quotes and backslashes as
        syntax; a part holding any of them is refused rather than escaped.
        """
        parts = self.transport()
        if any(any(ch.isspace() for ch in part) for part in parts):
            raise ValueError("ssh transport arguments must not contain whitespace")
        if any(any(ch in "'\"\\" for ch in part) for part in parts):
            raise ValueError("ssh transport arguments must not contain quotes or backslashes")
        return " ".join(parts)

    def ensure_master(self) -> None:
        """Start the multiplexing master once, detached, if the queue opted in and none runs."""
        if self.control_path is None or self._master_checked:
            return
        self._master_checked = True
        import contextlib
        import fcntl
        import subprocess

        # One adapter at a time decides whether to start a master: two racing masters would
        # leave the loser running as a plain background connection.
        with open(f"{self.control_path}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if _socket_answers(self.control_path):
                return
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.control_path)  # stale: its master is gone
            # -f: ssh backgrounds itself in its own session after authenticating; the stdio
            # it keeps are /dev/null, never our pipes. A master that fails to start is not an
            # error here: the command then connects directly and reports what is wrong.
            subprocess.run(
                [
                    "ssh",
                    *self.base_options(),
                    "-o",
                    "ControlMaster=yes",
                    "-o",
                    f"ControlPath={self.control_path}",
                    "-o",
                    f"ControlPersist={self.persist}",
                    "-f",
                    "-N",
                    "--",
                    self.destination,
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=False,
            )

    def run(self, argv: Sequence[str], *, cwd: str | None = None) -> Completed:
        self.ensure_master()
        from .quoting import shell_command  # local commands never need a shell string

        return _run([*self.transport(), "--", self.destination, shell_command(argv, cwd=cwd)])

    def httk(self, argv: Sequence[str]) -> list[str]:
        prefix = httk_prefix(self.settings)
        if prefix is not None and argv and argv[0] == "httk":
            return [*prefix, *argv[1:]]
        return list(argv)


def target_for(kind: str, settings: Mapping[str, Any]) -> LocalTarget | SshTarget:
    return SshTarget(settings) if kind == "ssh-slurm" else LocalTarget(settings)
