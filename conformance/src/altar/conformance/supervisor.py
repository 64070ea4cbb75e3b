"""The supervisor of one in-process task: ``python -m altar.conformance.supervisor TASK_DIR``.

The in-process backend starts one supervisor per task, in a session of its own, so the task
outlives the runner that submitted it (a killed or interrupted runner resumes and adopts it,
as it would a container). The supervisor:

1. claims the task by publishing ``started.json`` (hard link of a complete file: exclusive,
   so a task is started at most once however many runners try);
2. runs the command as its child, in a process group of its own, with the task's log as
   stdout and stderr, and with ``PR_SET_PDEATHSIG`` so the command dies with it: a task whose
   supervisor was killed never runs on unnoticed (the backend reports it failed);
3. enforces the deadline and a cancel request (SIGTERM, or the ``cancel`` marker);
4. publishes ``outcome.json`` atomically, whoever is listening.

Every file is written whole and renamed into place, so a reader never sees half of one.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from altar.execution import TransferIntegrityError, atomic_write, verify_file_digest
from altar.execution.atomic import temp_path

__all__ = [
    "CANCEL",
    "DEADLINE",
    "LOG",
    "OUTCOME",
    "STARTED",
    "TASK",
    "TASK_DIR_ENV",
    "main",
    "process_start_ticks",
    "read_json",
]

TASK = "task.json"
STARTED = "started.json"
OUTCOME = "outcome.json"
CANCEL = "cancel"
LOG = "output.log"
DEADLINE = "deadline"
TASK_DIR_ENV = "ALTAR_IN_PROCESS_TASK_DIR"

_PR_SET_PDEATHSIG = 1
_POLL_S = 0.05
COMMAND_NOT_FOUND_EXIT_CODE = 127


def read_json(path: Path) -> dict[str, Any] | None:
    """A record, or None if it is not there (yet)."""
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    return data if isinstance(data, dict) else None


def process_start_ticks(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot), None if no such process: a pid and its
    start time name one process, even after the pid is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z":  # a zombie has finished; its parent has not reaped it yet
        return None
    return int(fields[19])


def _publish_exclusively(path: Path, data: dict[str, Any]) -> bool:
    """Write ``path`` whole unless it exists; False if another process got there first."""
    temporary = temp_path(path)
    temporary.write_bytes(json.dumps(data).encode())
    try:
        os.link(temporary, path)
    except FileExistsError:
        return False
    finally:
        temporary.unlink(missing_ok=True)
    return True


def _die_with(parent: int) -> Callable[[], None]:
    def preexec() -> None:  # runs in the child between fork and exec
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the supervisor died before prctl took effect
            os._exit(COMMAND_NOT_FOUND_EXIT_CODE)

    return preexec


def _log(directory: Path, line: str) -> None:
    with open(directory / LOG, "a", encoding="utf-8") as log:
        log.write(line + "\n")


def _check_inputs(task: dict[str, Any]) -> str | None:
    for path, digest in task.get("verify_inputs", []):
        try:
            verify_file_digest(path, digest)
        except (TransferIntegrityError, OSError) as error:
            return str(error)
    return None


def supervise(directory: Path) -> int:
    task = read_json(directory / TASK)
    if task is None:
        return 2
    me = os.getpid()
    claim = {"pid": me, "start_ticks": process_start_ticks(me), "started": time.time()}
    if not _publish_exclusively(directory / STARTED, claim):
        return 0  # another supervisor runs (or ran) this task
    cancelled = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal cancelled
        cancelled = True

    signal.signal(signal.SIGTERM, on_term)
    outcome: dict[str, Any] = {"exit_code": None, "ended_by": None}
    if (directory / CANCEL).exists():
        outcome["ended_by"] = "cancelled"
    elif (mismatch := _check_inputs(task)) is not None:
        _log(directory, mismatch)
        outcome.update(exit_code=1, ended_by="input_digest_mismatch")
    else:
        outcome.update(_run(directory, task, lambda: cancelled))
    outcome["finished"] = time.time()
    atomic_write(directory / OUTCOME, json.dumps(outcome).encode())
    return 0


def _run(directory: Path, task: dict[str, Any], cancelled: Callable[[], bool]) -> dict[str, Any]:
    command: list[str] = task["command"]
    # The task may find its own record (its log, say) through the environment.
    env = {"PATH": os.environ.get("PATH", os.defpath), TASK_DIR_ENV: str(directory), **task["env"]}
    timeout_s: int | None = task["timeout_s"]
    if timeout_s is not None:
        # Wall clock, in a file beside the task: anyone may read when it is due.
        atomic_write(directory / DEADLINE, str(time.time() + timeout_s).encode())
    if not command:
        _log(directory, "the task has an empty command; there is nothing to run")
        return {"exit_code": COMMAND_NOT_FOUND_EXIT_CODE}
    with open(directory / LOG, "ab") as log:
        try:
            child = subprocess.Popen(
                command,
                cwd=task["workdir"],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                process_group=0,
                preexec_fn=_die_with(os.getpid()),
            )
        except OSError as error:
            _log(directory, f"cannot run {command[0]!r}: {error}")
            return {"exit_code": COMMAND_NOT_FOUND_EXIT_CODE}
    ended_by = None
    while child.poll() is None:
        if cancelled() or (directory / CANCEL).exists():
            ended_by = "cancelled"
        elif timeout_s is not None and time.time() >= _deadline(directory):
            ended_by = "timeout"
        if ended_by is not None:
            _kill_group(child.pid)
            child.wait()
            break
        time.sleep(_POLL_S)
    code = child.returncode
    return {"exit_code": code if code >= 0 else 128 - code, "ended_by": ended_by}


def _deadline(directory: Path) -> float:
    try:
        return float((directory / DEADLINE).read_text())
    except (FileNotFoundError, ValueError):  # being replaced this instant: not due yet
        return float("inf")


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    detach = args[:1] == ["--detach"]
    if detach:
        args = args[1:]
    if len(args) != 1:
        sys.stderr.write("usage: python -m altar.conformance.supervisor [--detach] TASK_DIR\n")
        return 2
    if detach and os.fork() != 0:
        # The launcher waits for this parent only: the supervisor, reparented to init, is
        # nobody's child in the runner (no zombie, no Popen to keep).
        os._exit(0)
    return supervise(Path(args[0]))


if __name__ == "__main__":
    sys.exit(main())
