"""Running one adapter operation: the request file, the child process, and the result checks."""

from __future__ import annotations

import contextlib
import json
import math
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .bundles import validate_adapter_bundle
from .constants import (
    ADAPTER_EXECUTABLE,
    ADAPTER_OPERATIONS,
    DEFAULT_TIMEOUT_SECONDS,
    FORMAT_VERSION,
    REQUEST_FORMAT,
    RESULT_FORMAT,
)
from .errors import (
    AdapterCrashed,
    AdapterRefused,
    AdapterResultError,
    AdapterTimeout,
    BundleError,
    RemoteUnreachable,
)
from .settings import queue_settings

# After the group is killed, how long to wait for pipes held by escaped descendants.
_DRAIN_SECONDS = 2.0
PYTHON_VARIABLE = "HTTK_ADAPTER_PYTHON"
IMPORT_ROOT_VARIABLE = "HTTK_ADAPTER_IMPORT_ROOT"
# The sys.path entry this package was imported from (…/site-packages, or src/ when editable).
_IMPORT_ROOT = str(Path(__file__).resolve().parents[3])


def build_request(root: Path, operation: str, request: Mapping[str, Any]) -> dict[str, Any]:
    """The envelope, the merged queue settings when a queue is named, then the caller's members."""
    payload: dict[str, Any] = {
        "format": REQUEST_FORMAT,
        "format_version": FORMAT_VERSION,
        "operation": operation,
        "adapter_dir": str(root),
    }
    queue = request.get("queue")
    if isinstance(queue, str):
        payload["queue_settings"] = queue_settings(root, queue)
    payload.update(request)
    return payload


def _write_request(payload: Mapping[str, Any]) -> str:
    fd, path = tempfile.mkstemp(prefix="httk-adapter-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(payload, handle, sort_keys=True, separators=(",", ":"))
            handle.write("\n")
    except BaseException:
        Path(path).unlink(missing_ok=True)
        raise
    return path


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    # The adapter leads its own session, so its group holds every helper it started
    # (ssh, rsync, sbatch) unless one deliberately detached itself.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def _child_environment() -> dict[str, str]:
    """The adapter's environment: which interpreter runs the runtime, and from where.

    The packaged dispatcher runs ${HTTK_ADAPTER_PYTHON:-python3}: point it at the interpreter
    this package is installed in, so a pipx or unactivated venv install works. When that is
    the interpreter, also name this package's import root: the dispatcher then starts it
    without ``site`` (``-I -S``), importing the runtime from there alone, which saves
    the largest part of its start-up. Another interpreter chosen by the user finds the
    runtime its own way.
    """
    environment = dict(os.environ)
    python = environment.setdefault(PYTHON_VARIABLE, sys.executable)
    if python == sys.executable and sys.executable:
        environment[IMPORT_ROOT_VARIABLE] = _IMPORT_ROOT
    else:
        environment.pop(IMPORT_ROOT_VARIABLE, None)
    return environment


# poll() takes a C int of milliseconds; a longer wait is taken in several polls.
_LONGEST_POLL_MS = 2**31 - 1


def _milliseconds_left(deadline: float) -> int:
    """The next poll's timeout: what is left of ``deadline`` (which may be infinite)."""
    left = (deadline - time.monotonic()) * 1000
    return _LONGEST_POLL_MS if left >= _LONGEST_POLL_MS else max(0, math.ceil(left))


def _expired(deadline: float) -> bool:
    return time.monotonic() >= deadline


def _read_until_closed(
    process: subprocess.Popen[bytes],
    stdout: int,
    stderr: int,
    deadline: float,
    on_stderr: Callable[[bytes], object] | None = None,
) -> tuple[bytes, bytes]:
    """Both pipes to their end, or ``subprocess.TimeoutExpired`` at the deadline.

    ``on_stderr`` sees each piece of stderr as it arrives (a transfer's progress).
    """
    chunks: dict[int, list[bytes]] = {stdout: [], stderr: []}
    poller = select.poll()
    for descriptor in chunks:
        poller.register(descriptor, select.POLLIN)
    open_pipes = len(chunks)
    while open_pipes:
        events = poller.poll(_milliseconds_left(deadline))
        if not events and _expired(deadline):
            raise subprocess.TimeoutExpired(process.args, 0)
        for descriptor, _ in events:
            data = os.read(descriptor, 65536)
            if data and on_stderr is not None and descriptor == stderr:
                on_stderr(data)
            if data:
                chunks[descriptor].append(data)
            else:
                poller.unregister(descriptor)
                open_pipes -= 1
    return b"".join(chunks[stdout]), b"".join(chunks[stderr])


def _wait_for_exit(process: subprocess.Popen[bytes], deadline: float) -> None:
    """Reap the adapter as soon as it exits, or raise at the deadline.

    ``Popen.wait(timeout)`` polls with sleeps starting at a millisecond; and the pipes
    reach their end a moment before the adapter is reapable, so it would nearly always
    sleep. A pidfd reports the exit the moment it happens (Linux); elsewhere wait() is used.
    """
    try:
        pidfd = os.pidfd_open(process.pid)
    except (AttributeError, OSError):
        process.wait(timeout=max(0.0, deadline - time.monotonic()))
        return
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        while not poller.poll(_milliseconds_left(deadline)):
            if _expired(deadline):
                raise subprocess.TimeoutExpired(process.args, 0)
    finally:
        os.close(pidfd)
    process.wait()


def _text(data: bytes) -> str:
    # The result is ASCII JSON; stderr is kept byte for byte (CR included, bad UTF-8 as
    # surrogates), as the runtime keeps a command's output.
    return data.decode("utf-8", "surrogateescape")


def _execute(
    command: list[str],
    limit: float,
    operation: str,
    on_stderr: Callable[[bytes], object] | None = None,
) -> tuple[int, str, str]:
    deadline = time.monotonic() + limit
    process = subprocess.Popen(
        command,
        env=_child_environment(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    assert process.stdout is not None
    assert process.stderr is not None
    pipes = process.stdout.fileno(), process.stderr.fileno()
    try:
        stdout, stderr = _read_until_closed(process, *pipes, deadline, on_stderr)
        _wait_for_exit(process, deadline)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        try:
            # Until every member of the group is gone, one of them may hold a pipe.
            _read_until_closed(process, *pipes, time.monotonic() + _DRAIN_SECONDS)
            process.wait(timeout=_DRAIN_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        raise AdapterTimeout(
            f"adapter {operation} exceeded {limit:g} seconds", operation=operation, seconds=limit
        ) from None
    except BaseException:
        _kill_group(process)
        process.wait()
        raise
    finally:
        process.stdout.close()
        process.stderr.close()
    return process.returncode, _text(stdout), _text(stderr)


def parse_result(operation: str, stdout: str) -> dict[str, Any]:
    """Exactly one JSON object of the result format, for this operation."""
    text = stdout.strip()
    try:
        result, end = json.JSONDecoder().raw_decode(text)
    except ValueError:
        raise AdapterResultError(
            f"adapter {operation} did not emit exactly one JSON result"
        ) from None
    if end != len(text):
        raise AdapterResultError(f"adapter {operation} did not emit exactly one JSON result")
    if not isinstance(result, dict):
        raise AdapterResultError(f"adapter {operation} result must be a JSON object")
    version = result.get("format_version")
    if (
        result.get("format") != RESULT_FORMAT
        or version != FORMAT_VERSION
        or isinstance(version, bool)
    ):
        raise AdapterResultError(f"adapter {operation} returned an unsupported result")
    if result.get("operation") != operation:
        raise AdapterResultError(f"adapter result operation disagrees with request: {operation}")
    return result


def run_adapter(
    bundle: str | os.PathLike[str],
    operation: str,
    request: Mapping[str, Any],
    *,
    timeout: float | None = None,
    on_stderr: Callable[[bytes], object] | None = None,
) -> dict[str, Any]:
    """Run one operation through the bundle's ``adapter`` and return its checked result.

    ``on_stderr``, if given, is called with each piece of the adapter's stderr as it
    arrives (the CLI shows a transfer's progress with it); ``diagnostics`` still has all.

    Raises :class:`~.errors.AdapterTimeout` (a ``TimeoutError``) when the operation overruns
    (its process group is killed), :class:`~.errors.AdapterRefused` for a refusal (the
    adapter's ``error``) and :class:`~.errors.AdapterCrashed` for a non-zero exit (both
    ``RuntimeError``), :class:`~.errors.AdapterResultError` or
    :class:`~.errors.BundleError` (both ``ValueError``) for a malformed result or bundle.
    """
    if operation not in ADAPTER_OPERATIONS:
        raise BundleError(f"unknown adapter operation: {operation}")
    root = Path(bundle).expanduser().resolve()
    metadata = validate_adapter_bundle(root)
    limit = float(
        metadata.get("timeout_seconds", DEFAULT_TIMEOUT_SECONDS) if timeout is None else timeout
    )
    if not limit > 0:
        raise BundleError("adapter timeout must be positive")
    request_path = _write_request(build_request(root, operation, request))
    try:
        returncode, stdout, stderr = _execute(
            [str(root / ADAPTER_EXECUTABLE), request_path], limit, operation, on_stderr
        )
    finally:
        Path(request_path).unlink(missing_ok=True)
    if returncode != 0:
        raise AdapterCrashed(
            f"adapter {operation} failed ({returncode}): {stderr.strip()}",
            operation=operation,
            returncode=returncode,
            stderr=stderr,
        )
    result = parse_result(operation, stdout)
    if result.get("ok") is not True:
        message = str(result.get("error", f"adapter {operation} reported failure"))
        # "refusal" is this runtime's addition to the refusal document; others omit it.
        refused = RemoteUnreachable if result.get("refusal") == "unreachable" else AdapterRefused
        raise refused(message, operation=operation)
    if stderr:
        result["diagnostics"] = stderr
    return result
