"""Running one adapter operation: the request file, the child process, and the result checks."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping
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
from .settings import queue_settings

# After the group is killed, how long to wait for pipes held by escaped descendants.
_DRAIN_SECONDS = 2.0
PYTHON_VARIABLE = "HTTK_ADAPTER_PYTHON"


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


def _kill_group(process: subprocess.Popen[str]) -> None:
    # The adapter leads its own session, so its group holds every helper it started
    # (ssh, rsync, sbatch) unless one deliberately detached itself.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def _child_environment() -> dict[str, str]:
    # The packaged dispatcher runs ${HTTK_ADAPTER_PYTHON:-python3}: point it at the
    # interpreter this package is installed in, so a pipx or unactivated venv install works.
    environment = dict(os.environ)
    environment.setdefault(PYTHON_VARIABLE, sys.executable)
    return environment


def _execute(command: list[str], limit: float, operation: str) -> tuple[int, str, str]:
    process = subprocess.Popen(
        command,
        env=_child_environment(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        try:
            process.communicate(timeout=_DRAIN_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        raise TimeoutError(f"adapter {operation} exceeded {limit:g} seconds") from None
    except BaseException:
        _kill_group(process)
        process.wait()
        raise
    return process.returncode, stdout, stderr


def parse_result(operation: str, stdout: str) -> dict[str, Any]:
    """Exactly one JSON object of the result format, for this operation."""
    text = stdout.strip()
    try:
        result, end = json.JSONDecoder().raw_decode(text)
    except ValueError:
        raise ValueError(f"adapter {operation} did not emit exactly one JSON result") from None
    if end != len(text):
        raise ValueError(f"adapter {operation} did not emit exactly one JSON result")
    if not isinstance(result, dict):
        raise ValueError(f"adapter {operation} result must be a JSON object")
    version = result.get("format_version")
    if (
        result.get("format") != RESULT_FORMAT
        or version != FORMAT_VERSION
        or isinstance(version, bool)
    ):
        raise ValueError(f"adapter {operation} returned an unsupported result")
    if result.get("operation") != operation:
        raise ValueError(f"adapter result operation disagrees with request: {operation}")
    return result


def run_adapter(
    bundle: str | os.PathLike[str],
    operation: str,
    request: Mapping[str, Any],
    *,
    timeout: float | None = None,
) -> dict[str, Any]:
    """Run one operation through the bundle's ``adapter`` and return its checked result.

    Raises ``TimeoutError`` when the operation overruns (its process group is killed),
    ``RuntimeError`` for a refusal (the adapter's ``error``) or a crash (non-zero exit),
    ``ValueError`` for a malformed result or bundle.
    """
    if operation not in ADAPTER_OPERATIONS:
        raise ValueError(f"unknown adapter operation: {operation}")
    root = Path(bundle).expanduser().resolve()
    metadata = validate_adapter_bundle(root)
    limit = float(
        metadata.get("timeout_seconds", DEFAULT_TIMEOUT_SECONDS) if timeout is None else timeout
    )
    if not limit > 0:
        raise ValueError("adapter timeout must be positive")
    request_path = _write_request(build_request(root, operation, request))
    try:
        returncode, stdout, stderr = _execute(
            [str(root / ADAPTER_EXECUTABLE), request_path], limit, operation
        )
    finally:
        Path(request_path).unlink(missing_ok=True)
    if returncode != 0:
        raise RuntimeError(f"adapter {operation} failed ({returncode}): {stderr.strip()}")
    result = parse_result(operation, stdout)
    if result.get("ok") is not True:
        raise RuntimeError(str(result.get("error", f"adapter {operation} reported failure")))
    if stderr:
        result["diagnostics"] = stderr
    return result
