"""``ProcessFabric``: in-process tasks as supervised local processes, recorded in the data root.

What ``altar run --backend in-process`` uses. Each task has a directory
``<data_root>/.altar-in-process/tasks/<external_id>/`` holding what was launched
(``task.json``), who runs it (``started.json``: the supervisor's pid and start time), how it
ended (``outcome.json``), a cancel request and its log (see :mod:`.supervisor`). The records
*are* the provider: any backend instance on the same data root, in this process or a
restarted one, reads the same tasks.

A submission carrying an ``altar.submission`` key gets the external id ``in-process-<key>``,
and its directory is created exclusively: a resubmit of the same key (the runner's retry of
an in-doubt submit) finds it and adopts it, created (started now), running or finished. A
task whose supervisor died without an outcome (killed with ``SIGKILL``, a reboot) is
reported failed with reason ``job_failed`` and ``provider_ending="engine_lost"`` (the
supervisor is what runs it: its end is the provider's, not the task's): it never runs on
unnoticed, since its command dies with its supervisor.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from altar.conformance.launched import LaunchedTask
from altar.conformance.supervisor import (
    CANCEL,
    LOG,
    OUTCOME,
    STARTED,
    TASK,
    process_start_ticks,
    read_json,
)
from altar.execution import (
    LABEL_RUN,
    LABEL_SUBMISSION,
    BackendUnavailableError,
    ContainerTaskSpec,
    TaskFailure,
    TaskState,
    atomic_write,
    spec_from_dict,
    spec_to_dict,
)
from altar.execution.atomic import fsync_directory, temp_owner, temp_path
from altar.execution.labels import is_submission_key

__all__ = ["RECORDS_DIRECTORY", "ProcessFabric", "ProcessTask", "external_id_for_key"]

RECORDS_DIRECTORY = ".altar-in-process"
LOG_TAIL_BYTES = 64 * 1024
CANCEL_WAIT_S = 5.0


def external_id_for_key(key: str) -> str:
    """The external id of the task submitted under submission key ``key`` (the naming rule a
    conformance hook uses to create a task as this backend would, without the backend)."""
    return f"in-process-{key}"


class ProcessTask:
    """A snapshot of one recorded task (the same fields as ``FabricTask``)."""

    def __init__(
        self,
        external_id: str,
        spec: ContainerTaskSpec,
        launched: LaunchedTask,
        timeout_s: int | None,
        state: TaskState,
        failure: TaskFailure | None,
        log: tuple[str, ...],
    ) -> None:
        self.external_id = external_id
        self.spec = spec
        self.launched = launched
        self.timeout_s = timeout_s
        self.state = state
        self.failure = failure
        self.log = log


class ProcessFabric:
    """Tasks as supervised processes, found again through their records in ``data_root``."""

    def __init__(self, data_root: Path) -> None:
        self.data_root = data_root
        self.tasks = data_root / RECORDS_DIRECTORY / "tasks"
        with contextlib.suppress(OSError):  # read-only or absent: _records says so when asked
            self.tasks.mkdir(parents=True, exist_ok=True)

    def _records(self) -> Path:
        # The records are the provider: once created, their absence (an unmounted volume, say)
        # is an outage, never proof that every task is gone.
        if not self.tasks.is_dir():
            raise BackendUnavailableError(
                f"the in-process task records {self.tasks} are not available; is the data "
                "root's volume mounted?"
            )
        return self.tasks

    # -- provider API used by the backend

    def launch(
        self,
        spec: ContainerTaskSpec,
        launched: LaunchedTask,
        timeout_s: int | None,
        verify_inputs: list[tuple[str, str]],
        *,
        start: bool = True,
    ) -> str:
        """Run a task, or adopt the one its ``altar.submission`` key already names."""
        key = spec.labels.get(LABEL_SUBMISSION)
        if key is not None and is_submission_key(key):
            external_id = external_id_for_key(key)
        else:
            external_id = f"in-process-{secrets.token_hex(8)}"
        directory = self._records() / external_id
        if not (directory / TASK).exists():
            record = {
                "spec": spec_to_dict(spec),
                "launched": asdict(launched),
                "command": list(spec.command),
                "env": dict(spec.env),
                "timeout_s": timeout_s,
                "workdir": str(self.data_root),
                "verify_inputs": verify_inputs,
                "created": time.time(),
            }
            self._create(directory, json.dumps(record).encode())
        if start and not (directory / STARTED).exists():
            self._start(directory)
        return external_id

    def _create(self, directory: Path, record: bytes) -> None:
        """Publish a task directory with its record in one rename: a directory is never seen
        without its record, and of two submits of one key, one creates and one adopts."""
        staging = temp_path(directory)
        try:
            staging.mkdir()
            atomic_write(staging / TASK, record)
            os.rename(staging, directory)
        except OSError as error:
            shutil.rmtree(staging, ignore_errors=True)
            if (directory / TASK).exists():
                return  # another submit of the same key got there first: adopt its task
            if directory.is_dir():  # left by an older layout without its record
                atomic_write(directory / TASK, record)
                return
            raise BackendUnavailableError(
                f"cannot record task in {directory.parent}: {error}"
            ) from error
        fsync_directory(directory.parent)

    def _sweep(self, records: Path) -> None:
        """Remove task directories a killed submit left half made (never a live one's)."""
        for entry in records.iterdir():
            owner = temp_owner(entry.name)
            if owner is not None and owner != os.getpid() and not _pid_exists(owner):
                shutil.rmtree(entry, ignore_errors=True)

    def _start(self, directory: Path) -> None:
        # A session of its own: a Ctrl-C or SIGTERM meant for the runner leaves the task be,
        # as it would a container. The supervisor publishes started.json itself, so a crash
        # here leaves a created task that the next submit of its key starts.
        subprocess.run(
            [sys.executable, "-m", "altar.conformance.supervisor", "--detach", str(directory)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            check=True,
        )

    def inspect(self, external_id: str, *, with_log: bool = False) -> ProcessTask | None:
        """The task's record and state; its log's tail only when asked (poll needs none)."""
        directory = self._directory(external_id)
        if directory is None:
            return None
        record = read_json(directory / TASK)
        if record is None:
            return None  # a directory without a record: a submit cut short, never launched
        spec = spec_from_dict(record["spec"])
        launched = LaunchedTask(**record["launched"])
        state, failure = self._outcome(external_id, directory, record)
        log = _tail(directory) if with_log else ()
        return ProcessTask(external_id, spec, launched, record["timeout_s"], state, failure, log)

    def kill(self, external_id: str) -> None:
        """Cancel a task: recorded first (a supervisor not yet started sees it), then
        signalled, then waited for (at most a few seconds)."""
        directory = self._directory(external_id)
        if directory is None or (directory / OUTCOME).exists():
            return
        atomic_write(directory / CANCEL, b"")
        claim = read_json(directory / STARTED)
        if claim is None:
            return
        pid = int(claim["pid"])
        if not _alive(claim):
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        give_up = time.monotonic() + CANCEL_WAIT_S
        while _alive(claim) and not (directory / OUTCOME).exists():
            if time.monotonic() >= give_up:
                return
            time.sleep(0.02)

    def remove(self, external_id: str) -> None:
        directory = self._directory(external_id)
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)

    def of_run(self, run: str) -> list[tuple[str, ContainerTaskSpec]]:
        """Every recorded task labelled ``altar.run == run`` (what a resumed runner lists)."""
        records = self._records()
        self._sweep(records)
        found = []
        for directory in sorted(records.glob("in-process-*")):
            record = read_json(directory / TASK)
            if record is not None and record["spec"].get("labels", {}).get(LABEL_RUN) == run:
                found.append((directory.name, spec_from_dict(record["spec"])))
        return found

    # -- internals

    def _directory(self, external_id: str) -> Path | None:
        if not external_id.startswith("in-process-") or "/" in external_id or ".." in external_id:
            return None
        directory = self._records() / external_id
        return directory if directory.is_dir() else None

    def _outcome(
        self, external_id: str, directory: Path, record: dict[str, Any]
    ) -> tuple[TaskState, TaskFailure | None]:
        outcome = read_json(directory / OUTCOME)
        if outcome is None:
            cancelled = (directory / CANCEL).exists()
            claim = read_json(directory / STARTED)
            if claim is not None and _alive(claim) and not cancelled:
                return TaskState.RUNNING, None
            outcome = read_json(directory / OUTCOME)  # it may have ended just now
            if outcome is None:
                if cancelled:
                    outcome = {"ended_by": "cancelled", "exit_code": None}
                elif claim is None:
                    return TaskState.PENDING, None
                else:
                    # The supervisor is this provider's engine: its death ended the task,
                    # which did nothing wrong (issue 22).
                    return TaskState.FAILED, TaskFailure(
                        "job_failed",
                        f"engine_lost: task {external_id}: its supervisor (pid {claim['pid']}) "
                        "ended without recording an outcome (killed, or the machine "
                        "restarted); the command died with it",
                        provider_ending="engine_lost",
                    )
        return _failure(external_id, outcome, record)


def _failure(
    external_id: str, outcome: dict[str, Any], record: dict[str, Any]
) -> tuple[TaskState, TaskFailure | None]:
    ended_by = outcome.get("ended_by")
    code = outcome.get("exit_code")
    if ended_by == "timeout":
        timeout = record["timeout_s"]
        detail = f"task {external_id} ran past its timeout of {timeout} s and was killed"
        return TaskState.FAILED, TaskFailure("timeout", detail)
    if ended_by == "cancelled":
        return TaskState.FAILED, TaskFailure("cancelled", f"task {external_id} was cancelled")
    if ended_by == "input_digest_mismatch":
        detail = f"task {external_id} found an input that does not match its digest"
        return TaskState.FAILED, TaskFailure("input_digest_mismatch", detail, deterministic=True)
    if code == 0:
        return TaskState.SUCCEEDED, None
    return TaskState.FAILED, TaskFailure(
        f"exit_{code}",
        f"task {external_id} ({record['spec']['kind']}) exited with code {code}",
        deterministic=True,
        exit_code=code,
    )


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _alive(claim: dict[str, Any]) -> bool:
    ticks = process_start_ticks(int(claim["pid"]))
    return ticks is not None and ticks == claim.get("start_ticks")


def _tail(directory: Path) -> tuple[str, ...]:
    try:
        with open(directory / LOG, "rb") as log:
            size = log.seek(0, os.SEEK_END)
            log.seek(max(0, size - LOG_TAIL_BYTES))
            data = log.read()
    except FileNotFoundError:
        return ()
    return tuple(data.decode("utf-8", errors="replace").splitlines())
