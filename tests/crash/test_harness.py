"""The crash harness itself: it must see a double execution, a stale journal line, a leftover."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from crashkit.journalview import JournalView
from crashkit.ledger import read_ledger
from crashkit.leftovers import journal_handles, temporary_files
from crashkit.plan import build_plan
from crashkit.schedule import PHASES, make_schedule

MARK = "altar-crash-1-00000000aa"


def test_the_ledger_counts_a_second_start_of_a_task_as_a_double_unless_a_retry_explains_it(
    tmp_path: Path,
) -> None:
    ledger = tmp_path / "ledger.log"
    ledger.write_text(
        f"start f00 aaaa 10 {MARK}\n"
        f"start f01 bbbb 11 {MARK}\n"
        "end f00 aaaa\n"
        f"start f00 cccc 12 {MARK}\n"
        "start f02 dddd 13 another-plan\n"  # another run's line: not ours
        "end f01 zzzz\n"  # an end without its start does not complete anything
    )
    executions = read_ledger(ledger, MARK)
    assert executions.total == 3
    assert executions.doubles() == {"f00": 1}
    assert executions.doubles({"f00": 1}) == {}
    assert executions.unfinished(["f00", "f01", "f02"]) == ["f01", "f02"]


def test_a_seed_fixes_the_schedule_and_it_covers_every_phase_with_the_three_signals() -> None:
    schedule = make_schedule(42)
    assert schedule == make_schedule(42)
    assert schedule != make_schedule(43)
    kills = [m for m in schedule if m.signal is signal.SIGKILL]
    assert len(kills) >= 20
    assert {m.phase for m in kills} == set(PHASES)
    others = sorted(m.signal.name for m in schedule if m.signal is not signal.SIGKILL)
    assert others == ["SIGHUP", "SIGINT", "SIGTERM"]
    phases = [m.phase for m in schedule]
    assert phases[:3] == ["startup"] * 3
    assert phases[-2:] == ["cleanup"] * 2


def _line(seq: int, task: str, record: dict[str, object]) -> str:
    return json.dumps({"seq": seq, "task": task, "record": record}) + "\n"


def test_the_journal_view_reports_submit_intents_once_and_never_goes_back_in_time(
    tmp_path: Path,
) -> None:
    queued = {"state": "queued", "attempts": []}
    intent = {"state": "submitting", "attempts": [{"number": 1, "handle": None}]}
    handle = {"backend": "local", "external_id": "c1", "labels": {}}
    pending = {"state": "pending", "attempts": [{"number": 1, "handle": handle}]}
    snapshot = {"seq": 0, "pids": [7], "run_id": "r", "tasks": {"f00": queued, "f01": queued}}
    (tmp_path / "journal.json").write_text(json.dumps(snapshot))
    view = JournalView(tmp_path)
    assert [c.task for c in view.poll()] == ["f00", "f01"]
    assert view.pids() == [7]
    with open(tmp_path / "journal.log", "a") as log:
        log.write(_line(1, "f00", intent))
        log.write('{"seq": 2, "task": "f01", "rec')  # torn: the writer was killed here
    changes = view.poll()
    assert [(c.task, c.submitting) for c in changes] == [("f00", True)]
    # the next runner cuts the torn line off before it appends
    (tmp_path / "journal.log").write_text(_line(1, "f00", intent) + _line(2, "f00", pending))
    (change,) = view.poll()
    assert not change.submitting
    assert change.state == "pending"
    # the runner folds the log into a snapshot and empties the log; the old line (seq 1) that
    # a slow reader might still find must not take the task back to "submitting"
    snapshot = {"seq": 2, "pids": [7], "run_id": "r", "tasks": {"f00": pending, "f01": queued}}
    (tmp_path / "journal.json").write_text(json.dumps(snapshot))
    (tmp_path / "journal.log").write_text(_line(1, "f00", intent))
    assert view.poll() == []
    assert view.records["f00"]["state"] == "pending"
    assert journal_handles(view.snapshot) == {"c1"}


def test_temporary_files_are_found_by_altars_pattern_and_the_older_suffixes(
    tmp_path: Path,
) -> None:
    (tmp_path / "models").mkdir()
    for name in (
        "models/.w0.bin.altar-tmp-123-0123456789abcdef",
        "index.json.5.abcdef12.tmp",
        "out.partial",
        "models/w0.bin",
        "models/w0.bin.sha256-verified",
    ):
        (tmp_path / name).write_text("x")
    found = [p.relative_to(tmp_path).as_posix() for p in temporary_files([tmp_path])]
    assert found == [
        "index.json.5.abcdef12.tmp",
        "models/.w0.bin.altar-tmp-123-0123456789abcdef",
        "out.partial",
    ]


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX sh")
def test_a_task_of_the_plan_writes_its_ledger_lines_and_exactly_the_expected_output(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    plan = build_plan(
        tmp_path,
        seed=3,
        backend="in-process",
        mount=str(data),
        backend_options={"data_root": str(data)},
    )
    document = json.loads(plan.path.read_text())
    assert len(document["tasks"]) == 40
    assert plan.dependencies["m7"] == ["f28", "f29"]
    fold = document["tasks"][0]
    (data / "models").mkdir(parents=True)
    for transfer in fold["inputs"]:
        shutil.copy(transfer["uri"], data / transfer["logical_path"])
    subprocess.run(fold["command"], check=True, cwd=data, timeout=60)
    assert (data / "jobs" / "f00.txt").read_bytes() == plan.expected["f00"]
    executions = read_ledger(plan.ledger, plan.marker)
    assert executions.total == 1
    assert executions.unfinished(["f00"]) == []
    assert plan.marker in " ".join(fold["command"])
