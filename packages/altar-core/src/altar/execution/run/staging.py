"""The run's staging phase: every start of a run stages what the plan names now.

A run stages the inputs its unfinished tasks need before it submits anything, and it does so
at every start: the first, each resume and each ``altar run --retry-failed``. The journal keeps
what each logical path was staged from (``Journal.inputs``:
the uri, the digest and the source file's size, modification and status-change times and inode),
so a start stages only what no longer matches: an input the plan now names by another uri or
digest, a source file that was replaced or edited, an input that was never staged (a source
deleted since it was staged is kept: its staged copy is what the plan names). Nothing else
reaches the backend, so a resume of an unchanged plan costs one ``stat`` per input.

A source that changed under an unchanged digest is hashed here first: the backend might find
its old, matching copy and keep it, and the task would run on bytes the user replaced. If the
new bytes do not match, staging fails and says to update the digest.

A failed staging is written to the journal (``staging_error``, shown by ``altar status`` with
its fix) before the run stops; the next start stages again. Killed while staging, a run has
recorded none of that staging's inputs, so the next start stages them again (each backend puts
a copy in place atomically, and removes what a killed copy left).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from altar.execution.backend import ExecutionBackend
from altar.execution.digests.digest import input_label, verify_file
from altar.execution.errors import (
    BackendUnavailableError,
    DigestMismatchError,
    StagingError,
    TransferIntegrityError,
)
from altar.execution.plans.plan import Plan
from altar.execution.run.results import one_line
from altar.execution.run.staging_progress import StagingProgress, local_sizes
from altar.execution.state.journal import Journal, TaskRecord
from altar.execution.transfer_progress import reporting_to
from altar.execution.types import Transfer
from altar.execution.uris import local_path_or_none

__all__ = ["inputs_to_stage", "needed_inputs", "stage_run", "staging_entry"]

Emit = Callable[..., None]


def _source_facts(transfer: Transfer) -> list[int] | None:
    """Size, mtime and ctime (ns) and inode of a local source; None if there is none to stat."""
    try:
        path = local_path_or_none(transfer.uri)
        st = os.stat(path) if path is not None else None
    except (OSError, ValueError):  # missing, unreadable, or a malformed uri staging will name
        return None
    if st is None:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def staging_entry(transfer: Transfer) -> dict[str, Any]:
    """What the journal records of one staged input (and what a start compares it with)."""
    return {"uri": transfer.uri, "digest": transfer.digest, "source": _source_facts(transfer)}


def needed_inputs(plan: Plan, records: Mapping[str, TaskRecord]) -> list[Transfer]:
    """The plan's staged inputs that a task not yet final reads (first-run: all of them)."""
    open_paths = {
        transfer.logical_path
        for task in plan.tasks
        if not records[task.id].final
        for transfer in task.spec.inputs
    }
    return [t for t in plan.staged_inputs() if t.logical_path in open_paths]


def inputs_to_stage(
    needed: Iterable[Transfer], staged: Mapping[str, Mapping[str, Any]]
) -> list[tuple[Transfer, dict[str, Any]]]:
    """Each needed input whose journal entry does not match it now, with its new entry.

    A source that cannot be stat'ed now (a remote uri, a file deleted since it was staged) is
    judged by its uri and digest alone: the staged copy is the one the plan names.
    """
    changed = []
    for transfer in needed:
        entry = staging_entry(transfer)
        before = staged.get(transfer.logical_path)
        if (
            before is None
            or (before.get("uri"), before.get("digest")) != (entry["uri"], entry["digest"])
            or (entry["source"] is not None and before.get("source") != entry["source"])
        ):
            changed.append((transfer, entry))
    return changed


def _check_replaced_sources(
    changed: list[tuple[Transfer, dict[str, Any]]], staged: Mapping[str, Mapping[str, Any]]
) -> None:
    """Hash each source that changed under the uri and digest it was staged with."""
    for transfer, entry in changed:
        before = staged.get(transfer.logical_path)
        if (
            transfer.digest is None
            or before is None
            or entry["source"] is None  # remote or missing: the backend judges it
            or (before.get("uri"), before.get("digest")) != (transfer.uri, transfer.digest)
        ):
            continue  # a new uri or digest: the backend hashes it against the plan's digest
        path = local_path_or_none(transfer.uri)
        if path is None:
            continue
        try:
            # a current record beside the source vouches (any change to it voids the record)
            verify_file(path, transfer.digest, label=input_label(transfer), trust_record=True)
        except DigestMismatchError as error:
            raise TransferIntegrityError(
                f"{error}; the file changed since it was staged: if the new bytes are right, "
                "put their digest in the plan (`altar verify` prints it)"
            ) from error


async def stage_run(
    plan: Plan,
    backend: ExecutionBackend,
    journal: Journal,
    emit: Emit,
    *,
    progress: bool,
) -> None:
    """Stage what the plan's unfinished tasks need and the journal does not vouch for.

    Raises :class:`StagingError` (recorded in the journal first) when staging fails, and lets
    :class:`BackendUnavailableError` and cancellation through (nothing is recorded: the next
    start stages again).
    """
    changed = inputs_to_stage(needed_inputs(plan, journal.tasks), journal.inputs)
    if not changed and journal.staging_error is None:
        # nothing staged, nothing to record: ``staged`` (only older altar reads it, and it
        # would find nothing to stage) waits for the next snapshot instead of one of its own
        journal.staged = True
        return
    if changed:
        transfers = [transfer for transfer, _ in changed]
        again = [t.logical_path for t in transfers if t.logical_path in journal.inputs]
        if again:
            shown = ", ".join(map(repr, again[:3])) + (", ..." if len(again) > 3 else "")
            emit(
                "staging",
                f"staging {len(transfers)} input(s), {len(again)} changed since they were "
                f"staged: {shown}",
            )
        else:
            emit("staging", f"staging {len(transfers)} input(s)")
        try:
            await asyncio.to_thread(_check_replaced_sources, changed, journal.inputs)
            await _stage(backend, transfers, emit, progress=progress)
        except (BackendUnavailableError, asyncio.CancelledError):
            raise
        except Exception as error:
            message = staging_message(plan, error)
            journal.staging_error = message
            journal.save()
            raise StagingError(message) from error
        for transfer, entry in changed:
            journal.inputs[transfer.logical_path] = entry
        emit("staged", f"staged {len(transfers)} input(s)")
    journal.staged = True
    journal.staging_error = None
    journal.save()


async def _stage(
    backend: ExecutionBackend, transfers: list[Transfer], emit: Emit, *, progress: bool
) -> None:
    tracker = None
    if progress:
        sizes = await asyncio.to_thread(local_sizes, transfers)

        def report(message: str, done: int, total: int | None) -> None:
            emit("staging_progress", message, bytes_done=done, bytes_total=total)

        tracker = StagingProgress(report, asyncio.get_running_loop(), sizes)
    try:
        with reporting_to(tracker.report if tracker else None):
            await backend.stage_inputs(transfers)
    finally:
        if tracker is not None:
            tracker.close()
    if tracker is not None:
        tracker.flush()


def staging_message(plan: Plan, error: BaseException) -> str:
    """The error, led by the plan field of the input it names, and the fix."""
    text = one_line(error)
    fix = "fix it, then run the same `altar run` again (it stages what changed)"
    fields = plan.input_fields(text)
    if not fields:
        return f"staging inputs failed: {text}; {fix}"
    more = f" (also {', '.join(fields[1:3])}{', ...' if len(fields) > 3 else ''})"
    return (
        f"{plan.source}: {fields[0]}: staging failed: {text}"
        f"{more if len(fields) > 1 else ''}; {fix}"
    )
