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
- job arrays (the backend's array submit, ``--array=A-B[%M]``) as :mod:`.fake_jobs` says:
  elements ``ID_INDEX``, a row each in ``squeue --array`` and ``sacct``, ``scancel ID_INDEX``,
  ``max_array_size`` (``MaxArraySize``: an index at or past it is refused), and the submit
  limit counting every element; ``--hold`` keeps a job pending;
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
from pathlib import Path

from altar.backends.slurm.arrays import SUBMIT_ARRAY_PROGRAM
from altar.backends.slurm.commands import SUBMIT_PROGRAM
from altar.backends.slurm.fake_cluster import (
    array_jobs_dir,
    limits_text,
    partition_lines,
    placement_refusal,
    sinfo_lines,
)
from altar.backends.slurm.fake_jobs import (
    ACTIVE,
    FakeJob,
    named,
    parse_array,
    sacct_lines,
    squeue_lines,
)
from altar.backends.slurm.fake_script import (
    ReadScript,
    logical_lines,
    read_script,
    sbatch_directives,
)
from altar.backends.slurm.fake_scripting import ScriptedJobs
from altar.backends.slurm.limits import LIMITS_PROGRAM
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


class FakeLoginNode(ScriptedJobs, LocalLoginNode):
    """A single-node Slurm answering on this machine's filesystem (see the module doc)."""

    def __init__(
        self,
        *,
        partitions: dict[str, int | None] | None = None,
        default_partition: str = "debug",
        gpus: dict[str | None, int] | None = None,
        min_job_age: float = 300.0,
    ) -> None:
        LocalLoginNode.__init__(self)
        ScriptedJobs.__init__(self)
        self.partitions = partitions if partitions is not None else {"debug": None}
        self.default_partition = default_partition
        self.gpus = gpus if gpus is not None else {}
        self.min_job_age = min_job_age
        self.node_name = "localhost"
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
        #: The cluster's ``MaxArraySize`` (Slurm's default): an index must stay below it.
        self.max_array_size = 1001
        self._next_id = 1

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
        if program == "sh" and list(argv[1:3]) == ["-c", SUBMIT_ARRAY_PROGRAM]:
            return self._sbatch_array(argv[4], argv[5], argv[6], argv[7])
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
        return CommandResult(0, limits_text(self.max_submit_jobs), "")

    def _refuse(self, reason: str) -> CommandResult:
        return CommandResult(1, "", f"sbatch: error: Batch job submission failed: {reason}\n")

    def _admit(
        self, script: str, count: int
    ) -> CommandResult | tuple[dict[str, str | None], int | None]:
        """sbatch's checks of a script for ``count`` jobs: a refusal as Slurm prints it, or
        the script's directives and time limit."""
        down = self._down("sbatch")
        if down is not None:
            return down
        if self.refuse_next is not None:
            text, self.refuse_next = self.refuse_next, None
            return CommandResult(1, "", text)
        live = sum(1 for j in self.jobs.values() if j.state in ACTIVE)
        # a QOS's MaxSubmitJobsPerUser counts every element of an array
        if self.max_submit_jobs is not None and live + count > self.max_submit_jobs:
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
        placed = placement_refusal(
            options,
            partitions=self.partitions,
            default_partition=self.default_partition,
            gpus=self.gpus,
        )
        if isinstance(placed, str):
            return self._refuse(placed)
        return options, placed[0]

    def _new_job(
        self,
        job_dir: str,
        script: str,
        options: dict[str, str | None],
        limit: int | None,
        **array: int | str,
    ) -> FakeJob:
        job = FakeJob(
            job_id=self._next_id,
            name=options.get("--job-name") or "job.sbatch",
            comment=options.get("--comment") or "",
            work_dir=options.get("--chdir") or job_dir,
            script=script,
            directives=options,
            time_limit_s=limit,
            state="PENDING",
            held="--hold" in options,
            **array,  # type: ignore[arg-type]
        )
        self._next_id += 1
        self.jobs[job.job_id] = job
        return job

    def _lost_answer(self, printed: str) -> CommandResult:
        if self.timeout_after_sbatch:
            self.timeout_after_sbatch = False  # the job exists; the answer was lost
            return CommandResult(
                1,
                "",
                "sbatch: error: Batch job submission failed: Socket timed out on send/recv "
                "operation\n",
            )
        return CommandResult(0, printed, "")

    def _sbatch(self, job_dir: str, script: str) -> CommandResult:
        # The submit program places the script before sbatch runs, whatever sbatch answers.
        os.makedirs(job_dir, exist_ok=True)
        Path(job_dir, "job.sbatch").write_text(script)
        admitted = self._admit(script, 1)
        if isinstance(admitted, CommandResult):
            return admitted
        options, limit = admitted
        if "--array" in options:
            return self._refuse("fake: an array script goes through the array submit")
        job = self._new_job(job_dir, script, options, limit)
        if self.start_jobs and not job.held:  # the script's first act: its start record
            self.start(job.job_id)
        return self._lost_answer(f"{job.job_id}\n")

    def _sbatch_array(self, array_dir: str, mode: str, last: str, script: str) -> CommandResult:
        """The array submit program: the array's directory (the last part of its tokens,
        after those written before; its script), then one ``sbatch`` of ``--array=A-B[%M]``;
        element ``i`` runs line ``i + 1``'s task in that task's directory (the array
        script's ``cd``)."""
        os.makedirs(array_dir, exist_ok=True)
        part = Path(array_dir, "tokens.part")
        tokens = (part.read_text() if mode != "new" and part.is_file() else "") + last
        part.unlink(missing_ok=True)
        Path(array_dir, "tokens").write_text(tokens)
        Path(array_dir, "array.sbatch").write_text(script)
        options = sbatch_directives(script)
        spec = parse_array(options.get("--array") or "")
        if spec is None or max(spec.indices) >= self.max_array_size:
            return self._refuse("Invalid job array specification")
        admitted = self._admit(script, len(spec.indices))
        if isinstance(admitted, CommandResult):
            return admitted
        options, limit = admitted
        jobs_dir = array_jobs_dir(script)
        listed = [line.split(" ", 1)[0] for line in tokens.splitlines()]
        array_id = self._next_id
        self.array_limits[array_id] = spec.limit
        for index in spec.indices:
            token = listed[index] if index < len(listed) else ""
            record_dir = f"{jobs_dir}/{token}" if token else array_dir
            task_script = Path(record_dir, "job.sbatch")
            self._new_job(
                array_dir,
                task_script.read_text() if task_script.is_file() else script,
                options,
                limit,
                array_id=array_id,
                index=index,
                record_dir=record_dir,
            )
        self._start_throttled(array_id)
        return self._lost_answer(f"{array_id}\n")

    def _visible(self, job: FakeJob) -> bool:
        if not job.in_queue:
            return False
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
            jobs = [j for j in jobs if j.state in ACTIVE]
        if "--jobs" in options:
            wanted = options["--jobs"].split(",")
            # a lone unknown id is an error; an array's unknown index prints nothing
            base = wanted[0].split("_", 1)[0]
            if len(wanted) == 1 and not any(named(j, [wanted[0], base]) for j in jobs):
                return CommandResult(1, "", "slurm_load_jobs error: Invalid job id specified\n")
            jobs = [j for j in jobs if named(j, wanted)]
        if "--name" in options:
            names = options["--name"].split(",")
            jobs = [j for j in jobs if j.name in names]
        fields = [f.split(":", 1)[0] for f in options.get("--Format", "JobID:|").split(",")]
        lines = squeue_lines(
            jobs,
            fields,
            per_element="--array" in options,
            node_name=self.node_name,
            limits=self.array_limits,
        )
        return CommandResult(0, "".join(f"{line}\n" for line in lines), "")

    def _sacct(self, args: list[str]) -> CommandResult:
        if not self.accounting_available:
            return CommandResult(1, "", DATABASE_DOWN)
        options = self._options(args)
        jobs = [j for j in self.jobs.values() if j.job_id not in self.unaccounted]
        if "--jobs" in options:
            jobs = [j for j in jobs if named(j, options["--jobs"].split(","))]
        if "--name" in options:
            names = options["--name"].split(",")
            jobs = [j for j in jobs if j.name in names]
        fields = options.get("--format", "JobID,State").split(",")
        lines = sacct_lines(
            jobs,
            fields,
            allocations="--allocations" in options,
            node_name=self.node_name,
            limits=self.array_limits,
        )
        return CommandResult(0, "".join(f"{line}\n" for line in lines), "")

    def _scancel(self, args: list[str]) -> CommandResult:
        down = self._down("scancel")
        if down is not None:
            return down
        wanted = args[0]
        base, _, index = wanted.partition("_")
        jobs = [j for j in self.jobs.values() if named(j, [wanted])]
        if not jobs and not (index and any(j.array_id == int(base) for j in self.jobs.values())):
            return CommandResult(
                1,
                "",
                f"scancel: error: Kill job error on job id {wanted}: Invalid job id specified\n",
            )
        for job in jobs:  # an array's unknown index: nothing to do, and no error (22.05)
            if job.state not in ACTIVE:
                continue
            if job.array_id is not None and job.state == "PENDING" and index:
                # a pending element cancelled by its own id leaves no row in squeue nor sacct
                job.in_queue, job.unaccounted = False, True
            if job.started:  # the script's TERM trap stops the task and records it
                self.write_record(job.shown, 143, signalled=True)
            self.end(job.shown, "CANCELLED by 0", "0:0")
        return CommandResult(0, "", "")

    def _scontrol(self, args: list[str]) -> CommandResult:
        down = self._down("scontrol")
        if down is not None:
            return down
        if args[-2:] == ["show", "config"]:
            return CommandResult(
                0, f"ClusterName = fake\nMaxArraySize = {self.max_array_size}\n", ""
            )
        names = [a for a in args if not a.startswith("-") and a not in ("show", "partition")]
        lines = partition_lines(
            names, partitions=self.partitions, default_partition=self.default_partition
        )
        if isinstance(lines, str):
            return CommandResult(1, "", f"Partition {lines} not found\n")
        return CommandResult(0, "".join(f"{line}\n" for line in lines), "")

    def _sinfo(self, args: list[str]) -> CommandResult:
        """``sinfo --noheader --format=%P|%G``: the one node's GRES in every partition."""
        down = self._down("sinfo")
        if down is not None:
            return down
        if args != ["--noheader", "--format=%P|%G"]:
            return CommandResult(1, "", f"sinfo: fake answers one format, not {args!r}\n")
        return CommandResult(
            0, sinfo_lines(list(self.partitions), self.default_partition, self.gpus), ""
        )

    def forget(self, job_id: str | int) -> None:
        """Purge a job from the controller and the database (a lost job)."""
        del self.jobs[self.job(job_id).job_id]

    def remove_scratch(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)
