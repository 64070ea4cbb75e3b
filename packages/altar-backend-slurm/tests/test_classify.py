"""Reading squeue/sacct answers, with rows as Slurm 22.05 printed them on the test machine."""

from __future__ import annotations

import pytest
from altar.backends.slurm.classify import (
    from_accounting,
    from_queue,
    from_queue_alone,
    is_outage,
    no_such_job,
    parse_exit_record,
    parse_sacct,
    parse_squeue,
)
from altar.backends.slurm.commands import parse_duration
from altar.execution import TaskState

SQUEUE = (
    '8|FAILED|NonZeroExitCode|768|probe-a|altar {"a": "b c"}|localhost|/tmp/slurmprobe|\n'
    "9|FAILED|NonZeroExitCode|35072|m.sbatch|(null)|localhost|/tmp/a|b dir|\n"
    "10|RUNNING|None|0|x|(null)|localhost|/w|\n"
    "11|PENDING|Resources|0|x|(null)||/w|\n"
    "12|COMPLETED|None|0|x|(null)|localhost|/w|\n"
)


def test_parse_squeue_keeps_separators_in_the_last_field() -> None:
    rows = parse_squeue(SQUEUE)
    assert [r.job_id for r in rows] == ["8", "9", "10", "11", "12"]
    assert rows[1].work_dir == "/tmp/a|b dir"
    assert rows[0].exit_status == 768
    assert rows[1].comment == ""


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ("PENDING", TaskState.PENDING),
        ("CONFIGURING", TaskState.PENDING),
        ("RUNNING", TaskState.RUNNING),
        ("COMPLETING", TaskState.RUNNING),
        ("COMPLETED", TaskState.SUCCEEDED),
        ("SOMETHING_NEW", TaskState.PENDING),
    ],
)
def test_queue_states(state: str, expected: TaskState) -> None:
    (row,) = parse_squeue(f"1|{state}|None|0|n|(null)|localhost|/w|\n")
    observed = from_queue(row)
    assert observed is not None
    assert observed.state is expected


def test_queue_leaves_a_failed_job_to_sacct_for_its_steps() -> None:
    (row,) = parse_squeue("1|FAILED|NonZeroExitCode|256|n|(null)|localhost|/w|\n")
    assert from_queue(row) is None


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        ("TIMEOUT", "timeout"),
        ("CANCELLED", "cancelled"),
        ("OUT_OF_MEMORY", "oom_killed"),
        ("PREEMPTED", "job_failed"),
        ("NODE_FAIL", "job_failed"),
        ("DEADLINE", "job_failed"),
    ],
)
def test_queue_settles_endings_that_need_no_steps(state: str, reason: str) -> None:
    (row,) = parse_squeue(f"1|{state}|None|0|n|(null)|localhost|/w|\n")
    observed = from_queue(row)
    assert observed is not None
    assert observed.failure is not None
    assert observed.failure.reason == reason


def test_queue_alone_reads_the_raw_exit_status() -> None:
    row = parse_squeue(SQUEUE)[1]
    observed = from_queue_alone(row)
    assert observed.failure is not None
    assert (observed.failure.reason, observed.failure.exit_code) == ("exit_137", 137)


def _acct(text: str, job: str = "5") -> tuple[str, bool, int | None]:
    observed = from_accounting(job, parse_sacct(text))
    assert observed is not None
    if observed.failure is None:
        return observed.state.value, False, None
    return observed.failure.reason, observed.failure.deterministic, observed.failure.exit_code


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        ("5|COMPLETED|0:0|j|/w\n5.batch|COMPLETED|0:0|batch|\n", ("succeeded", False, None)),
        ("5|FAILED|3:0|j|/w\n5.batch|FAILED|3:0|batch|\n", ("exit_3", True, 3)),
        ("5|TIMEOUT|0:0|j|/w\n5.batch|CANCELLED|0:15|batch|\n", ("timeout", False, None)),
        (
            "5|OUT_OF_MEMORY|0:125|j|/w\n5.batch|OUT_OF_MEMORY|0:125|batch|\n",
            ("oom_killed", False, None),
        ),
        # linuxproc + OverMemoryKill: the job reads FAILED 0:9, the step OUT_OF_MEMORY
        ("5|FAILED|0:9|j|/w\n5.batch|OUT_OF_MEMORY|0:9|batch|\n", ("oom_killed", False, None)),
        ("5|FAILED|9:0|j|/w\n5.0|COMPLETED|0:0|altar-oom-killed|\n", ("oom_killed", False, None)),
        (
            "5|FAILED|1:0|j|/w\n5.0|COMPLETED|0:0|altar-input-digest-mismatch|\n",
            ("input_digest_mismatch", True, None),
        ),
        ("5|CANCELLED by 0|0:0|j|/w\n", ("cancelled", False, None)),
        ("5|PREEMPTED|0:0|j|/w\n5.batch|CANCELLED|0:15|batch|\n", ("job_failed", False, None)),
        ("5|NODE_FAIL|0:0|j|/w\n5.batch|CANCELLED||batch|\n", ("job_failed", False, None)),
        ("5|BOOT_FAIL|0:0|j|/w\n", ("job_failed", False, None)),
        # requeued by Slurm: the same job, waiting again (one attempt, not a second one)
        ("5|REQUEUED|0:0|j|/w\n5.batch|CANCELLED|0:15|batch|\n", ("pending", False, None)),
        ("5|FAILED|0:9|j|/w\n", ("job_failed", False, None)),
        ("5|UNKNOWN|0:0|j|/w\n", ("job_failed", False, None)),
        ("5|RUNNING|0:0|j|/w\n", ("running", False, None)),
        ("5|PENDING|0:0|j|/w\n", ("pending", False, None)),
    ],
)
def test_accounting_states(rows: str, expected: tuple[str, bool, int | None]) -> None:
    assert _acct(rows) == expected


def test_accounting_ignores_other_jobs_rows_and_knows_when_it_knows_nothing() -> None:
    rows = parse_sacct("50|FAILED|3:0|j|/w\n5|COMPLETED|0:0|j|/w\n")
    observed = from_accounting("5", rows)
    assert observed is not None
    assert observed.state is TaskState.SUCCEEDED
    assert from_accounting("6", rows) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "altar-exit/1 status=200 start=1700000000 end=1700000003\n",
            (200, 1700000000, 1700000003),
        ),
        ("altar-exit/1 status=0 start= end=5", (0, None, 5)),
        ("altar-exit/1 status=256 start=1 end=2", None),
        ("altar-exit/1 status=-1", None),
        ("altar-exit/2 status=1", None),  # a later format is left to Slurm's own view
        ("", None),
        ("altar-exit/1 start=1", None),  # torn: no status
    ],
)
def test_exit_records(text: str, expected: tuple[int, int | None, int | None] | None) -> None:
    record = parse_exit_record(text)
    assert (None if record is None else (record.status, record.start, record.end)) == expected


def test_the_jobs_record_beats_sacct_modulo_128() -> None:
    # Slurm 22.05's sacct for `exit 200`: 72:0. The record keeps 200.
    rows = parse_sacct("5|FAILED|72:0|j|/w\n5.batch|FAILED|72:0|batch|\n")
    record = parse_exit_record("altar-exit/1 status=200 start=1 end=2")
    observed = from_accounting("5", rows, record)
    assert observed is not None
    assert observed.failure is not None
    assert (observed.failure.reason, observed.failure.exit_code) == ("exit_200", 200)
    killed = from_accounting("5", rows, parse_exit_record("altar-exit/1 status=137"))
    assert killed is not None
    assert killed.failure is not None
    assert (killed.failure.reason, killed.failure.deterministic) == ("exit_137", False)


@pytest.mark.parametrize(
    "stderr",
    [
        "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n",
        "squeue: error: Socket timed out on send/recv operation\n",
        "sbatch: error: Batch job submission failed: Transient error\n",
        "sacct: error: Problem talking to the database: Connection refused\n",
    ],
)
def test_outage_texts(stderr: str) -> None:
    assert is_outage(stderr)


def test_an_unknown_job_is_not_an_outage() -> None:
    text = "slurm_load_jobs error: Invalid job id specified\n"
    assert no_such_job(text)
    assert not is_outage(text)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("UNLIMITED", None),
        ("INFINITE", None),
        ("30", 1800),
        ("30:15", 1815),
        ("2:00:00", 7200),
        ("1-00:00:00", 86400),
        ("2-12", 216000),
        ("1-02:03", 93780),
    ],
)
def test_slurm_durations(text: str, seconds: int | None) -> None:
    assert parse_duration(text) == seconds


# -- provider endings: Slurm ended the job, not the task ---------------------------------------


@pytest.mark.parametrize(
    ("state", "ending", "words"),
    [
        ("PREEMPTED", "preempted", "was preempted on node localhost"),
        ("NODE_FAIL", "node_lost", "node localhost failed under it"),
        ("BOOT_FAIL", "node_lost", "node localhost failed to boot"),
    ],
)
def test_queue_reads_slurms_own_endings_as_provider_endings(
    state: str, ending: str, words: str
) -> None:
    # squeue as 22.05 printed a preempted job (raw status 15: the batch step's SIGTERM)
    (row,) = parse_squeue(f"7|{state}|None|15|n|(null)|localhost|/w|\n")
    observed = from_queue(row)
    assert observed is not None
    failure = observed.failure
    assert failure is not None
    assert (failure.reason, failure.provider_ending, failure.deterministic) == (
        "job_failed",
        ending,
        False,
    )
    assert failure.exit_code is None
    assert failure.detail is not None
    assert words in failure.detail
    assert f"Slurm state {state}" in failure.detail


@pytest.mark.parametrize("status", [137, 143, 0, 3])
def test_a_record_the_trap_wrote_does_not_turn_a_preemption_into_an_exit(status: int) -> None:
    # The docker/podman script traps TERM, kills its container and may still write a record
    # before Slurm's KillWait ends it: Slurm's state decides, not that status.
    record = parse_exit_record(f"altar-exit/1 status={status} start=1 end=2")
    rows = parse_sacct("5|PREEMPTED|0:0|j|/w\n5.batch|CANCELLED|0:15|batch|\n")
    for observed in (
        from_accounting("5", rows, record),
        from_queue_alone(parse_squeue("5|PREEMPTED|None|15|n|(null)|n1|/w|\n")[0], record),
    ):
        assert observed is not None
        assert observed.failure is not None
        assert observed.failure.provider_ending == "preempted"
        assert not observed.failure.reason.startswith("exit_")


def test_accounting_names_no_node_it_does_not_know() -> None:
    observed = from_accounting("5", parse_sacct("5|NODE_FAIL|0:0|j|/w\n"))
    assert observed is not None
    assert observed.failure is not None
    assert observed.failure.provider_ending == "node_lost"
    assert observed.failure.detail == (
        "job 5: its node failed under it (Slurm state NODE_FAIL); the task itself did not fail"
    )


@pytest.mark.parametrize("state", ["DEADLINE", "TIMEOUT", "CANCELLED by 0", "FAILED", "UNKNOWN"])
def test_other_endings_are_not_provider_endings(state: str) -> None:
    observed = from_accounting("5", parse_sacct(f"5|{state}|0:9|j|/w\n"))
    assert observed is not None
    assert observed.failure is not None
    assert observed.failure.provider_ending is None


def test_a_requeued_job_reads_pending_from_the_queue() -> None:
    (row,) = parse_squeue("5|REQUEUED|BeginTime|0|n|(null)||/w|\n")
    observed = from_queue(row)
    assert observed is not None
    assert (observed.state, observed.failure) == (TaskState.PENDING, None)


def test_sacct_rows_name_the_node_and_keep_a_bar_in_the_work_dir() -> None:
    (row,) = parse_sacct("5|PREEMPTED|0:0|j|node-7|/w/a|b\n")
    assert (row.nodes, row.work_dir) == ("node-7", "/w/a|b")
    observed = from_accounting("5", [row])
    assert observed is not None
    assert observed.failure is not None
    assert "node node-7" in (observed.failure.detail or "")
