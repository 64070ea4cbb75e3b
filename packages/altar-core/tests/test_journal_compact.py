"""Compact journal records and a log folded by size (issue 24)."""

from __future__ import annotations

import json
import os
import random
import signal

from altar.execution.atomic import temp_owner
from altar.execution.state import journal as journal_module
from altar.execution.state.journal import COMPACT_RATIO, Journal
from altar.execution.state.records import Attempt, TaskRecord
from altar.execution.types import TaskFailure, TaskHandle

#: A record as altar-core wrote it before issue 24: every field, defaults included.
OLD_FORM = {
    "kind": "fold",
    "spec_sha256": "sha256:00",
    "state": "succeeded",
    "attempts": [
        {
            "number": 1,
            "state": "succeeded",
            "handle": {
                "backend": "fake",
                "external_id": "x-1",
                "labels": {"task": "a"},
                "plugin_identity": None,
            },
            "failure": None,
            "submitted_at": 1.0,
            "started_at": None,
            "finished_at": 2.0,
            "key": "k1",
            "reexecuted": 0,
            "adopted": False,
        }
    ],
    "detail": None,
    "outputs_collected": True,
    "cleaned": False,
    "in_doubt": 0,
    "retry_base": 0,
}


def test_a_record_leaves_its_defaults_out_and_reads_back_the_same():
    record = TaskRecord.from_dict("a", OLD_FORM)
    compact = record.to_dict()
    assert compact == {
        "kind": "fold",
        "spec_sha256": "sha256:00",
        "state": "succeeded",
        "attempts": [
            {
                "number": 1,
                "state": "succeeded",
                "handle": {"backend": "fake", "external_id": "x-1", "labels": {"task": "a"}},
                "submitted_at": 1.0,
                "finished_at": 2.0,
                "key": "k1",
            }
        ],
        "outputs_collected": True,
    }
    assert TaskRecord.from_dict("a", compact) == record  # the old form reads the same
    assert len(json.dumps(compact)) < 0.7 * len(json.dumps(OLD_FORM))


def test_what_is_set_is_kept():
    failure = TaskFailure("timeout", "slow", deterministic=False, exit_code=None)
    attempt = Attempt(number=2, state="failed", failure=failure, reexecuted=1, adopted=True)
    attempt.handle = TaskHandle("fake", "x", {}, {"plugin": "p"})
    record = TaskRecord("a", "fold", "sha256:00", state="failed", attempts=[attempt])
    record.detail, record.cleaned, record.in_doubt, record.retry_base = "tail", True, 1, 1
    assert TaskRecord.from_dict("a", record.to_dict()) == record


def test_the_log_is_folded_by_its_size_against_the_snapshot(tmp_path):
    records = {f"t{i}": TaskRecord(f"t{i}", "fold", "sha256:00") for i in range(50)}
    journal = Journal(tmp_path, "fake", {}, "", records)
    journal.save()
    snapshot = journal.snapshot_bytes
    assert snapshot == (tmp_path / "journal.json").stat().st_size
    writes = 0
    while not journal.compact_due():
        record = records[f"t{writes % 50}"]
        record.in_doubt += 1
        journal.mark(record)
        journal.flush()
        writes += 1
    # many more lines than tasks (a line count of the plan's size would have folded at 50)
    assert writes > 256
    assert journal.log_bytes > COMPACT_RATIO * snapshot
    assert (tmp_path / "journal.log").stat().st_size == journal.log_bytes
    reread = Journal.load(tmp_path)
    assert reread.log_bytes == journal.log_bytes
    assert reread.compact_due()
    assert reread.tasks == journal.tasks


def test_a_log_line_holds_only_what_changed_and_handles_leave_out_what_the_run_implies(
    tmp_path,
):
    record = TaskRecord("a", "fold", "sha256:00")
    journal = Journal(tmp_path, "fake", {}, "", {"a": record})
    journal.save()
    labels = {
        "fold": "1",
        "altar.run": journal.run_id,
        "altar.task": "a",
        "altar.attempt": "1",
        "altar.submission": "k1",
    }
    record.attempts.append(Attempt(number=1, key="k1", submitted_at=1.0))
    record.state = "submitting"
    journal.mark(record)
    journal.flush()
    record.attempts[0].handle = TaskHandle("fake", "x-1", labels)
    for state in ("pending", "pending", "running", "succeeded"):
        record.state = record.attempts[0].state = state
        journal.mark(record)
        journal.flush()
    record.outputs_collected = True
    journal.mark(record)
    journal.flush()
    lines = [json.loads(line) for line in (tmp_path / "journal.log").read_text().splitlines()]
    assert len(lines) == 5  # the second "pending" changed nothing: no line
    assert lines[0]["attempts"][0]["key"] == "k1"  # a new attempt is written whole
    handle = lines[1]["attempts"][0]["handle"]
    # altar.run, altar.task and altar.attempt are the run's; altar.submission the attempt's key
    assert handle == {"external_id": "x-1", "labels": {"fold": "1"}, "implied": 15}
    # a task and its last attempt changing to one state say it once
    assert (lines[0]["state"], lines[1]["state"]) == ("submitting", "pending")
    assert "state" not in lines[0]["attempts"][0]
    assert lines[2:] == [
        {"seq": 3, "task": "a", "state": "running"},
        {"seq": 4, "task": "a", "state": "succeeded"},
        {"seq": 5, "task": "a", "set": {"outputs_collected": True}},
    ]
    reread = Journal.load(tmp_path)
    assert reread.tasks == journal.tasks
    assert reread.tasks["a"].attempts[0].handle.labels == labels
    assert list(reread.tasks["a"].attempts[0].handle.labels) == list(labels)  # in its order
    journal.save()  # the snapshot's handles are as compact
    snapshot = json.loads((tmp_path / "journal.json").read_text())
    assert snapshot["version"] == 4
    assert snapshot["tasks"]["a"]["attempts"][0]["handle"]["implied"] == 15
    assert snapshot["tasks"]["a"]["attempts"][0]["key"] == "k1"
    assert "state" not in snapshot["tasks"]["a"]["attempts"][0]  # the task's
    assert Journal.load(tmp_path).tasks == journal.tasks


def test_a_handle_that_differs_from_what_the_run_implies_is_kept_whole(tmp_path):
    record = TaskRecord("a", "fold", "sha256:00", state="pending")
    labels = {"altar.run": "another", "altar.task": "b", "altar.attempt": "7"}
    handle = TaskHandle("other", "x-1", labels, {"plugin": "p"})
    record.attempts.append(Attempt(number=1, state="pending", handle=handle))
    journal = Journal(tmp_path, "fake", {}, "", {"a": record})
    journal.save()
    written = json.loads((tmp_path / "journal.json").read_text())["tasks"]["a"]
    assert written["attempts"][0]["handle"]["labels"] == labels
    assert "implied" not in written["attempts"][0]["handle"]
    assert Journal.load(tmp_path).tasks["a"].attempts[0].handle == handle


def test_version_1_and_2_journals_still_read(tmp_path):
    handle = {"backend": "fake", "external_id": "x-1", "labels": {"altar.submission": "k1"}}
    attempt = {"number": 1, "state": "pending", "handle": handle}
    snapshot = {
        "format": "altar-run-journal",
        "version": 2,
        "seq": 1,
        "backend": {"type": "fake", "options": {}},
        "run_id": "r" * 32,
        "tasks": {
            "a": {
                "kind": "fold",
                "spec_sha256": "sha256:00",
                "state": "pending",
                "attempts": [attempt],
            }
        },
    }
    (tmp_path / "journal.json").write_text(json.dumps(snapshot))
    # version 2: a log line repeats the record, a handle already written is 1
    again = {**attempt, "state": "succeeded", "handle": 1, "finished_at": 2.0}
    line = {"seq": 2, "task": "a", "record": {"state": "succeeded", "attempts": [again]}}
    (tmp_path / "journal.log").write_text(json.dumps(line) + "\n")
    record = Journal.load(tmp_path).tasks["a"]
    assert (record.state, record.kind, record.attempts[0].finished_at) == ("succeeded", "fold", 2.0)
    assert record.attempts[0].handle == TaskHandle("fake", "x-1", {"altar.submission": "k1"})
    assert record.attempts[0].key == "k1"
    # version 1: full records in the snapshot and in the log
    snapshot["version"] = 1
    (tmp_path / "journal.json").write_text(json.dumps(snapshot))
    old_line = {"seq": 2, "task": "a", "record": OLD_FORM}
    (tmp_path / "journal.log").write_text(json.dumps(old_line) + "\n")
    assert Journal.load(tmp_path).tasks["a"] == TaskRecord.from_dict("a", OLD_FORM)


FAILURE = TaskFailure("exit_1", "tail", deterministic=True, exit_code=1)


def _random_change(rng: random.Random, records: dict[str, TaskRecord], run_id: str, step: int):
    """One change of the kinds a run makes (attempts added and withdrawn, fields set and
    reset) to a random record; returns the record."""
    record = records[f"t{rng.randrange(len(records))}"]
    change = rng.randrange(9)
    last = record.attempts[-1] if record.attempts else None
    if change == 0 or last is None:
        number = len(record.attempts) + 1
        record.attempts.append(Attempt(number=number, key=f"k{step}", submitted_at=float(step)))
        record.state = rng.choice([record.state, "submitting"])  # as an intent does
    elif change == 1:
        record.attempts.pop()
    elif change == 2:
        labels = {
            "altar.run": run_id,
            "altar.task": record.id,
            "altar.attempt": str(last.number),
            "altar.submission": last.key or "",
        }
        last.handle = TaskHandle(rng.choice(["fake", "other"]), f"x{step}", labels)
    elif change == 3:
        last.failure = rng.choice([FAILURE, None])
        record.detail = rng.choice(["tail", None])
    elif change == 4:
        last.state = record.state = rng.choice(["pending", "running", "succeeded", "failed"])
        last.finished_at = rng.choice([None, float(step)])
    elif change == 5:
        record.outputs_collected, record.cleaned = rng.random() < 0.5, rng.random() < 0.5
        record.state = rng.choice(["succeeded", "queued"])
    elif change == 6:
        last.reexecuted, last.adopted = rng.randrange(2), rng.random() < 0.5
        last.key = rng.choice([last.key, f"k{step}"])  # the handle keeps its label
        record.in_doubt, record.retry_base = rng.randrange(2), rng.randrange(2)
    elif change == 7:
        record.cached = rng.choice([None, {"run_id": "r", "key": f"c{step}"}])
    return record


def _records(n: int = 6) -> dict[str, TaskRecord]:
    return {f"t{i}": TaskRecord(f"t{i}", "fold", "sha256:00") for i in range(n)}


def test_random_changes_read_back_after_every_line(tmp_path):
    """Every kind of change, each appended as what changed, reads back as the records in
    memory after every flush."""
    rng = random.Random(24)
    records = _records()
    journal = Journal(tmp_path, "fake", {}, "", records)
    journal.save()
    for step in range(400):
        journal.mark(_random_change(rng, records, journal.run_id, step))
        journal.flush()
        if step % 50 == 0:
            assert Journal.load(tmp_path).tasks == records, step
        if step % 130 == 129:
            journal.save()
    assert Journal.load(tmp_path).tasks == records


def _steps(seed: int, run_id: str, steps: int):
    """The records after each step of the killed writer below (the same changes in memory)."""
    rng, records = random.Random(seed), _records()
    states = [{k: r.to_dict() for k, r in records.items()}]
    for step in range(steps):
        for _ in range(1 + step % 3):
            _random_change(rng, records, run_id, step)
        states.append({k: r.to_dict() for k, r in records.items()})
    return states


def test_a_writer_killed_at_any_moment_leaves_a_journal_of_a_step_it_reached(tmp_path):
    """SIGKILL a process appending lines of what changed (and folding them into snapshots)
    at random moments: the journal reads back as the records after a step it reached, at
    least the last one it made durable, and a next writer goes on from there. (A torn last
    line, which one ``write`` killed midway does not leave, has tests in test_journal.py.)"""
    steps, run_id = 1200, "r" * 32
    for round_, seed in enumerate((1, 2, 3, 4)):
        run_dir = tmp_path / f"r{round_}"
        run_dir.mkdir()
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the writer: one flush per step, acknowledged once durable
            os.close(read_end)
            rng, records = random.Random(seed), _records()
            journal = Journal(run_dir, "fake", {}, "", records, run_id=run_id)
            journal.save()
            os.write(write_end, b"0\n")
            for step in range(steps):
                for _ in range(1 + step % 3):
                    journal.mark(_random_change(rng, records, run_id, step))
                journal.flush()
                if step % 97 == 96:
                    journal.save()
                os.write(write_end, f"{step + 1}\n".encode())
            os._exit(0)
        os.close(write_end)
        wanted = random.Random(seed).randrange(1, steps // 4)
        acked, buffer = 0, b""
        while acked < wanted:
            chunk = os.read(read_end, 4096)
            if not chunk:
                break
            buffer += chunk
            *done, buffer = buffer.split(b"\n")
            acked = int(done[-1]) if done else acked
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(read_end)
        states = _steps(seed, run_id, steps)
        journal = Journal.load(run_dir)
        found = {k: r.to_dict() for k, r in journal.tasks.items()}
        reached = [i for i in range(acked, len(states)) if states[i] == found]
        assert reached, (round_, acked)
        # the next process goes on from there
        records = journal.tasks
        rng = random.Random(seed + 100)
        for step in range(50):
            journal.mark(_random_change(rng, records, run_id, steps + step))
            journal.flush()
        assert Journal.load(run_dir).tasks == records


def _journal_of(tmp_path, n):
    records = {f"t{i}": TaskRecord(f"t{i}", "fold", "sha256:00") for i in range(n)}
    return Journal(tmp_path, "fake", {}, "", records)


def test_a_snapshot_is_written_in_chunks_with_the_bytes_of_one_document(tmp_path, monkeypatch):
    monkeypatch.setattr(journal_module, "SNAPSHOT_CHUNK", 3)
    for n in (0, 1, 3, 7):
        journal = _journal_of(tmp_path, n)
        journal.save()
        raw = (tmp_path / "journal.json").read_bytes()
        assert raw == json.dumps(journal.to_dict(), separators=(",", ":")).encode()
        assert journal.snapshot_bytes == len(raw)
        assert Journal.load(tmp_path).tasks == journal.tasks


def test_a_process_killed_inside_a_chunked_snapshot_leaves_the_old_one(tmp_path):
    journal = _journal_of(tmp_path, 7)
    journal.save()
    before = (tmp_path / "journal.json").read_bytes()
    pid = os.fork()
    if pid == 0:  # the child: SIGKILLed after its first chunk is written, before the rename
        journal_module.SNAPSHOT_CHUNK = 2
        chunks = journal._snapshot_chunks

        def killed_midway():
            parts = chunks()
            yield next(parts)
            yield next(parts)
            os.kill(os.getpid(), signal.SIGKILL)

        journal._snapshot_chunks = killed_midway
        journal.tasks["t0"].state = "running"
        journal.save()
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status)
    assert os.WTERMSIG(status) == signal.SIGKILL
    assert (tmp_path / "journal.json").read_bytes() == before
    assert Journal.load(tmp_path).tasks == journal.tasks
    left = [p.name for p in tmp_path.iterdir() if ".altar-tmp-" in p.name]
    assert len(left) == 1
    assert temp_owner(left[0]) == pid
