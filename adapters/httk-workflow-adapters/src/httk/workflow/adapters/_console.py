"""Talking to the terminal: error lines, exact output bytes, warnings, and signals.

Split from :mod:`.cli` so the command tree stays readable; nothing here knows a command.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from typing import TextIO


def write_exact(stream: TextIO, text: str) -> None:
    """Write a command's output as the bytes it was (undecodable ones travel as surrogates)."""
    stream.flush()
    data = text.encode("utf-8", "surrogateescape")
    buffer = getattr(stream, "buffer", None)
    if buffer is None:  # a StringIO in tests: text is what it can hold
        stream.write(data.decode("utf-8", "replace"))
        return
    buffer.write(data)
    buffer.flush()


def _visible(line: str) -> str:
    """A line with its control characters shown as escapes, never acted on by a terminal."""
    return "".join(ch if ch >= " " and ch != "\x7f" else repr(ch)[1:-1] for ch in line)


def error_lines(message: str) -> str:
    """An error message for stderr: its own lines kept (ssh's host-key warning spans
    several), blank ones dropped, continuation lines indented under the first."""
    lines = [_visible(line.rstrip()) for line in message.splitlines() if line.strip()]
    return "\n  ".join(lines)


class Terminated(BaseException):
    """SIGTERM or SIGHUP arrived: unwind like Ctrl-C, so cleanup code runs."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def warnings_as_lines(prog: str) -> Iterator[None]:
    """Library warnings (an exposed credentials file) as one ``PROG: warning:`` line each."""
    import warnings

    def show(message: Warning | str, *_: object, **__: object) -> None:
        print(f"{prog}: warning: {error_lines(str(message))}", file=sys.stderr)

    with warnings.catch_warnings():
        warnings.simplefilter("default")
        warnings.showwarning = show
        yield


@contextlib.contextmanager
def terminating_like_interrupt() -> Iterator[None]:
    """Turn SIGTERM and SIGHUP into :class:`Terminated` while a handler runs.

    The adapter runs in its own session, so signals meant for this command never reach
    it; without this, ``kill`` or a closed terminal ended the CLI at once and left the
    adapter (rsync, ssh, sbatch …) running and its request file — credentials included —
    behind. Unwinding instead lets ``run_adapter`` kill the adapter's process group and
    remove the file. A signal the caller ignores (``nohup``) stays ignored.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum: int, _frame: object) -> None:
        raise Terminated(signum)

    previous = {}
    for signum in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) is not signal.SIG_IGN:
            previous[signum] = signal.signal(signum, terminate)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
