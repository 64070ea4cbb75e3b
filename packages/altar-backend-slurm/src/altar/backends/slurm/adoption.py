"""Finding a submission's earlier job (adoption) and listing a run's jobs.

A keyed submission's job directory is made before its ``sbatch``, so a submit asks Slurm
only when that directory (or the logs ``cleanup`` kept) exists: a resume. An array's element
is found by its ``array`` marker (see :mod:`.arrays`); a single job by its name.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from typing import TYPE_CHECKING

from altar.backends.slurm import arrays, commands
from altar.backends.slurm.classify import from_queue
from altar.backends.slurm.render import job_name, parse_comment, submission_key
from altar.execution import LABEL_RUN, LABEL_SUBMISSION, ContainerTaskSpec, TaskHandle

if TYPE_CHECKING:
    from altar.backends.slurm.backend import SlurmExecutionBackend

__all__ = ["EXTERNAL_ID", "earlier", "find_existing", "job_order", "list_jobs", "run_tag"]

#: ``JOBID:token``; an array element's job id is ``ARRAYID_INDEX``.
EXTERNAL_ID = re.compile(r"(\d+(?:_\d+)?):([0-9a-f]{16}-[0-9a-f]{16}-[0-9a-f]{8})")
_Members = dict[str, list[tuple[str, str]]]


def run_tag(run: str | None) -> str:
    return hashlib.sha256((run or "").encode()).hexdigest()[:16]


def job_order(job_id: str) -> tuple[int, int]:
    """Sort key of a job id, ``12`` or an array element's ``12_3``."""
    base, _, index = job_id.partition("_")
    return int(base), int(index or -1)


def find_existing(
    backend: SlurmExecutionBackend, spec: ContainerTaskSpec, digest: str
) -> tuple[str, str] | None:
    """An earlier job of this submission to adopt: (job id, token), or None.

    A keyed spec adopts its job in any state (the exactly-once contract); a spec without
    a key adopts only a job of the same spec hash that is still pending or running.
    """
    name = job_name(spec, digest)
    keyed = submission_key(spec) is not None
    timeout_s = backend.query_timeout_s
    found: list[tuple[int, str]] = []
    for row in commands.queue(backend.node, names=[name], timeout_s=timeout_s):
        token = backend._ours(row.work_dir)
        if token is None or row.name != name:
            continue
        if not keyed:
            parsed = parse_comment(row.comment)
            observed = from_queue(row)
            if parsed is None or parsed[0] != digest:
                continue
            if observed is None or observed.state.is_terminal:
                continue
        found.append((int(row.job_id), token))
    if not found and keyed:
        for acct in commands.accounting(
            backend.node, names=[name], steps=False, timeout_s=timeout_s
        ):
            token = backend._ours(acct.work_dir)
            if token is not None and acct.name == name and acct.job_id.isdigit():
                found.append((int(acct.job_id), token))
    if not found:
        return None
    job_id, token = max(found)
    return str(job_id), token


def earlier(
    backend: SlurmExecutionBackend, spec: ContainerTaskSpec, digest: str, token: str
) -> tuple[str, str] | None:
    """An earlier job of this submission to adopt (see :func:`find_existing`). A keyed
    one can exist only if its job (or kept logs) directory does: one stat first, and
    Slurm is asked only then (a resume); an array's element by its marker."""
    if submission_key(spec) is None:
        return find_existing(backend, spec, digest)
    paths = [backend._layout(token).job_dir, backend._logs_dir(token)]
    found = arrays.existing(backend.node, paths)
    if not found:
        return None
    mark = found.get(paths[0])
    if mark is not None:
        ids = arrays.array_ids(backend.node, [mark[0]], timeout_s=backend.query_timeout_s)
        if mark[0] in ids:
            return f"{ids[mark[0]]}_{mark[1]}", token
    return find_existing(backend, spec, digest)


def list_jobs(backend: SlurmExecutionBackend, run: str) -> list[TaskHandle]:
    """One handle per job of ``run`` that this data root's jobs directory holds (squeue
    for live jobs, with their labels from the comment; sacct for finished ones)."""
    tag = run_tag(run)
    found: dict[str, TaskHandle] = {}
    members: _Members = {}
    backend.tracker.asked()
    for row in commands.queue(backend.node, timeout_s=backend.query_timeout_s):
        token, comment = backend._ours(row.work_dir), row.comment
        if token is None:
            token, comment = _member(backend, row.job_id, row.work_dir, members)
        parsed = parse_comment(comment)
        if token is None or parsed is None or parsed[1].get(LABEL_RUN) != run:
            continue
        found[row.job_id] = TaskHandle(backend.name, f"{row.job_id}:{token}", parsed[1])
    for acct in commands.accounting(backend.node, steps=False, timeout_s=backend.query_timeout_s):
        token = backend._ours(acct.work_dir)
        labels = {LABEL_RUN: run}
        if token is None:
            token, comment = _member(backend, acct.job_id, acct.work_dir, members)
            labels = (parse_comment(comment) or ("", labels))[1]
        elif acct.name.startswith("altar-") and not acct.name.startswith("altar-spec-"):
            labels[LABEL_SUBMISSION] = acct.name.removeprefix("altar-")
        if token is None or not token.startswith(tag) or acct.job_id in found:
            continue
        found[acct.job_id] = TaskHandle(backend.name, f"{acct.job_id}:{token}", labels)
    _unlisted_members(backend, run, members, found)
    return [found[k] for k in sorted(found, key=job_order)]


def _unlisted_members(
    backend: SlurmExecutionBackend, run: str, members: _Members, found: dict[str, TaskHandle]
) -> None:
    """Elements of a listed array that Slurm lists no more (one cancelled while pending
    leaves neither squeue nor sacct a row of its own): still jobs of the run."""
    bases: dict[str, str | None] = {}
    for handle in list(found.values()):
        job_id = handle.external_id.split(":", 1)[0]
        base = job_id.split("_", 1)[0]
        if "_" in job_id and base not in bases:
            bases[base] = _member_dir(handle, members)
    for base, work_dir in bases.items():
        for index, (token, comment) in enumerate(members.get(work_dir or "", [])):
            parsed = parse_comment(comment)
            job_id = f"{base}_{index}"
            if job_id in found or parsed is None or parsed[1].get(LABEL_RUN) != run:
                continue
            found[job_id] = TaskHandle(backend.name, f"{job_id}:{token}", parsed[1])


def _member_dir(handle: TaskHandle, members: _Members) -> str | None:
    token = handle.external_id.split(":", 1)[1]
    return next((d for d, listed in members.items() if any(t == token for t, _ in listed)), None)


def _member(
    backend: SlurmExecutionBackend, job_id: str, work_dir: str, known: _Members
) -> tuple[str | None, str]:
    """An array element's (token, comment), from its array's ``tokens`` (read once)."""
    parent = posixpath.dirname(work_dir.rstrip("/"))
    _, _, index = job_id.partition("_")
    if parent != f"{backend.data_root}/{arrays.ARRAYS_DIR}" or not index.isdigit():
        return None, ""
    if work_dir not in known:
        known[work_dir] = arrays.tokens_of(backend.node, work_dir)
    listed = known[work_dir]
    return listed[int(index)] if int(index) < len(listed) else (None, "")
