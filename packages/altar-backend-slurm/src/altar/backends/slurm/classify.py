"""Pure reading of Slurm's answers: squeue/sacct rows, outage texts, and task states.

``squeue`` knows pending and running jobs and, for ``MinJobAge`` seconds, finished ones;
``sacct`` (slurmdbd) knows finished jobs with one row per step. A job is classified from
squeue when that is enough (active, or COMPLETED), otherwise from its sacct rows: the job
row, the batch step, and the marker steps a job records for an in-task digest failure or a
container OOM kill. A job neither knows is missing, never succeeded; a command that could
not reach the controller or the database is an outage, never a job state.

Slurm's own endings are provider endings (``TaskFailure.provider_ending``), never the task's:
PREEMPTED is ``preempted``, NODE_FAIL and BOOT_FAIL are ``node_lost``; their ``reason`` stays
``job_failed`` as before. A job Slurm requeues keeps its id and reads pending again: one
attempt, not two.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from altar.backends.slurm.render import (
    EXIT_RECORD_VERSION,
    INPUT_MISMATCH_STEP,
    OOM_STEP,
    RECORD_MARKERS,
)
from altar.execution import TaskFailure, TaskState

__all__ = [
    "SACCT_FIELDS",
    "SQUEUE_FIELDS",
    "AcctRow",
    "ExitRecord",
    "Observation",
    "QueueRow",
    "from_accounting",
    "from_queue",
    "from_record",
    "is_outage",
    "missing",
    "no_such_job",
    "parse_exit_record",
    "parse_sacct",
    "parse_squeue",
]

#: ``squeue -O`` fields; ``:|`` makes ``|`` the separator with no padding or truncation.
SQUEUE_FIELDS = "JobArrayID:|,State:|,Reason:|,exit_code:|,Name:|,Comment:|,NodeList:|,WorkDir:|"
#: ``sacct -P -o`` fields (``|``-separated); the working directory last, as it may hold ``|``.
SACCT_FIELDS = "JobID,State,ExitCode,JobName,NodeList,WorkDir"

PENDING_STATES = frozenset(
    {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING",
     "SUSPENDED", "STOPPED", "RESV_DEL_HOLD"}
)  # fmt: skip
RUNNING_STATES = frozenset({"RUNNING", "COMPLETING", "SIGNALING", "STAGE_OUT"})
_SIGNAL_EXITS = {137: "SIGKILL", 143: "SIGTERM"}
RETRYABLE_STATES = frozenset({"PREEMPTED", "NODE_FAIL", "BOOT_FAIL", "DEADLINE", "REVOKED"})
#: Slurm states in which the cluster, not the task, ended the job (see ``PROVIDER_ENDINGS``).
PROVIDER_STATES = {"PREEMPTED": "preempted", "NODE_FAIL": "node_lost", "BOOT_FAIL": "node_lost"}

# What Slurm's clients print when the controller or the database cannot answer.
_OUTAGE = re.compile(
    r"Unable to contact slurm controller|Socket timed out|Transient error|"
    r"Connection refused|Connection timed out|Problem talking to the database|"
    r"slurm_persist_conn_open|Zero Bytes were transmitted|Communication connection failure|"
    r"Slurm backup controller in standby mode|Resource temporarily unavailable",
    re.IGNORECASE,
)


def is_outage(stderr: str) -> bool:
    """True when a failed squeue/sacct/sbatch/scancel could not reach Slurm."""
    return _OUTAGE.search(stderr) is not None


def no_such_job(stderr: str) -> bool:
    """squeue's (and scancel's) answer for an id the controller does not know."""
    return "Invalid job id specified" in stderr


@dataclass(frozen=True)
class QueueRow:
    job_id: str
    state: str
    reason: str
    exit_status: int | None  # the raw wait status (exit << 8 | signal)
    name: str
    comment: str
    work_dir: str
    nodes: str = ""  # the node list ("" while pending)


@dataclass(frozen=True)
class AcctRow:
    job_id: str  # "12", "12.batch", "12.0", "12.extern"
    state: str  # "CANCELLED by 0" keeps its suffix
    exit_code: str  # "exit:signal"
    name: str
    work_dir: str
    nodes: str = ""  # the node list ("None assigned" while pending)

    @property
    def job(self) -> str:
        return self.job_id.split(".", 1)[0]


@dataclass(frozen=True)
class ExitRecord:
    """What a job wrote as its last act: its exact exit status and its own start/end times."""

    status: int  # 0-255, exactly as the script's container or program exited
    start: int | None  # epoch seconds on the compute node
    end: int | None
    #: The script was signalled (scancel, time limit, preemption): only Slurm knows why.
    signalled: bool = False
    #: A marker step's name (:data:`~.render.RECORD_MARKERS`), when the script ran one.
    marker: str | None = None


def parse_exit_record(text: str) -> ExitRecord | None:
    """``altar-exit/1 status=N start=S end=E``; None for anything else (a later version, a
    torn or foreign file): the caller then falls back to Slurm's own view."""
    words = text.strip().split(" ")
    if not words or words[0] != EXIT_RECORD_VERSION:
        return None
    fields = dict(word.partition("=")[::2] for word in words[1:])
    status = fields.get("status", "")
    if not status.isdigit() or int(status) > 255:
        return None

    def stamp(name: str) -> int | None:
        value = fields.get(name, "")
        return int(value) if value.isdigit() else None

    markers = {text: step for step, text in RECORD_MARKERS.items()}
    return ExitRecord(
        int(status),
        stamp("start"),
        stamp("end"),
        signalled=fields.get("signalled") == "1",
        marker=markers.get(fields.get("marker", "")),
    )


def from_record(job_id: str, record: ExitRecord) -> Observation | None:
    """How the job ended, from its record alone; None when only Slurm can say.

    Slurm's view is needed when the script was signalled (a cancel, the time limit or a
    preemption reads as its exit status otherwise) and for an unmarked 137: a SIGKILL that
    may be Slurm's own OOM kill, which only its OUT_OF_MEMORY state tells.
    """
    if record.signalled or (record.status == 137 and record.marker is None):
        return None
    state = "COMPLETED" if record.status == 0 and record.marker is None else "FAILED"
    steps = (
        []
        if record.marker is None
        else [AcctRow(f"{job_id}.0", "COMPLETED", "0:0", record.marker, "")]
    )
    return _terminal(job_id, state, state, record.status, 0, steps)


@dataclass(frozen=True)
class Observation:
    state: TaskState
    failure: TaskFailure | None = None


def parse_squeue(text: str) -> list[QueueRow]:
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.removesuffix("|").split("|", 7)
        if len(parts) != 8:
            continue
        job_id, state, reason, status, name, comment, nodes, work_dir = parts
        rows.append(
            QueueRow(
                job_id.strip(),
                state.strip(),
                reason,
                int(status) if status.strip().isdigit() else None,
                name,
                "" if comment == "(null)" else comment,
                work_dir,
                nodes.strip(),
            )
        )
    return rows


def parse_sacct(text: str) -> list[AcctRow]:
    rows = []
    for line in text.splitlines():
        parts = line.split("|", 5)  # WorkDir last: a path may hold "|"
        if len(parts) == 6 and parts[0]:
            job_id, state, exit_code, name, nodes, work_dir = parts
            rows.append(AcctRow(job_id, state, exit_code, name, work_dir, nodes))
        elif len(parts) == 5 and parts[0]:  # the five fields asked before NodeList was
            rows.append(AcctRow(*parts))
    return rows


def missing(job_id: str) -> Observation:
    return Observation(
        TaskState.FAILED,
        TaskFailure(
            "container_missing",
            f"Slurm knows no job {job_id}: neither squeue nor sacct reports it",
        ),
    )


def _base_state(state: str) -> str:
    # "CANCELLED by 0" -> "CANCELLED"; sacct may also print "RUNNING+" style suffixes.
    return state.split(" ", 1)[0].rstrip("+")


def _active(job_id: str, state: str) -> Observation | None:
    if state in PENDING_STATES:
        return Observation(TaskState.PENDING)
    if state in RUNNING_STATES:
        return Observation(TaskState.RUNNING)
    return None


def from_queue(row: QueueRow) -> Observation | None:
    """What squeue alone can say; None for a FAILED job, whose steps (the marker steps of an
    in-job digest failure or a container OOM kill) only sacct lists."""
    state = _base_state(row.state)
    if state == "COMPLETED":
        return Observation(TaskState.SUCCEEDED)
    active = _active(row.job_id, state)
    if active is not None:
        return active
    if state == "FAILED":
        return None
    if state in _TERMINAL:
        return from_queue_alone(row)  # the state says it all: cancelled, timeout, OOM, ...
    # A state this backend does not know, on a job the controller still holds: not finished.
    return Observation(TaskState.PENDING)


def from_queue_alone(row: QueueRow, record: ExitRecord | None = None) -> Observation:
    """A finished job squeue still shows and accounting does not know (no slurmdbd)."""
    exit_code, signal = divmod(row.exit_status or 0, 256)
    if record is not None:
        exit_code = record.status
    return _terminal(
        row.job_id, _base_state(row.state), row.state, exit_code, signal & 0x7F, [], row.nodes
    )


_TERMINAL = frozenset({"COMPLETED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "CANCELLED"}).union(
    RETRYABLE_STATES
)


def from_accounting(
    job_id: str, rows: list[AcctRow], record: ExitRecord | None = None
) -> Observation | None:
    """Classify from the job's sacct rows (job + steps); None when sacct has no job row.

    sacct prints an exit status above 128 modulo 128 (200 as 72); the job's own ``record``,
    when there is one, gives the exact status."""
    mine = [r for r in rows if r.job == job_id]
    job = next((r for r in mine if r.job_id == job_id), None)
    if job is None:
        return None
    state = _base_state(job.state)
    active = _active(job_id, state)
    if active is not None:
        return active
    exit_part, _, signal_part = job.exit_code.partition(":")
    exit_code = int(exit_part) if exit_part.isdigit() else 0
    signal = int(signal_part) if signal_part.isdigit() else 0
    if record is not None:
        exit_code = record.status
    steps = [r for r in mine if r is not job]
    nodes = "" if job.nodes.startswith("None") else job.nodes
    return _terminal(job_id, state, job.state, exit_code, signal, steps, nodes)


def _terminal(
    job_id: str,
    state: str,
    shown: str,
    exit_code: int,
    signal: int,
    steps: list[AcctRow],
    nodes: str = "",
) -> Observation:
    if state in PROVIDER_STATES:
        # Before the markers and the exit status: a preempted or lost job's script may still
        # have written a record (its trap kills the container: 137/143), which is Slurm's
        # doing, not the task's.
        return _provider_ended(job_id, state, nodes)
    names = {step.name for step in steps}
    if INPUT_MISMATCH_STEP in names:
        return _failed(
            "input_digest_mismatch",
            f"job {job_id}: an input failed its digest check before the task ran "
            "(see failure_detail)",
            deterministic=True,
        )
    if (
        state == "OUT_OF_MEMORY"
        or OOM_STEP in names
        or any(_base_state(s.state) == "OUT_OF_MEMORY" for s in steps)
    ):
        return _failed(
            "oom_killed", f"job {job_id} was killed for exceeding its memory limit ({shown})"
        )
    if state == "COMPLETED":
        return Observation(TaskState.SUCCEEDED)
    if state == "TIMEOUT":
        return _failed("timeout", f"job {job_id} ran past its time limit and Slurm ended it")
    if state == "CANCELLED":
        return _failed("cancelled", f"job {job_id} was cancelled ({shown})")
    if state in RETRYABLE_STATES:
        return _failed(
            "job_failed", f"job {job_id} ended {state}, not through its task (retryable)"
        )
    if state == "FAILED" and exit_code > 0:
        signal_name = _SIGNAL_EXITS.get(exit_code)
        # As on the local backend: 137/143 is a container killed from outside the task (an
        # engine's kill, a host OOM killer it did not flag), which may well pass next time.
        how = f" ({signal_name}, sent from outside the task)" if signal_name else ""
        return Observation(
            TaskState.FAILED,
            TaskFailure(
                f"exit_{exit_code}",
                f"job {job_id}: the task exited with code {exit_code}{how}",
                deterministic=signal_name is None,
                exit_code=exit_code,
            ),
        )
    if state == "FAILED":
        how = f"killed by signal {signal}" if signal else "failed without an exit code"
        return _failed("job_failed", f"job {job_id} {how} ({shown})")
    # UNKNOWN, SPECIAL_EXIT or anything newer: never read as success.
    return _failed("job_failed", f"job {job_id} ended in state {shown!r}, which is not a success")


def _provider_ended(job_id: str, state: str, nodes: str) -> Observation:
    node = f"node {nodes}" if nodes and nodes != "(null)" else "its node"
    if state == "PREEMPTED":
        what = f"job {job_id} was preempted on {node} for higher-priority work"
    elif state == "BOOT_FAIL":
        what = f"job {job_id}: {node} failed to boot"
    else:
        what = f"job {job_id}: {node} failed under it"
    return Observation(
        TaskState.FAILED,
        TaskFailure(
            "job_failed",
            f"{what} (Slurm state {state}); the task itself did not fail",
            provider_ending=PROVIDER_STATES[state],
        ),
    )


def _failed(reason: str, detail: str, *, deterministic: bool = False) -> Observation:
    return Observation(TaskState.FAILED, TaskFailure(reason, detail, deterministic=deterministic))
