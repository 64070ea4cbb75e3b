"""Running one command to completion and collecting its exit status and output.

This is ``subprocess.run(argv, cwd=cwd, stdin=DEVNULL, capture_output=True, text=True)``
without importing :mod:`subprocess`, whose imports (threading, selectors, locale, ``re``,
``enum``) cost a dispatcher more start-up time than the rest of a local ``invoke``. The
command is an argument vector started with :func:`os.posix_spawnp`; it stays in the
runtime's process group, so ``run_adapter``'s timeout kills it together with the runtime.
"""

from __future__ import annotations

import os

# Typing names only: importing typing costs every adapter call start-up time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

_CHUNK = 65536


class Completed:
    """What a finished command reported."""

    __slots__ = ("returncode", "stderr", "stdout")

    def __init__(self, returncode: int, stdout: str, stderr: str) -> None:
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr


def _signal_number(name: str) -> int:
    # _signal is built in and already loaded; the signal module would import enum.
    import _signal  # type: ignore[import-not-found]  # no stub for the C module

    number: int = getattr(_signal, name)
    return number


def _default_signals() -> tuple[int, ...]:
    # Python ignores SIGPIPE and SIGXFSZ; subprocess restores both for its children.
    return tuple(_signal_number(name) for name in ("SIGPIPE", "SIGXFSZ"))


def _text(data: bytes) -> str:
    """Output as text without losing a byte: UTF-8, undecodable bytes as lone surrogates.

    A command that already ran must not turn into a failure because it printed a PNG
    header or Latin-1; and CR / CRLF are kept (no universal newlines). The JSON result
    carries the surrogates as ``\\udcXX`` escapes; ``decoded(text)`` gives the bytes back.
    """
    return data.decode("utf-8", "surrogateescape")


def encoded(text: str) -> bytes:
    """The exact bytes a command wrote, from what :func:`run` returned."""
    return text.encode("utf-8", "surrogateescape")


def _inherited_descriptors() -> list[int]:
    """Inheritable descriptors above 2, which the command must not receive.

    subprocess closes every descriptor but the three standard ones in the child: a command
    must not hold on to a pipe of whoever started the adapter either.
    """
    try:
        names = os.listdir("/dev/fd")
    except OSError:
        return []
    inherited = []
    for name in names:
        descriptor = int(name)
        try:
            if descriptor > 2 and os.get_inheritable(descriptor):
                inherited.append(descriptor)
        except OSError:
            pass  # the directory listing's own descriptor, already closed
    return inherited


def _collect(stdout: int, stderr: int) -> tuple[bytes, bytes]:
    """Read both pipes to their end, whichever has data, so neither can fill and block."""
    import select

    chunks: dict[int, list[bytes]] = {stdout: [], stderr: []}
    poller = select.poll()
    for descriptor in chunks:
        poller.register(descriptor, select.POLLIN)
    open_pipes = len(chunks)
    while open_pipes:
        for descriptor, _ in poller.poll():
            data = os.read(descriptor, _CHUNK)
            if data:
                chunks[descriptor].append(data)
            else:
                poller.unregister(descriptor)
                open_pipes -= 1
    return b"".join(chunks[stdout]), b"".join(chunks[stderr])


def _spawn(argv: Sequence[str], stdout: int, stderr: int, stdin: int | None = None) -> int:
    first: tuple[int | str, ...] = (
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)
        if stdin is None
        else (os.POSIX_SPAWN_DUP2, stdin, 0)
    )
    actions: list[tuple[int | str, ...]] = [
        first,
        (os.POSIX_SPAWN_DUP2, stdout, 1),
        (os.POSIX_SPAWN_DUP2, stderr, 2),
    ]
    actions += [(os.POSIX_SPAWN_CLOSE, fd) for fd in _inherited_descriptors()]
    return os.posix_spawnp(
        argv[0], list(argv), os.environ, file_actions=actions, setsigdef=_default_signals()
    )


def run(argv: Sequence[str], *, cwd: str | None = None, hold_stdin: bool = False) -> Completed:
    """Run ``argv`` (searched on ``PATH``) in ``cwd`` and wait for it.

    A missing program or directory raises the ``OSError`` subprocess would raise. With a
    ``cwd`` the calling process changes directory for the moment of the spawn, which is
    fine for the single-threaded runtime but not for a threaded caller. With
    ``hold_stdin`` the command's stdin is a pipe this process keeps open, never writing,
    until the command ends: its end of file tells the command that we are gone (ssh
    forwards it to the remote side, where the guard of ``SshTarget`` kills the command).
    """
    if not argv:
        raise ValueError("a command needs at least a program name")
    here = None
    if cwd is not None:
        # posix_spawn cannot change directory (Python 3.11 exposes no chdir action), so
        # the runtime steps into cwd for the spawn and straight back through this handle.
        try:
            here = os.open(".", os.O_RDONLY)
        except OSError:
            return _run_with_subprocess(argv, cwd)
    held = os.pipe() if hold_stdin else None
    try:
        return _run_spawned(argv, cwd, here, held)
    finally:
        if here is not None:
            os.close(here)
        if held is not None:
            os.close(held[1])  # _run_spawned closes the read end


def _run_spawned(
    argv: Sequence[str], cwd: str | None, here: int | None, held: tuple[int, int] | None
) -> Completed:
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    descriptors = (out_read, out_write, err_read, err_write, *(held or ()))
    if min(descriptors) <= 2:
        # A standard descriptor was closed, so a pipe took its number and the spawn's
        # redirections would clobber it. Rare enough to hand to subprocess.
        for descriptor in (out_read, out_write, err_read, err_write, *(held or ())[:1]):
            os.close(descriptor)
        return _run_with_subprocess(argv, cwd)
    stdin = None if held is None else held[0]
    try:
        if cwd is None or here is None:
            pid = _spawn(argv, out_write, err_write, stdin)
        else:
            os.chdir(cwd)
            try:
                pid = _spawn(argv, out_write, err_write, stdin)
            finally:
                os.fchdir(here)
    except BaseException:
        os.close(out_read)
        os.close(err_read)
        raise
    finally:
        os.close(out_write)
        os.close(err_write)
        if held is not None:
            os.close(held[0])
    try:
        stdout, stderr = _collect(out_read, err_read)
        _, status = os.waitpid(pid, 0)
    except BaseException:
        # As subprocess.run does when interrupted: the command does not outlive the call.
        os.kill(pid, _signal_number("SIGKILL"))
        os.waitpid(pid, 0)
        raise
    finally:
        os.close(out_read)
        os.close(err_read)
    return Completed(os.waitstatus_to_exitcode(status), _text(stdout), _text(stderr))


def _run_with_subprocess(argv: Sequence[str], cwd: str | None) -> Completed:
    import subprocess

    completed = subprocess.run(
        list(argv), cwd=cwd, capture_output=True, stdin=subprocess.DEVNULL, check=False
    )
    return Completed(completed.returncode, _text(completed.stdout), _text(completed.stderr))


__all__ = ["Completed", "encoded", "run"]
