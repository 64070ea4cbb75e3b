"""How a poll learns that jobs started and ended: their records first, the queue now and then.

Each job writes two records in its job directory, both atomically (write, then rename): a start
record when its script begins and an exit record as its last act (:mod:`.render`); ``cancel``
adds a third once ``scancel`` accepted it (:func:`.commands.mark_cancelled`). One command reads
them for every open job (a ``grep`` locally, one remote command over ssh), so a poll is cheap and
may run every couple of seconds. A job whose exit record says how it ended is settled by it
without asking Slurm; a record that leaves the reason to Slurm (the script was signalled, or an
unmarked SIGKILL) is explained by one ``sacct`` (slurmdbd, not the controller).

The controller is asked (one ``squeue`` for all the jobs no record explains) at most once per
``queue_interval_s``, and only when some job needs it: to tell pending from running for a job
without a start record, and to notice a job that died without writing a record (a node failure,
a cancel from outside before it started, a preemption, its script killed). Only a job this
tracker has never seen (a handle from an earlier run) makes the first query due at once.
Otherwise ``sacct`` is asked only for jobs gone from squeue with no record. Over a run, the
poll's queries and the run's closing listing share one budget of one query per interval since
the first submit, so a run's first poll query comes after two intervals.

A job that ended normally (squeue shows it COMPLETED or FAILED, or sacct does once squeue forgot
it) but whose exit record is not visible yet (a network filesystem's attribute cache) is
reported running while the record is awaited, up to ``exit_read_timeout_s``; only then does
Slurm's own view decide, so a late record never turns a finished job into ``container_missing``.
Nothing here is durable: a new instance starts by asking the queue about what it has not seen.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass

from altar.backends.slurm import commands
from altar.backends.slurm.classify import (
    AcctRow,
    ExitRecord,
    Observation,
    QueueRow,
    from_accounting,
    from_queue,
    from_queue_alone,
    from_record,
    missing,
    parse_exit_record,
)
from altar.backends.slurm.render import EXIT_RECORD, START_RECORD, START_RECORD_VERSION
from altar.backends.slurm.runtime import LoginNode
from altar.execution import TaskFailure, TaskHandle, TaskState, TaskStatus

__all__ = ["DEFAULT_EXIT_READ_TIMEOUT_S", "DEFAULT_QUEUE_INTERVAL_S", "Tracker", "status_of"]

#: How often the controller may be asked about jobs no record explains (peers: Nextflow's grid
#: executors 1 min, Snakemake's Slurm plugin 40-180 s, submitit up to 60 s).
DEFAULT_QUEUE_INTERVAL_S = 60.0
#: How long a normally ended job's exit record may take to become visible (NFS attribute
#: caches hold a directory's view for up to ``acdirmax``, 60 s by default; 30 s is typical).
DEFAULT_EXIT_READ_TIMEOUT_S = 45.0

#: Queue states after which the script ran to its end, so its exit record is due.
_RECORDED_ENDS = frozenset({"COMPLETED", "FAILED"})

Seen = tuple[Observation, ExitRecord | None]


@dataclass
class _Job:
    """What the queue last said about one job its records do not settle."""

    observation: Observation | None = None  # the queue's view of an active job
    row: QueueRow | None = None  # the queue's row of a job that ended normally
    awaiting_since: float | None = None  # when its exit record began to be awaited


class Tracker:
    """The poll's memory of the jobs it follows (one per backend instance)."""

    def __init__(
        self,
        node: LoginNode,
        jobs_dir: str,
        *,
        queue_interval_s: float,
        exit_read_timeout_s: float,
        query_timeout_s: float | None,
        clock: Callable[[], float],
    ) -> None:
        self.node = node
        self.jobs_dir = jobs_dir
        self.queue_interval_s = queue_interval_s
        self.exit_read_timeout_s = exit_read_timeout_s
        self.query_timeout_s = query_timeout_s
        self.clock = clock
        self.queued_at: float | None = None  # when squeue was last asked by a poll
        # The budget of job queries (sdiag's REQUEST_JOB_INFO): one per queue_interval_s since
        # the first submit, for the poll's queries and the run's listings (see asked()).
        self.since: float | None = None
        self.spent = 0
        self.jobs: dict[str, _Job] = {}
        self.final: dict[str, Seen] = {}
        self.waiting_now: set[str] = set()  # jobs the squeue of this poll shows pending

    def submitted(self, job_id: str) -> None:
        """A job sbatch just accepted (or submit adopted): pending until a record or the
        queue says more, and no reason to ask the queue at once. Starts the pacing."""
        self.jobs.setdefault(job_id, _Job(Observation(TaskState.PENDING)))
        if self.queued_at is None:
            self.queued_at = self.clock()
        if self.since is None:
            self.since = self.clock()

    def asked(self) -> None:
        """The backend listed the run's jobs (one squeue of them all): it draws on the
        poll's budget."""
        self.spent += 1

    # -- reading ------------------------------------------------------------------------------

    def _read(self, jobs: Mapping[str, str]) -> dict[str, tuple[ExitRecord | None, bool, bool]]:
        """job id -> (its exit record, whether it started, whether a backend cancelled it),
        for the given jobs (id -> token)."""
        found = commands.read_records(self.node, self.jobs_dir, list(jobs.values()))
        out = {}
        for job_id, token in jobs.items():
            files = found.get(token, {})
            record = parse_exit_record(files.get(EXIT_RECORD, ""))
            started = files.get(START_RECORD, "").startswith(f"{START_RECORD_VERSION} ")
            cancelled = files.get(commands.CANCEL_RECORD) == commands.CANCEL_RECORD_VERSION
            out[job_id] = (record, started or record is not None, cancelled)
        return out

    def _queue_due(self, now: float, asking: list[str]) -> bool:
        if not asking:
            return False
        if self.queued_at is None or any(j not in self.jobs for j in asking):
            return True
        if self.queue_interval_s <= 0:
            return True
        if now - self.queued_at < self.queue_interval_s:
            return False
        # Within one job query per interval of run time, the run's closing listing
        # (list_submissions) included: the poll's k-th query waits until k + 1 intervals
        # have passed since the first submit, so the first comes after two.
        since = self.since if self.since is not None else self.queued_at
        return self.spent + 2 <= (now - since) / self.queue_interval_s

    # -- one poll -----------------------------------------------------------------------------

    def observe(self, jobs: Mapping[str, str]) -> dict[str, Seen]:
        """One observation (and the exit record, if read) per job id of ``jobs`` (id -> token)."""
        now = self.clock()
        seen: dict[str, Seen] = {j: self.final[j] for j in jobs if j in self.final}
        reading = {j: t for j, t in jobs.items() if j not in seen}
        read = self._read(reading) if reading else {}
        records: dict[str, ExitRecord] = {}
        started: set[str] = set()
        for job_id, (record, began, cancelled) in read.items():
            if began:
                started.add(job_id)
            settled = from_record(job_id, record) if record is not None else None
            if record is not None:
                records[job_id] = record
            if settled is None and cancelled:
                # scancel was accepted (by this or another instance); Slurm may still be
                # tearing the job down, and a job cancelled while pending writes no record
                settled = Observation(
                    TaskState.FAILED, TaskFailure("cancelled", f"job {job_id} was cancelled")
                )
            if settled is not None:
                seen[job_id] = (settled, record)
        telling = [j for j in reading if j not in seen and j in records]
        if telling:
            # The record says the job ended but leaves the reason to Slurm (signalled, or an
            # unmarked SIGKILL): accounting (slurmdbd, not the controller) says why.
            self._ask_why(telling, records, seen)
        open_ids = [j for j in reading if j not in seen]
        asking = [j for j in open_ids if self._awaiting(j) is None]
        accounting: list[str] = []  # ended without a usable record: sacct decides
        probing: list[str] = []  # gone from squeue, no record: did it end without one?
        self.waiting_now = set()
        if self._queue_due(self.clock(), asking):
            self.queued_at = self.clock()  # when squeue is asked, not when the poll began
            self.spent += 1
            accounting, probing = self._ask_queue(asking, jobs, records, seen, now, set(telling))
        for job_id in open_ids:
            job = self.jobs.get(job_id)
            if job_id in seen or job is None or job.awaiting_since is None:
                continue
            if now - job.awaiting_since >= self.exit_read_timeout_s:
                # given up on the record: a COMPLETED row says it all, else accounting
                done = from_queue(job.row) if job.row is not None else None
                if done is not None:
                    seen[job_id] = (done, None)
                else:
                    accounting.append(job_id)
        if accounting or probing:
            self._ask_accounting(accounting, probing, records, seen, now)
        for job_id in open_ids:
            if job_id in seen:
                continue
            job = self.jobs.setdefault(job_id, _Job())
            if job_id in self.waiting_now and job_id not in records:
                # squeue, asked after the records were read, says it waits: a start record
                # is then an earlier run's (Slurm requeued the job)
                seen[job_id] = (Observation(TaskState.PENDING), None)
            elif job.awaiting_since is not None or job_id in records or job_id in started:
                seen[job_id] = (Observation(TaskState.RUNNING), records.get(job_id))
            else:
                seen[job_id] = (job.observation or Observation(TaskState.PENDING), None)
        for job_id, (observation, record) in seen.items():
            if observation.state.is_terminal and job_id not in self.final:
                self.final[job_id] = (observation, record)
                self.jobs.pop(job_id, None)
        return {job_id: seen[job_id] for job_id in jobs}

    def _awaiting(self, job_id: str) -> float | None:
        job = self.jobs.get(job_id)
        return None if job is None else job.awaiting_since

    def _ask_why(
        self, job_ids: list[str], records: dict[str, ExitRecord], seen: dict[str, Seen]
    ) -> None:
        """One sacct for jobs whose record leaves the reason to Slurm; those it shows ended
        are settled, the others stay open (accounting lags; the queue decides later)."""
        rows = commands.accounting(self.node, job_ids=job_ids, timeout_s=self.query_timeout_s)
        for job_id in job_ids:
            observed = from_accounting(job_id, rows, records[job_id])
            if observed is not None and observed.state.is_terminal:
                seen[job_id] = (observed, records[job_id])

    def _ask_queue(
        self,
        asking: list[str],
        jobs: Mapping[str, str],
        records: dict[str, ExitRecord],
        seen: dict[str, Seen],
        now: float,
        asked_why: set[str],
    ) -> tuple[list[str], list[str]]:
        """One squeue for ``asking``; settles what it can. Returns the jobs to ask sacct
        about (ended, with a record that leaves the reason to Slurm) and the jobs gone from
        squeue without a record (sacct may say they ended without writing one)."""
        rows = {
            row.job_id: row
            for row in commands.queue(self.node, job_ids=asking, timeout_s=self.query_timeout_s)
        }
        accounting: list[str] = []
        unrecorded: list[str] = []
        for job_id in asking:
            job = self.jobs.setdefault(job_id, _Job())
            row = rows.get(job_id)
            observed = from_queue(row) if row is not None else None
            if observed is not None and not observed.state.is_terminal:
                job.observation = observed
                if observed.state is TaskState.PENDING:
                    self.waiting_now.add(job_id)
                continue
            record = records.get(job_id)
            job.row = row
            if row is not None and _base(row.state) not in _RECORDED_ENDS:
                # cancelled, timed out, out of memory, preempted...: the queue says why
                seen[job_id] = (observed or from_queue_alone(row), record)
            elif record is not None:
                if observed is not None:  # COMPLETED
                    seen[job_id] = (observed, record)
                elif job_id in asked_why:  # sacct, asked this poll, does not know it yet
                    seen[job_id] = (
                        from_queue_alone(row, record)
                        if row
                        else _from_record_alone(job_id, record),
                        record,
                    )
                else:  # FAILED, or gone: its steps (and exact state) are sacct's
                    accounting.append(job_id)
            else:
                unrecorded.append(job_id)
        probing: list[str] = []
        if unrecorded:
            # The job may have written its record since this poll read them: look once more.
            again = self._read({j: jobs[j] for j in unrecorded})
            for job_id in unrecorded:
                record, _, _ = again[job_id]
                settled = from_record(job_id, record) if record is not None else None
                if settled is not None:
                    seen[job_id] = (settled, record)
                elif record is not None:
                    records[job_id] = record
                    accounting.append(job_id)
                elif self.jobs[job_id].row is None:
                    probing.append(job_id)
                else:
                    self.jobs[job_id].awaiting_since = now
        return accounting, probing

    def _ask_accounting(
        self,
        accounting: list[str],
        probing: list[str],
        records: dict[str, ExitRecord],
        seen: dict[str, Seen],
        now: float,
    ) -> None:
        """One sacct: it decides the ``accounting`` jobs; a ``probing`` job it shows ended
        without a record (cancelled before it started, timed out, node failure...) is settled,
        one that ended normally awaits its record."""
        rows: list[AcctRow] = commands.accounting(
            self.node, job_ids=[*accounting, *probing], timeout_s=self.query_timeout_s
        )
        for job_id in [*accounting, *probing]:
            record = records.get(job_id)
            job = self.jobs.setdefault(job_id, _Job())
            observed = from_accounting(job_id, rows, record)
            if job_id in probing:
                # A job neither squeue nor sacct knows is missing now (squeue keeps a finished
                # job for MinJobAge, by when accounting has it); one that ended normally
                # awaits its record.
                shown = next((r.state for r in rows if r.job_id == job_id), "")
                if observed is not None and _base(shown) in _RECORDED_ENDS:
                    job.awaiting_since = now
                    if self.exit_read_timeout_s > 0:
                        continue
            if observed is None:
                row = job.row
                observed = from_queue_alone(row, record) if row is not None else missing(job_id)
            elif not observed.state.is_terminal:
                # accounting has it active (it lags the controller): the queue, next time
                job.awaiting_since = None
                job.observation = observed
            seen[job_id] = (observed, record)


def _base(state: str) -> str:
    return state.split(" ", 1)[0].rstrip("+")


def _from_record_alone(job_id: str, record: ExitRecord) -> Observation:
    """A job that left a record Slurm no longer explains (gone from squeue, not in sacct)."""
    if record.status == 0:
        return Observation(TaskState.SUCCEEDED)
    return Observation(
        TaskState.FAILED,
        TaskFailure(
            "job_failed",
            f"job {job_id} ended with status {record.status} after a signal, and Slurm no "
            "longer knows why",
        ),
    )


def status_of(
    handle: TaskHandle, seen: Seen | None, *, cancelled: Container[str] = ()
) -> TaskStatus:
    """The task status of ``handle`` from what the poll saw of its job (None: a handle that
    names no job of ours). A job whose scancel was accepted reads cancelled at once, while
    Slurm still tears it down."""
    if seen is None:
        observation, record = missing(handle.external_id), None
    else:
        observation, record = seen
        job_id = handle.external_id.split(":", 1)[0]
        if job_id in cancelled and not observation.state.is_terminal:
            observation = Observation(
                TaskState.FAILED, TaskFailure("cancelled", f"job {job_id} was cancelled")
            )
    # The script's own start and end (compute node clock): the queue wait is not run time.
    # Only for a finished job, whose record the poll read.
    started = finished = None
    if record is not None and observation.state.is_terminal:
        started, finished = record.start, record.end
    return TaskStatus(
        handle,
        observation.state,
        observation.failure,
        started_at=None if started is None else float(started),
        finished_at=None if finished is None else float(finished),
    )
