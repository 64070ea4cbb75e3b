"""Compact journal records and a log folded by size (issue 24)."""

from __future__ import annotations

import json
import os
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


def test_a_log_line_writes_a_handle_once_and_a_version_1_journal_still_reads(tmp_path):
    record = TaskRecord("a", "fold", "sha256:00")
    journal = Journal(tmp_path, "fake", {}, "", {"a": record})
    journal.save()
    labels = {"altar.submission": "k1"}
    record.attempts.append(Attempt(number=1, key="k1", handle=TaskHandle("fake", "x-1", labels)))
    record.state = "pending"
    for state in ("pending", "running", "succeeded"):
        record.state = record.attempts[0].state = state
        journal.mark(record)
        journal.flush()
    lines = [json.loads(line) for line in (tmp_path / "journal.log").read_text().splitlines()]
    assert [line["record"]["attempts"][0]["handle"] for line in lines][1:] == [1, 1]
    assert "external_id" in json.dumps(lines[0])
    assert all("kind" not in line["record"] for line in lines)
    assert "key" not in lines[0]["record"]["attempts"][0]  # the handle's labels carry it
    assert Journal.load(tmp_path).tasks == journal.tasks
    # version 1: full records in the snapshot and in the log
    snapshot = json.loads((tmp_path / "journal.json").read_text())
    snapshot["version"] = 1
    (tmp_path / "journal.json").write_text(json.dumps(snapshot))
    old_line = {"seq": journal.seq + 1, "task": "a", "record": OLD_FORM}
    (tmp_path / "journal.log").write_text(json.dumps(old_line) + "\n")
    assert Journal.load(tmp_path).tasks["a"] == TaskRecord.from_dict("a", OLD_FORM)


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
