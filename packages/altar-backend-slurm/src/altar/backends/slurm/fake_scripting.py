"""The fake Slurm's jobs as tests script them: starts, endings, records and logs.

Each method does what Slurm and the job's batch script would: :meth:`ScriptedJobs.finish`
writes the exit record (as the script's last act) and the state and exit code sacct and
squeue show (Slurm 22.05: sacct 128 less above 128, squeue the raw status).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from altar.backends.slurm.fake_jobs import ACTIVE, FakeJob
from altar.backends.slurm.render import (
    EXIT_RECORD,
    EXIT_RECORD_VERSION,
    INPUT_MISMATCH_STEP,
    OOM_STEP,
    RECORD_MARKERS,
    START_RECORD,
    START_RECORD_VERSION,
)

__all__ = ["ScriptedJobs"]


class ScriptedJobs:
    """The jobs of the fake controller, by raw id, and the clock squeue ages them by."""

    def __init__(self) -> None:
        self.jobs: dict[int, FakeJob] = {}
        self.clock = 0.0
        #: Jobs start (and write their start record) at once; False: they stay PENDING
        #: until :meth:`start`.
        self.start_jobs = True
        #: Array job id -> its ``%M`` (at most M elements running at once), or None.
        self.array_limits: dict[int, int | None] = {}

    def job(self, job_id: str | int) -> FakeJob:
        """A job by id (``12``, an element's ``12_3``, or a handle's ``12_3:token``)."""
        shown = str(job_id).split(":", 1)[0]
        if "_" not in shown:
            return self.jobs[int(shown)]
        return next(j for j in self.jobs.values() if j.shown == shown)

    def elements(self, array_id: str | int) -> list[FakeJob]:
        """The elements of array ``array_id``, by index."""
        found = [j for j in self.jobs.values() if j.array_id == int(array_id)]
        return sorted(found, key=lambda j: j.index or 0)

    def advance(self, seconds: float) -> None:
        self.clock += seconds

    def end(self, job_id: str | int, state: str, exit_code: str, *, raw: int = 0) -> None:
        job = self.job(job_id)
        job.state, job.exit_code, job.raw_status = state, exit_code, raw
        job.ended_at = self.clock
        # As 22.05 records them: a batch step Slurm killed reads CANCELLED.
        killed = ("TIMEOUT", "PREEMPTED", "NODE_FAIL", "BOOT_FAIL")
        batch_state = "CANCELLED" if state in killed or state.startswith("CANCELLED") else state
        job.steps.insert(0, (f"{job.shown}.batch", "batch", batch_state, exit_code))
        job.steps.append((f"{job.shown}.extern", "extern", "COMPLETED", "0:0"))
        if job.array_id is not None:
            self._start_throttled(job.array_id)

    def write_record(
        self, job_id: str | int, status: int, *, signalled: bool = False, marker: str = ""
    ) -> None:
        """The script's last act: its exit record, written beside and renamed over."""
        job = self.job(job_id)
        path = Path(job.record_dir, EXIT_RECORD)
        tmp = path.with_name(f"{EXIT_RECORD}.tmp")
        tmp.write_text(
            f"{EXIT_RECORD_VERSION} status={status} start=0 end=0 "
            f"signalled={int(signalled)} marker={marker}\n"
        )
        tmp.replace(path)

    def finish(
        self, job_id: str | int, exit_code: int, *, record: bool = True, marker: str = ""
    ) -> None:
        """The task exited with ``exit_code``: the script writes its exit record (unless
        ``record`` is False: a job killed before its last act), sacct keeps the code as
        Slurm 22.05 does, 128 less above 128 (200 reads 72:0), squeue the raw status."""
        state = "COMPLETED" if exit_code == 0 else "FAILED"
        if record:
            self.write_record(job_id, exit_code, marker=marker)
        shown = exit_code - 128 if exit_code > 128 else exit_code
        self.end(job_id, state, f"{shown}:0", raw=exit_code << 8)

    def start(self, job_id: str | int) -> None:
        """A pending job starts: RUNNING, and its script writes its start record."""
        job = self.job(job_id)
        job.state, job.started = "RUNNING", True
        Path(job.record_dir, START_RECORD).write_text(f"{START_RECORD_VERSION} start=0\n")

    def _start_throttled(self, array_id: int) -> None:
        """Start the array's next pending elements its ``%M`` now allows (Slurm's scheduler)."""
        if not self.start_jobs:
            return
        limit = self.array_limits.get(array_id)
        members = self.elements(array_id)
        running = sum(1 for j in members if j.state in ACTIVE[1:])
        for job in members:
            if job.state == "PENDING" and not job.held and (limit is None or running < limit):
                self.start(job.shown)
                running += 1

    def preempt(self, job_id: str | int, *, record: int | None = None) -> None:
        """A higher-tier job took the node (``PreemptMode=CANCEL``): PREEMPTED, the batch
        step signalled (squeue's raw status 15). ``record``: the status the script's TERM
        trap wrote before it was killed (a container runtime's 137/143), if it got that far."""
        if record is not None:  # the trap marks the record signalled, as render.py's does
            self.write_record(job_id, record, signalled=True)
        self.end(job_id, "PREEMPTED", "0:0", raw=15)

    def node_fail(self, job_id: str | int, *, boot: bool = False) -> None:
        """The job's node went down under it (NODE_FAIL), or never booted (BOOT_FAIL)."""
        self.end(job_id, "BOOT_FAIL" if boot else "NODE_FAIL", "0:0")

    def expire(self, job_id: str | int) -> None:
        self.end(job_id, "TIMEOUT", "0:0")

    def oom_kill(self, job_id: str | int) -> None:
        self.end(job_id, "OUT_OF_MEMORY", "0:125", raw=125)

    def _marker(self, job_id: str | int, name: str) -> None:
        job = self.job(job_id)
        job.steps.append((f"{job.shown}.{len(job.steps)}", name, "COMPLETED", "0:0"))

    def fail_verification(self, job_id: str | int) -> None:
        self._marker(job_id, INPUT_MISMATCH_STEP)
        self.finish(job_id, 1, marker=RECORD_MARKERS[INPUT_MISMATCH_STEP])

    def container_oom(self, job_id: str | int) -> None:
        """docker's own memory limit killed the container: exit 137, the marker step and
        the marked record."""
        self._marker(job_id, OOM_STEP)
        self.write_record(job_id, 137, marker=RECORD_MARKERS[OOM_STEP])
        self.end(job_id, "FAILED", "137:0", raw=137 << 8)

    def write_log(self, job_id: str | int, lines: Sequence[str], *, stream: str = "stdout") -> None:
        path = Path(self.job(job_id).record_dir) / stream
        with path.open("a") as handle:
            handle.writelines(f"{line}\n" for line in lines)
