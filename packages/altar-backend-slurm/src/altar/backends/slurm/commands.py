"""The Slurm commands the backend runs on the login node, and what their answers mean.

Each function is one remote command (one ssh round trip over the multiplexed connection):
submit (place the script and ``sbatch`` it), ``squeue`` and ``sacct`` for any number of jobs,
``scancel``, the partition's ``MaxTime``, a log tail, and removing a job's scratch directory.
An answer that says Slurm could not be reached raises
:class:`~altar.execution.BackendUnavailableError`; it is never read as a job state.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from altar.backends.slurm.classify import (
    SACCT_FIELDS,
    SQUEUE_FIELDS,
    AcctRow,
    QueueRow,
    is_outage,
    no_such_job,
    parse_sacct,
    parse_squeue,
)
from altar.backends.slurm.render import EXIT_RECORD, START_RECORD
from altar.backends.slurm.runtime import CommandResult, LoginNode
from altar.execution import (
    BackendUnavailableError,
    ProviderLimitError,
    UnsupportedCapabilityError,
)

__all__ = [
    "DEFAULT_QUERY_TIMEOUT_S",
    "LOOKUP_WINDOW",
    "MAX_LISTED_JOBS",
    "SUBMIT_PROGRAM",
    "SlurmRefusedError",
    "accounting",
    "bounded",
    "cancel",
    "max_time_s",
    "parse_duration",
    "parse_gres",
    "partition_gres",
    "queue",
    "read_records",
    "remove_dir",
    "submit",
    "submit_limit",
    "tail",
]

#: How far back ``sacct --name`` looks for an earlier job of the same submission.
LOOKUP_WINDOW = "now-30days"

#: Places the batch script in the job's directory and submits it, in one round trip.
#: ``$1`` is the directory, ``$2`` the script text (both single words, never parsed).
#: sbatch runs with a cleared environment (``env -i``, keeping only what finding programs and
#: Slurm needs), so nothing of the submitting process (tokens, keys) is stored with the job,
#: and the job need not load a login environment (``--export=NONE`` runs a login shell per
#: job, about a second each).
SUBMIT_PROGRAM = (
    'set -eu; mkdir -p -- "$1"; printf "%s" "$2" > "$1/job.sbatch"; '
    'exec env -i PATH="$PATH" HOME="${HOME:-/}" ${USER:+"USER=$USER"} '
    '${SLURM_CONF:+"SLURM_CONF=$SLURM_CONF"} sbatch --parsable "$1/job.sbatch"'
)

_JOB_ID = re.compile(r"\d+")
_GRES_REFUSAL = re.compile(r"gres|generic resource", re.IGNORECASE)
#: The limit sbatch names on the line before "Job violates accounting/QOS policy"
#: (``sbatch: error: QOSMaxSubmitJobPerUserLimit``, as 22.05 prints it).
_NAMED_LIMIT = re.compile(r"\b((?:QOS|Assoc)\w*Limit)\b")
_POLICY = "Job violates accounting/QOS policy"
#: Refusals that mean "the controller cannot take a job now" (its MaxJobCount is reached, or
#: it is busy); sbatch itself retries these for about two minutes before it says so.
_NOT_NOW = re.compile(
    r"Slurm temporarily unable to accept job|Slurm job queue full|"
    r"Resource temporarily unavailable|Unable to create job record|MaxJobCount",
    re.IGNORECASE,
)


class SlurmRefusedError(RuntimeError):
    """Slurm understood a request and refused it (not an outage)."""


def _raise_outage(what: str, result: CommandResult) -> None:
    if is_outage(result.stderr):
        raise BackendUnavailableError(f"{what}: Slurm cannot be reached: {result.stderr.strip()}")


def raise_outage(what: str, result: CommandResult) -> None:
    """Raise the outage ``result`` shows (an unreachable controller), if it shows one."""
    _raise_outage(what, result)


def submit_limit(stderr: str, *, submit_limited: bool = False) -> ProviderLimitError | None:
    """The "not now" in an sbatch refusal, or None when it is no limit that may pass.

    A submit limit (``QOSMaxSubmitJobPerUserLimit``, ``AssocMaxSubmitJobLimit``, any
    ``...SubmitJob...Limit``) and a controller that cannot take jobs now (``MaxJobCount``,
    "Resource temporarily unavailable") pass once jobs end. Another named limit (a QOS's
    ``MaxWall`` with ``DenyOnLimit``) never passes for this job. "Job violates accounting/QOS
    policy" without a name is a submit limit only when the backend knows one applies
    (``submit_limited``, from ``sacctmgr``).
    """
    text = " ".join(stderr.split())
    named = _NAMED_LIMIT.search(text)
    said = text.removeprefix("sbatch: error: ")
    if named is not None:
        limit = named.group(1)
        if "SubmitJob" not in limit:
            return None
        return ProviderLimitError(
            f"sbatch: the cluster's {limit} holds further jobs back until some of yours "
            f"end ({said})",
            limit=limit,
        )
    if _POLICY in text and submit_limited:
        return ProviderLimitError(
            f"sbatch: the cluster's submit limit holds further jobs back ({said})",
            limit="submit limit",
        )
    if _NOT_NOW.search(text):
        return ProviderLimitError(
            f"sbatch: the Slurm controller takes no more jobs for now ({said})",
            limit="MaxJobCount",
        )
    return None


def submit(
    node: LoginNode,
    job_dir: str,
    script: str,
    *,
    gpu: bool = False,
    submit_limited: bool = False,
) -> str:
    """Place ``script`` in ``job_dir`` and sbatch it; the new job's id.

    A refused job leaves no directory behind, a refusal for now (a limit: raises
    :class:`~altar.execution.ProviderLimitError`) neither: the controller made no job of it.
    After an outage (``Socket timed out``) the directory stays: the job may exist after all
    (the resubmit with the same key finds and adopts it) and needs its working directory.
    """
    result = node.run(["sh", "-c", SUBMIT_PROGRAM, "altar-submit", job_dir, script])
    if not result.ok:
        limited = submit_limit(result.stderr, submit_limited=submit_limited)
        if limited is not None:
            remove_dir(node, job_dir)
            raise limited
        _raise_outage("sbatch", result)
        remove_dir(node, job_dir)
        message = result.stderr.strip() or f"exit status {result.returncode}"
        if gpu and _GRES_REFUSAL.search(message):
            raise UnsupportedCapabilityError(
                f"the cluster refused the GPU request: {message}; a GPU task is never run "
                "on CPU instead",
                capability="gpu",
            )
        raise UnsupportedCapabilityError(f"sbatch refused the job: {message}")
    job_id = result.stdout.strip().split(";", 1)[0]
    if not _JOB_ID.fullmatch(job_id):
        raise SlurmRefusedError(f"sbatch printed no job id: {result.stdout.strip()!r}")
    return job_id


#: How long a query (squeue, sacct, scontrol, scancel) may take before it counts as an outage.
#: With slurmctld down, squeue itself retries for about 18 s before it says so.
DEFAULT_QUERY_TIMEOUT_S = 20.0
#: More job ids than this are not listed on the command line.
MAX_LISTED_JOBS = 5000
#: ``timeout``'s exit status when it stopped the command (124), or killed it after the grace.
_TIMED_OUT = (124, 137)


def bounded(argv: Sequence[str], timeout_s: float | None) -> list[str]:
    """``argv`` under coreutils ``timeout`` on the login node (None: unbounded)."""
    if timeout_s is None:
        return list(argv)
    return ["timeout", "--kill-after=2", f"{timeout_s:g}", *argv]


def _raise_timeout(what: str, result: CommandResult, timeout_s: float | None) -> None:
    if timeout_s is not None and result.returncode in _TIMED_OUT:
        raise BackendUnavailableError(f"{what} did not answer within {timeout_s:g} s")


def queue(
    node: LoginNode,
    *,
    job_ids: Sequence[str] = (),
    names: Sequence[str] = (),
    timeout_s: float | None = DEFAULT_QUERY_TIMEOUT_S,
) -> list[QueueRow]:
    """One ``squeue`` for the given jobs (or, by name, this user's jobs), finished ones too.

    Past :data:`MAX_LISTED_JOBS` ids the list would not fit one argument (``MAX_ARG_STRLEN``),
    so this user's jobs are listed instead and filtered here: still one command.
    """
    if len(job_ids) > MAX_LISTED_JOBS:
        wanted = set(job_ids)
        rows = queue(node, timeout_s=timeout_s)
        return [row for row in rows if row.job_id in wanted]
    # --array: each element of an array its own row (``ID_INDEX``), pending ones too
    argv = ["squeue", "--noheader", "--array", "--states=all", f"--Format={SQUEUE_FIELDS}"]
    if job_ids:
        argv.append(f"--jobs={','.join(job_ids)}")
    if names:
        argv += ["--me", f"--name={','.join(names)}"]
    if not job_ids and not names:
        argv.append("--me")
    result = node.run(bounded(argv, timeout_s))
    if not result.ok:
        _raise_timeout("squeue", result, timeout_s)
        if no_such_job(result.stderr):
            return []  # the one id asked about is unknown to the controller
        _raise_outage("squeue", result)
        raise BackendUnavailableError(f"squeue failed: {result.stderr.strip()}")
    return parse_squeue(result.stdout)


def accounting(
    node: LoginNode,
    *,
    job_ids: Sequence[str] = (),
    names: Sequence[str] = (),
    steps: bool = True,
    timeout_s: float | None = DEFAULT_QUERY_TIMEOUT_S,
) -> list[AcctRow]:
    """One ``sacct`` for the given jobs (with their steps), or jobs by name in the window."""
    argv = ["sacct", "--noheader", "--parsable2", f"--format={SACCT_FIELDS}"]
    if not steps:
        argv.append("--allocations")
    if job_ids:
        argv.append(f"--jobs={','.join(job_ids)}")
    else:
        argv.append(f"--starttime={LOOKUP_WINDOW}")
        if names:
            argv.append(f"--name={','.join(names)}")
    result = node.run(bounded(argv, timeout_s))
    if not result.ok:
        _raise_timeout("sacct", result, timeout_s)
        _raise_outage("sacct", result)
        raise BackendUnavailableError(f"sacct failed: {result.stderr.strip()}")
    return parse_sacct(result.stdout)


def cancel(
    node: LoginNode, job_id: str, *, timeout_s: float | None = DEFAULT_QUERY_TIMEOUT_S
) -> bool:
    """``scancel`` one job; True when Slurm accepted it. A job that already ended or is
    unknown is not an error (False)."""
    result = node.run(bounded(["scancel", job_id], timeout_s))
    if not result.ok and not no_such_job(result.stderr):
        _raise_timeout("scancel", result, timeout_s)
        _raise_outage("scancel", result)
        if "already completing or completed" not in result.stderr:
            raise SlurmRefusedError(f"scancel {job_id} failed: {result.stderr.strip()}")
    return result.ok


def parse_duration(text: str) -> int | None:
    """Seconds in a Slurm time (``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH[:MM[:SS]]``);
    None for ``UNLIMITED``/``INFINITE``."""
    text = text.strip()
    if text.upper() in ("UNLIMITED", "INFINITE", "NONE"):
        return None
    days = 0
    if "-" in text:
        head, _, text = text.partition("-")
        days = int(head)
        parts = [int(p) for p in text.split(":")]
        parts += [0] * (3 - len(parts))
        hours, minutes, seconds = parts
    else:
        parts = [int(p) for p in text.split(":")]
        if len(parts) == 1:
            hours, minutes, seconds = 0, parts[0], 0
        elif len(parts) == 2:
            hours, minutes, seconds = 0, parts[0], parts[1]
        else:
            hours, minutes, seconds = parts
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def max_time_s(
    node: LoginNode, partition: str | None, *, timeout_s: float | None = DEFAULT_QUERY_TIMEOUT_S
) -> int | None:
    """The partition's ``MaxTime`` in seconds (the default partition without a name)."""
    argv = ["scontrol", "--oneliner", "show", "partition"]
    if partition is not None:
        argv.append(partition)
    result = node.run(bounded(argv, timeout_s))
    if not result.ok:
        _raise_timeout("scontrol", result, timeout_s)
        _raise_outage("scontrol", result)
        # scontrol says "Partition nope not found" on stdout, with nothing on stderr.
        said = " ".join((result.stderr.strip() or result.stdout.strip() or "no answer").split())
        raise UnsupportedCapabilityError(
            f"partition {partition or '(default)'!r}: Slurm says {said!r}; set partition to "
            "one `sinfo --summarize` lists, or leave it out for the cluster's default"
        )
    for line in result.stdout.splitlines():
        fields = dict(word.partition("=")[::2] for word in line.split())
        if partition is None and fields.get("Default") != "YES":
            continue
        if "MaxTime" in fields:
            return parse_duration(fields["MaxTime"])
    if partition is None:
        return None  # no default partition: sbatch will say what is wrong
    raise UnsupportedCapabilityError(f"Slurm reports no partition {partition!r}")


_GRES_NOTE = re.compile(r"\([^)]*\)")  # "(S:0-1)": the sockets a GRES is bound to


def parse_gres(text: str) -> dict[tuple[str, str | None], int]:
    """``gpu:a100:4(S:0-1),gpu:2`` -> {("gpu", "a100"): 4, ("gpu", None): 2}; ``(null)``: {}."""
    found: dict[tuple[str, str | None], int] = {}
    for item in _GRES_NOTE.sub("", text.strip()).split(","):
        parts = item.strip().split(":")
        if not parts[0] or parts[0] == "(null)":
            continue
        count = 1
        if len(parts) > 1 and parts[-1].isdigit():
            count = int(parts.pop())
        kind = parts[1] if len(parts) > 1 else None
        found[(parts[0], kind)] = max(found.get((parts[0], kind), 0), count)
    return found


def partition_gres(
    node: LoginNode, partition: str | None, *, timeout_s: float | None = DEFAULT_QUERY_TIMEOUT_S
) -> list[dict[tuple[str, str | None], int]]:
    """The GRES of each group of the partition's nodes (the default partition without a
    name), from one ``sinfo``; empty when the partition has no nodes."""
    argv = ["sinfo", "--noheader", "--format=%P|%G"]
    result = node.run(bounded(argv, timeout_s))
    if not result.ok:
        _raise_timeout("sinfo", result, timeout_s)
        _raise_outage("sinfo", result)
        raise BackendUnavailableError(f"sinfo failed: {result.stderr.strip()}")
    groups = []
    for line in result.stdout.splitlines():
        name, _, gres = line.partition("|")
        default = name.endswith("*")
        if (partition is None and default) or name.rstrip("*") == partition:
            groups.append(parse_gres(gres))
    return groups


def tail(node: LoginNode, paths: Sequence[str], lines: int) -> str:
    """The last ``lines`` of each file, concatenated (missing files are skipped)."""
    result = node.run(["tail", "-q", "-n", str(lines), "--", *paths])
    return result.stdout


#: Written into a job's directory once ``scancel`` accepted the cancel, so that every backend
#: instance reading the records sees it without asking the queue (a job cancelled before it
#: started writes no record of its own).
CANCEL_RECORD = "cancelled"
CANCEL_RECORD_VERSION = "altar-cancel/1"
RECORD_FILES = (EXIT_RECORD, START_RECORD, CANCEL_RECORD)
_MARK_CANCELLED = (
    'cd -- "$1" 2>/dev/null || exit 0; '
    f'printf "{CANCEL_RECORD_VERSION}\\n" >{CANCEL_RECORD}.tmp && '
    f"mv -f {CANCEL_RECORD}.tmp {CANCEL_RECORD}"
)


def mark_cancelled(node: LoginNode, job_dir: str) -> None:
    """Record in ``job_dir`` (if it still exists) that this job's cancel was accepted."""
    node.run(["sh", "-c", _MARK_CANCELLED, "altar-cancelled", job_dir])


#: Prints ``TOKEN/FILE:first line`` for each named record under the jobs directory ($1).
_READ_NAMED = 'cd -- "$1" 2>/dev/null || exit 0; shift; exec grep -H -s -m 1 "" -- "$@"'
#: The same for every job directory there, when naming them all would not fit one command:
#: ``find`` passes the files to grep in batches that fit.
_READ_ALL = (
    'cd -- "$1" 2>/dev/null || exit 0; exec find . -mindepth 2 -maxdepth 2 -type f '
    f"\\( -name {EXIT_RECORD} -o -name {START_RECORD} -o -name {CANCEL_RECORD} \\) "
    '-exec grep -H -s -m 1 "" -- {} +'
)
#: Past this much path text, records are found by listing instead of by name (an ssh
#: command is one argument of the far shell, at most ``MAX_ARG_STRLEN``, 128 KiB).
NAMED_RECORDS_BUDGET = 64 * 1024


def read_records(
    node: LoginNode, jobs_dir: str, tokens: Sequence[str]
) -> dict[str, dict[str, str]]:
    """The exit, start and cancel records of the given job directories, in one command:
    token -> {file name: its first line}; a job with neither is absent.

    A record is written to a temporary name and renamed, so a line read here is whole.
    """
    if not tokens:
        return {}
    names = [f"{token}/{name}" for token in tokens for name in RECORD_FILES]
    if sum(len(n) + 3 for n in names) <= NAMED_RECORDS_BUDGET:
        argv = ["sh", "-c", _READ_NAMED, "altar-records", jobs_dir, *names]
    else:
        argv = ["sh", "-c", _READ_ALL, "altar-records", jobs_dir]
    result = node.run(argv)
    wanted = set(tokens)
    found: dict[str, dict[str, str]] = {}
    for line in result.stdout.splitlines():
        path, sep, text = line.partition(":")  # tokens and file names hold no ':'
        token, _, name = path.removeprefix("./").partition("/")
        if sep and token in wanted and name in RECORD_FILES:
            found.setdefault(token, {}).setdefault(name, text)
    return found


#: Moves a finished job's logs and exit record ($1: job dir) to $2, then removes the job dir.
_KEEP_LOGS = (
    'mkdir -p -- "$2" && for f in stdout stderr exit-status; do '
    'if [ -e "$1/$f" ]; then mv -f -- "$1/$f" "$2/$f" || exit 1; fi; done && rm -rf -- "$1"'
)


def keep_logs_and_remove(node: LoginNode, job_dir: str, logs_dir: str) -> None:
    """Remove a finished job's directory, keeping its stdout, stderr and exit record in
    ``logs_dir`` for ``altar logs``. A kill in between leaves both or a complete copy."""
    node.run(["sh", "-c", _KEEP_LOGS, "sh", job_dir, logs_dir])


_REMOVE_FINISHED_ARRAYS = (
    'for a in "$1"/*/; do [ -f "$a/tokens" ] || continue; live=0; '
    'while read -r token rest; do if [ -e "$2/$token" ]; then live=1; break; fi; '
    'done < "$a/tokens"; if [ "$live" = 0 ]; then rm -rf -- "$a"; fi; done'
)


def remove_finished_arrays(node: LoginNode, arrays_dir: str, jobs_dir: str) -> None:
    """Remove each array directory none of whose tasks keeps a job directory.

    A task's job directory is written before its array's ``tokens``, and removed only by
    cleanup once the task is over, so an array being submitted or still running is kept.
    """
    node.run(["sh", "-c", _REMOVE_FINISHED_ARRAYS, "sh", arrays_dir, jobs_dir])


def read_text(node: LoginNode, path: str) -> str | None:
    """A whole file's text, or None when it cannot be read."""
    result = node.run(["cat", "--", path])
    return result.stdout if result.ok else None


def remove_dir(node: LoginNode, path: str) -> None:
    node.run(["rm", "-rf", "--", path])
