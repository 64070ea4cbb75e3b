"""Where an operation's commands run: this machine, or a login node over ssh."""

from __future__ import annotations

import os
import sys

from .process import Completed
from .process import run as _run
from .requests import flag, host_of, httk_prefix, port_of, text, username_of

# Typing names only: importing typing costs every adapter call start-up time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any, Protocol

    class Target(Protocol):
        """The seam every operation runs commands through."""

        remote: bool

        def run(
            self, argv: Sequence[str], *, cwd: str | None = None, guard: bool = False
        ) -> Completed: ...

        def absolute(self, path: str, base: str | None = None) -> str: ...

        def httk(self, argv: Sequence[str]) -> list[str]: ...


CONNECT_TIMEOUT = 20
DEFAULT_CONTROL_PERSIST = 60
_SOCKET_PATH_LIMIT = 104
#: Sessions one multiplexing master carries at a time: below sshd's default MaxSessions (10),
#: whose excess sessions are refused (``mux_client_request_session … refused``).
SESSIONS_PER_MASTER = 8
#: Masters per destination; beyond MASTERS x SESSIONS_PER_MASTER operations connect directly.
MASTERS = 4
#: ssh's own exit status for "could not connect, authenticate or verify the host key".
SSH_FAILED = 255

# Runs the command with stdin from /dev/null while a watcher reads the ssh channel's stdin,
# which the runtime holds open and never writes: end of file means the caller is gone (a
# timeout killed it, or the connection dropped), and the watcher kills the whole process
# group sshd made for the session, so nothing the command started keeps running. One line,
# no "!" outside "$!", so that csh-family login shells pass it to sh unchanged.
GUARD = (
    'exec 3<&0; (trap "" TERM; while read -r _; do :; done <&3; kill -TERM 0; sleep 2; '
    'kill -KILL 0) & w=$!; exec 3<&-; "$@" </dev/null; s=$?; kill -KILL "$w" 2>/dev/null; '
    'exit "$s"'
)


class Unreachable(RuntimeError):
    """ssh could not reach the target (exit 255): the operation refuses with this message."""


class LocalTarget:
    """Commands run here, as argument vectors."""

    remote = False

    def __init__(self, settings: Mapping[str, Any]) -> None:
        self.settings = settings

    def run(self, argv: Sequence[str], *, cwd: str | None = None, guard: bool = False) -> Completed:
        return _run(argv, cwd=cwd)

    def absolute(self, path: str, base: str | None = None) -> str:
        """``~`` expanded; a relative path taken from ``base`` (default: the home directory)."""
        expanded = os.path.expanduser(path)
        if os.path.isabs(expanded):
            return os.path.normpath(expanded)
        return os.path.normpath(os.path.join(base or os.path.expanduser("~"), expanded))

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
        self._seats: int | None = None
        self._home: str | None = None
        # ssh_agent: commands through a process on the target instead of a login each (agent.py)
        self._agent_wanted = self.persist is not None and flag(settings, "ssh_agent", False)
        self._agent_path: str | None = None

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

    def _take_seat(self) -> str | None:
        """Hold one session seat of one master for this process; its control path, or None.

        Seats are byte-range locks in ``BASE.seats.lock``, released by the kernel when this
        process ends, so a killed operation never leaks one. With every seat taken the
        operation connects directly instead of drawing sshd's MaxSessions refusal.
        """
        import fcntl

        assert self.control_path is not None
        fd = os.open(f"{self.control_path}.seats.lock", os.O_RDWR | os.O_CREAT, 0o600)
        for master in range(MASTERS):
            for seat in range(SESSIONS_PER_MASTER):
                try:
                    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, master * 64 + seat)
                except OSError:
                    continue
                self._seats = fd  # kept open (and locked) until the process ends
                return master_path(self.control_path, master)
        os.close(fd)
        return None

    def ensure_master(self) -> None:
        """Start the multiplexing master once, detached, if the queue opted in and none runs."""
        if self.control_path is None or self._master_checked:
            return
        self._master_checked = True
        import contextlib
        import fcntl
        import subprocess

        self.control_path = self._take_seat()
        if self.control_path is None:
            return

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

    def run(self, argv: Sequence[str], *, cwd: str | None = None, guard: bool = False) -> Completed:
        """Run ``argv`` on the remote side.

        With ``guard`` the command runs under :data:`GUARD`: when this process (or the
        connection) goes away, the remote command's process group is killed with it.
        """
        self.ensure_master()
        if self._agent_wanted:
            path = self._ensure_agent()
            if path is not None:
                from . import agent

                answer = agent.run(path, argv, cwd)
                if answer is not None:
                    return answer
        return self._session(argv, cwd=cwd, guard=guard)

    def _session(
        self, argv: Sequence[str], *, cwd: str | None = None, guard: bool = False
    ) -> Completed:
        """``argv`` in a new ssh session (the login shell parses the quoted command)."""
        self.ensure_master()
        from .quoting import shell_command  # local commands never need a shell string

        words = ["sh", "-c", GUARD, "sh", *argv] if guard else list(argv)
        return _run(
            [*self.transport(), "--", self.destination, shell_command(words, cwd=cwd)],
            hold_stdin=guard,
        )

    def reachable(self) -> Completed:
        """``true`` on the remote side: exit 0, or ssh's 255 with its reason on stderr."""
        return self._session(["true"])

    def _ensure_agent(self) -> str | None:
        """The local socket of a running command agent, starting one if needed; else None.

        A failed start is remembered beside the master (``.agent-failed``, newer than the
        socket), so a target without python3 costs the attempt once per master, not per call.
        """
        if self._agent_path is not None or self.control_path is None:
            return self._agent_path or None
        import contextlib
        import fcntl
        import time

        from . import agent

        local = agent.local_socket(self.control_path)
        failed = f"{self.control_path}.agent-failed"
        self._agent_path = ""
        if not _socket_answers(self.control_path):
            return None  # no master: nothing to forward through
        if agent.ping(local):
            self._agent_path = local
            return local
        with contextlib.suppress(OSError):
            if os.stat(failed).st_mtime >= os.stat(self.control_path).st_mtime:
                return None
        with open(f"{self.control_path}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if agent.ping(local):
                self._agent_path = local
                return local
            remote = agent.remote_socket(self.home(), self.control_path)
            start = 'command -v python3 >/dev/null && { "$@" </dev/null >/dev/null 2>&1 & }'
            self._session(
                ["sh", "-c", start, "sh", "python3", "-c", agent.AGENT, remote, str(self.persist)]
            )
            with contextlib.suppress(FileNotFoundError):
                os.unlink(local)
            _run(
                [
                    *self.transport(),
                    "-O",
                    "forward",
                    "-L",
                    f"{local}:{remote}",
                    "--",
                    self.destination,
                ]
            )
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if agent.ping(local):
                    self._agent_path = local
                    return local
                time.sleep(0.05)
            with open(failed, "w"):
                pass
        return None

    def home(self) -> str:
        """The remote login directory, where ssh starts commands and rsync's relative paths."""
        if self._home is None:
            answer = self._session(["pwd"])
            if answer.returncode == SSH_FAILED:
                raise Unreachable(
                    f"cannot reach {self.destination}: {answer.stderr.strip() or SSH_FAILED}"
                )
            home = answer.stdout.strip()
            if answer.returncode != 0 or not home.startswith("/"):
                raise RuntimeError(
                    f"cannot read the home directory on {self.destination}: "
                    f"{answer.stderr.strip() or answer.returncode}"
                )
            self._home = home
        return self._home

    def absolute(self, path: str, base: str | None = None) -> str:
        """A remote path made absolute: ``~`` and relative paths are the login directory's."""
        import posixpath

        if path.startswith("/"):
            return posixpath.normpath(path)
        rest = home_relative(path)
        return posixpath.normpath(posixpath.join(base or self.home(), rest))

    def httk(self, argv: Sequence[str]) -> list[str]:
        prefix = httk_prefix(self.settings)
        if prefix is not None and argv and argv[0] == "httk":
            return [*prefix, *argv[1:]]
        return list(argv)


def master_path(base: str, master: int) -> str:
    """The control socket of master number ``master`` (the first keeps the plain name)."""
    return base if master == 0 else f"{base}-{master}"


def home_relative(path: str) -> str:
    """A remote ``~``/``~/x`` written relative to the login directory (``.``/``x``).

    No shell expands ``~`` in a quoted word or in rsync's protected arguments, so a
    workspace ``~/runs`` would otherwise become a directory literally named ``~``.
    """
    if path == "~":
        return "."
    if path.startswith("~/"):
        return path[2:].lstrip("/") or "."
    if path.startswith("~"):
        raise ValueError(f"a path starting with ~user is not supported on the remote: {path!r}")
    return path


def target_for(kind: str, settings: Mapping[str, Any]) -> LocalTarget | SshTarget:
    return SshTarget(settings) if kind == "ssh-slurm" else LocalTarget(settings)


def close_masters(settings: Mapping[str, Any]) -> list[str]:
    """Ask every multiplexing master of this queue's destination to exit; the sockets closed.

    Harmless when none runs. The operator's way to drop a connection at once instead of
    waiting ``ssh_multiplex`` seconds (after changing keys, say, or leaving a network).
    """
    import subprocess

    target = SshTarget({**settings, "ssh_multiplex": "yes"})
    assert target.control_path is not None
    closed = []
    for master in range(MASTERS):
        path = master_path(target.control_path, master)
        if not _socket_answers(path):
            continue
        subprocess.run(
            [
                "ssh",
                *target.base_options(),
                "-o",
                f"ControlPath={path}",
                "-O",
                "exit",
                "--",
                target.destination,
            ],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=False,
        )
        closed.append(path)
    return closed
