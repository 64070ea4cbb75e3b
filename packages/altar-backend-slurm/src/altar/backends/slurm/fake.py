"""An in-memory Slurm login node for tests: ``sbatch``/``squeue``/``sacct``/``scancel`` as 22.05.

:class:`FakeLoginNode` implements :class:`~altar.backends.slurm.runtime.LoginNode` over a real
local directory (the "shared filesystem"), so staging, job directories and logs are real
files. It answers the commands the backend runs with the output formats, job ids, error texts
and exit statuses of Slurm 22.05.8 (checked against the real one on the test machine):

- ids count up from 1; ``sbatch --parsable`` prints the id; a job starts RUNNING at once;
- ``squeue`` shows finished jobs for ``min_job_age`` seconds (its ``MinJobAge``), then
  forgets them; a lone unknown ``--jobs`` id answers ``slurm_load_jobs error: Invalid job id
  specified`` (exit 1), an unknown id among known ones is silently left out;
- ``sacct`` keeps every job with one row per step (``N``, ``N.batch``, ``N.extern``, steps
  the job ran); ``--allocations`` keeps only job rows;
- ``max_submit_jobs`` is a QOS's ``MaxSubmitJobsPerUser`` (with limits enforced): sbatch
  refuses a job beyond it as 22.05 does, and the limits query reports it; ``refuse_next``
  makes the next sbatch fail with that text (``timeout_after_sbatch``: the job is made, but
  sbatch reports ``Socket timed out``);
- with ``available = False`` every command fails as with slurmctld down; with
  ``accounting_available = False`` only ``sacct`` fails (slurmdbd down); with
  ``unreachable = True`` the node itself cannot be reached (ssh refused).

Tests script jobs through :meth:`finish`, :meth:`expire`, :meth:`oom_kill`,
:meth:`fail_verification`, :meth:`end`, :meth:`write_log` and :meth:`advance` (the clock).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from altar.backends.slurm.commands import SUBMIT_PROGRAM, parse_duration
from altar.backends.slurm.fake_script import (
    ReadScript,
    logical_lines,
    read_script,
    sbatch_directives,
)
from altar.backends.slurm.limits import LIMITS_PROGRAM
from altar.backends.slurm.render import (
    EXIT_RECORD,
    EXIT_RECORD_VERSION,
    INPUT_MISMATCH_STEP,
    OOM_STEP,
    RECORD_MARKERS,
    START_RECORD,
    START_RECORD_VERSION,
)
from altar.backends.slurm.runtime import CommandResult, LoginNodeUnreachableError
from altar.backends.slurm.sdk_runtime import LocalLoginNode

__all__ = ["FakeJob", "FakeLoginNode", "ReadScript", "logical_lines", "read_script"]

CONTROLLER_DOWN = "Unable to contact slurm controller (connect failure)"
DATABASE_DOWN = (
    "sacct: error: slurm_persist_conn_open_without_init: failed to open persistent connection "
    "to host:localhost:6819: Connection refused\n"
    "sacct: error: Sending PersistInit msg: Connection refused\n"
    "sacct: error: Problem talking to the database: Connection refused\n"
)
_ACTIVE = ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING")


@dataclass
class FakeJob:
    job_id: int
    name: str
    comment: str
    work_dir: str
    script: str
    directives: dict[str, str | None]
    time_limit_s: int | None
    state: str = "RUNNING"
    exit_code: str = "0:0"
    raw_status: int = 0
    steps: list[tuple[str, str, str, str]] = field(default_factory=list)  # id, name, state, exit
    ended_at: float | None = None
    in_queue: bool = True


class FakeLoginNode(LocalLoginNode):
    """A single-node Slurm answering on this machine's filesystem (see the module doc)."""

    def __init__(
        self,
        *,
        partitions: dict[str, int | None] | None = None,
        default_partition: str = "debug",
        gpus: dict[str | None, int] | None = None,
        min_job_age: float = 300.0,
    ) -> None:
        super().__init__()
        self.partitions = partitions if partitions is not None else {"debug": None}
        self.default_partition = default_partition
        self.gpus = gpus if gpus is not None else {}
        self.min_job_age = min_job_age
        self.node_name = "localhost"
        self.jobs: dict[int, FakeJob] = {}
        self.calls: list[list[str]] = []
        self.available = True
        #: The controller goes away between the backend's lookups and its sbatch: the next
        #: sbatch reports it down (then this resets).
        self.lost_at_sbatch = False
        self.accounting_available = True
        self.unreachable = False
        #: The controller accepts connections but does not answer (a query under ``timeout``
        #: is stopped; one without waits as long as the real client would, then reports it).
        self.hung = False
        #: Jobs slurmdbd has not recorded yet (accounting lags the controller).
        self.unaccounted: set[int] = set()
        self.max_submit_jobs: int | None = None
        self.refuse_next: str | None = None
        self.timeout_after_sbatch = False
        self.clock = 0.0
        #: Jobs start (and write their start record) at once; False: they stay PENDING
        #: until :meth:`start`.
        self.start_jobs = True
        self._next_id = 1

    # -- scripting ----------------------------------------------------------------------------

    def job(self, job_id: str | int) -> FakeJob:
        return self.jobs[int(str(job_id).split(":", 1)[0])]

    def advance(self, seconds: float) -> None:
        self.clock += seconds

    def end(self, job_id: str | int, state: str, exit_code: str, *, raw: int = 0) -> None:
        job = self.job(job_id)
        job.state, job.exit_code, job.raw_status = state, exit_code, raw
        job.ended_at = self.clock
        # As 22.05 records them: a batch step Slurm killed reads CANCELLED.
        killed = ("TIMEOUT", "PREEMPTED", "NODE_FAIL", "BOOT_FAIL")
        batch_state = "CANCELLED" if state in killed or state.startswith("CANCELLED") else state
        job.steps.insert(0, (f"{job.job_id}.batch", "batch", batch_state, exit_code))
        job.steps.append((f"{job.job_id}.extern", "extern", "COMPLETED", "0:0"))

    def write_record(
        self, job_id: str | int, status: int, *, signalled: bool = False, marker: str = ""
    ) -> None:
        """The script's last act: its exit record, written beside and renamed over."""
        job = self.job(job_id)
        path = Path(job.work_dir, EXIT_RECORD)
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
        job.state = "RUNNING"
        Path(job.work_dir, START_RECORD).write_text(f"{START_RECORD_VERSION} start=0\n")

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
        job.steps.append((f"{job.job_id}.{len(job.steps)}", name, "COMPLETED", "0:0"))

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
        path = Path(self.job(job_id).work_dir) / stream
        with path.open("a") as handle:
            handle.writelines(f"{line}\n" for line in lines)

    def launched(self, job_id: str | int) -> ReadScript:
        return read_script(self.job(job_id).script)

    # -- the login node -----------------------------------------------------------------------

    def run(self, argv: Sequence[str]) -> CommandResult:
        self.calls.append(list(argv))
        if self.unreachable:
            raise LoginNodeUnreachableError(
                "ssh: connect to host login port 22: Connection refused"
            )
        bounded = argv[0] == "timeout"
        if bounded:  # coreutils `timeout --kill-after=K SECONDS command...`
            argv = argv[3:]
            if self.hung and argv[0] in ("squeue", "sacct", "scontrol", "scancel", "sinfo"):
                return CommandResult(124, "", "")
        program = argv[0]
        if program == "sh" and list(argv[1:3]) == ["-c", SUBMIT_PROGRAM]:
            return self._sbatch(argv[4], argv[5])
        if program == "sh" and list(argv[1:3]) == ["-c", LIMITS_PROGRAM]:
            return self._limits()
        handler = {
            "squeue": self._squeue,
            "sacct": self._sacct,
            "scancel": self._scancel,
            "scontrol": self._scontrol,
            "sinfo": self._sinfo,
        }.get(program)
        if handler is not None:
            return handler(list(argv[1:]))
        if program in ("tail", "rm", "grep", "cat") or (
            program == "sh" and list(argv[1:2]) == ["-c"]
        ):
            return super().run(argv)
        return CommandResult(127, "", f"sh: 1: {program}: not found\n")

    def _down(self, program: str) -> CommandResult | None:
        if program == "sbatch" and self.lost_at_sbatch:
            self.lost_at_sbatch = False  # this one sbatch finds the controller gone
        elif self.available and not self.hung:
            return None
        if program == "sbatch":
            text = f"sbatch: error: Batch job submission failed: {CONTROLLER_DOWN}\n"
        elif program == "squeue":
            text = f"slurm_load_jobs error: {CONTROLLER_DOWN}\n"
        elif program == "scancel":
            text = f"scancel: error: Kill job error: {CONTROLLER_DOWN}\n"
        else:
            text = f"slurm_load_partitions: {CONTROLLER_DOWN}\n"
        return CommandResult(1, "", text)

    def _limits(self) -> CommandResult:
        if not self.accounting_available:
            return CommandResult(4, "", DATABASE_DOWN)
        enforce = "associations,limits,qos" if self.max_submit_jobs is not None else "none"
        limit = "" if self.max_submit_jobs is None else str(self.max_submit_jobs)
        text = (
            f"AccountingStorageEnforce={enforce}\nClusterName=fake\n---\nroot\n---\n"
            "fake|root|||||normal\n---\n"
            f"normal|{limit}||\n"
        )
        return CommandResult(0, text, "")

    def _refuse(self, reason: str) -> CommandResult:
        return CommandResult(1, "", f"sbatch: error: Batch job submission failed: {reason}\n")

    def _sbatch(self, job_dir: str, script: str) -> CommandResult:
        # The submit program places the script before sbatch runs, whatever sbatch answers.
        os.makedirs(job_dir, exist_ok=True)
        Path(job_dir, "job.sbatch").write_text(script)
        down = self._down("sbatch")
        if down is not None:
            return down
        if self.refuse_next is not None:
            text, self.refuse_next = self.refuse_next, None
            return CommandResult(1, "", text)
        live = sum(1 for j in self.jobs.values() if j.state in _ACTIVE)
        if self.max_submit_jobs is not None and live >= self.max_submit_jobs:
            return CommandResult(
                1,
                "",
                "sbatch: error: QOSMaxSubmitJobPerUserLimit\n"
                "sbatch: error: Batch job submission failed: Job violates accounting/QOS "
                "policy (job submit limit, user's size and/or time limits)\n",
            )
        if "\r\n" in script:
            return CommandResult(
                1, "", "sbatch: error: Batch script contains DOS line breaks (\\r\\n)\n"
            )
        options = sbatch_directives(script)
        partition = options.get("--partition") or self.default_partition
        if partition not in self.partitions:
            return self._refuse("Invalid partition name specified")
        cap = self.partitions[partition]
        requested = options.get("--time")
        limit = parse_duration(requested) if requested else cap
        if limit is not None and cap is not None and limit > cap:
            return self._refuse("Requested time limit is invalid (missing or exceeds some limit)")
        gres = options.get("--gres")
        if gres is not None:
            parts = gres.split(":")
            kind, count = (parts[1] if len(parts) == 3 else None), int(parts[-1])
            have = sum(self.gpus.values()) if kind is None else self.gpus.get(kind, 0)
            if count > have:
                return self._refuse("Invalid generic resource (gres) specification")
        job = FakeJob(
            job_id=self._next_id,
            name=options.get("--job-name") or "job.sbatch",
            comment=options.get("--comment") or "",
            work_dir=options.get("--chdir") or job_dir,
            script=script,
            directives=options,
            time_limit_s=limit,
            state="RUNNING" if self.start_jobs else "PENDING",
        )
        self._next_id += 1
        self.jobs[job.job_id] = job
        if self.start_jobs:  # the script's first act: its start record
            Path(job.work_dir, START_RECORD).write_text(f"{START_RECORD_VERSION} start=0\n")
        if self.timeout_after_sbatch:
            self.timeout_after_sbatch = False  # the job exists; the answer was lost
            return CommandResult(
                1,
                "",
                "sbatch: error: Batch job submission failed: Socket timed out on send/recv "
                "operation\n",
            )
        return CommandResult(0, f"{job.job_id}\n", "")

    def _visible(self, job: FakeJob) -> bool:
        if job.ended_at is None:
            return True
        return self.clock - job.ended_at < self.min_job_age

    @staticmethod
    def _options(args: list[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        for arg in args:
            key, _, value = arg.partition("=")
            out[key] = value
        return out

    def _squeue(self, args: list[str]) -> CommandResult:
        down = self._down("squeue")
        if down is not None:
            return down
        options = self._options(args)
        jobs = [j for j in self.jobs.values() if self._visible(j)]
        if "--states" not in options:
            jobs = [j for j in jobs if j.state in _ACTIVE]
        if "--jobs" in options:
            wanted = options["--jobs"].split(",")
            if len(wanted) == 1 and not any(str(j.job_id) == wanted[0] for j in jobs):
                return CommandResult(1, "", "slurm_load_jobs error: Invalid job id specified\n")
            jobs = [j for j in jobs if str(j.job_id) in wanted]
        if "--name" in options:
            names = options["--name"].split(",")
            jobs = [j for j in jobs if j.name in names]
        fields = [f.split(":", 1)[0] for f in options.get("--Format", "JobID:|").split(",")]
        lines = []
        for job in jobs:
            values = {
                "JobID": str(job.job_id),
                "JobArrayID": str(job.job_id),
                "State": job.state.split(" ", 1)[0],
                "Reason": "None",
                "exit_code": str(job.raw_status),
                "Name": job.name,
                "Comment": job.comment or "(null)",
                "NodeList": "" if job.state == "PENDING" else self.node_name,
                "WorkDir": job.work_dir,
            }
            lines.append("".join(f"{values[f]}|" for f in fields))
        return CommandResult(0, "".join(f"{line}\n" for line in lines), "")

    def _sacct(self, args: list[str]) -> CommandResult:
        if not self.accounting_available:
            return CommandResult(1, "", DATABASE_DOWN)
        options = self._options(args)
        jobs = [j for j in self.jobs.values() if j.job_id not in self.unaccounted]
        if "--jobs" in options:
            wanted = options["--jobs"].split(",")
            jobs = [j for j in jobs if str(j.job_id) in wanted]
        if "--name" in options:
            names = options["--name"].split(",")
            jobs = [j for j in jobs if j.name in names]
        fields = options.get("--format", "JobID,State").split(",")
        lines = []
        for job in jobs:
            rows = [(str(job.job_id), job.name, job.state, job.exit_code)]
            if "--allocations" not in options:
                rows += job.steps
            for step_id, name, state, exit_code in rows:
                values = {
                    "JobID": step_id,
                    "State": state,
                    "ExitCode": exit_code,
                    "JobName": name,
                    "NodeList": "None assigned" if job.state == "PENDING" else self.node_name,
                    "WorkDir": job.work_dir if step_id == str(job.job_id) else "",
                }
                lines.append("|".join(values[f] for f in fields))
        return CommandResult(0, "".join(f"{line}\n" for line in lines), "")

    def _scancel(self, args: list[str]) -> CommandResult:
        down = self._down("scancel")
        if down is not None:
            return down
        job = self.jobs.get(int(args[0])) if args[0].isdigit() else None
        if job is None:
            return CommandResult(
                1,
                "",
                f"scancel: error: Kill job error on job id {args[0]}: Invalid job id specified\n",
            )
        if job.state in _ACTIVE:
            self.end(job.job_id, "CANCELLED by 0", "0:0")
        return CommandResult(0, "", "")

    def _scontrol(self, args: list[str]) -> CommandResult:
        down = self._down("scontrol")
        if down is not None:
            return down
        names = [a for a in args if not a.startswith("-") and a not in ("show", "partition")]
        wanted = names or list(self.partitions)
        lines = []
        for name in wanted:
            if name not in self.partitions:
                return CommandResult(1, "", f"Partition {name} not found\n")
            cap = self.partitions[name]
            shown = "UNLIMITED" if cap is None else _slurm_time(cap)
            default = "YES" if name == self.default_partition else "NO"
            lines.append(f"PartitionName={name} Default={default} MaxTime={shown} State=UP")
        return CommandResult(0, "".join(f"{line}\n" for line in lines), "")

    def _sinfo(self, args: list[str]) -> CommandResult:
        """``sinfo --noheader --format=%P|%G``: the one node's GRES in every partition."""
        down = self._down("sinfo")
        if down is not None:
            return down
        if args != ["--noheader", "--format=%P|%G"]:
            return CommandResult(1, "", f"sinfo: fake answers one format, not {args!r}\n")
        gres = ",".join(
            f"gpu:{kind}:{count}" if kind else f"gpu:{count}" for kind, count in self.gpus.items()
        )
        lines = [
            f"{name}{'*' if name == self.default_partition else ''}|{gres or '(null)'}\n"
            for name in self.partitions
        ]
        return CommandResult(0, "".join(lines), "")

    def forget(self, job_id: str | int) -> None:
        """Purge a job from the controller and the database (a lost job)."""
        del self.jobs[self.job(job_id).job_id]

    def remove_scratch(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)


def _slurm_time(seconds: int) -> str:
    days, rest = divmod(seconds, 86400)
    clock = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{clock}" if days else clock
