"""Ending jobs: ``cancel`` (scancel, then wait for Slurm to end the job) and ``cleanup``."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from altar.backends.slurm import arrays, commands
from altar.backends.slurm.adoption import EXTERNAL_ID
from altar.backends.slurm.render import EXIT_RECORD, START_RECORD
from altar.execution import TaskHandle

if TYPE_CHECKING:
    from altar.backends.slurm.backend import SlurmExecutionBackend

__all__ = ["cancel_job", "cleanup"]


def cancel_job(backend: SlurmExecutionBackend, job_id: str, token: str) -> None:
    """scancel ``job_id``, then wait up to ``cancel_wait_s`` for its script's last act.

    No controller query: Slurm ends a pending job within scancel itself, and a started job's
    script (its start record shows it started) traps scancel's TERM, stops its container and
    writes its exit record last, which the wait reads on the shared filesystem.
    """
    node = backend.node
    accepted = commands.cancel(node, job_id, timeout_s=backend.query_timeout_s)
    if accepted:
        # every instance's poll reads this; a job cancelled while pending writes nothing
        commands.mark_cancelled(node, backend._layout(token).job_dir)
    backend.cancelled.add(job_id)
    if not accepted:
        return  # it had ended already, or Slurm never knew it: nothing to wait for
    deadline = time.monotonic() + backend.cancel_wait_s
    pause = 0.2  # doubling to 2 s: reads of one small file
    while True:
        files = commands.read_records(node, backend.scratch, [token]).get(token, {})
        if EXIT_RECORD in files or START_RECORD not in files:
            return  # its container is gone, or it never started one
        if time.monotonic() >= deadline:
            return
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(2.0, pause * 2)


async def cleanup(backend: SlurmExecutionBackend, handles: list[TaskHandle]) -> None:
    """Remove the job directories of finished tasks (never a running job's, nor others')."""
    statuses = await backend.poll(handles)
    arrays_cleaned = False
    for status in statuses:
        match = EXTERNAL_ID.fullmatch(status.handle.external_id)
        if match is None or not status.state.is_terminal:
            continue
        if status.failure is not None and status.failure.reason == "container_missing":
            continue
        token = match.group(2)
        job_dir, logs_dir = backend._layout(token).job_dir, backend._logs_dir(token)
        await asyncio.to_thread(commands.keep_logs_and_remove, backend.node, job_dir, logs_dir)
        arrays_cleaned = arrays_cleaned or "_" in match.group(1)
    if arrays_cleaned:  # an array's directory goes with the last of its tasks
        root = f"{backend.data_root}/{arrays.ARRAYS_DIR}"
        await asyncio.to_thread(
            commands.remove_finished_arrays, backend.node, root, backend.scratch
        )
