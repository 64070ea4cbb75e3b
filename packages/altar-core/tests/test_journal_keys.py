"""Journal version 4: submission keys the run derives are not stored, and read back derived."""

from __future__ import annotations

import json

import pytest
from altar.execution.labels import submission_key
from altar.execution.state.journal import Journal
from altar.execution.state.records import Attempt, TaskRecord
from altar.execution.types import TaskHandle


def _journal(tmp_path, *attempts: Attempt) -> Journal:
    record = TaskRecord("a", "fold", "sha256:00", "succeeded", list(attempts))
    return Journal(tmp_path, "fake", {}, "", {"a": record})


def _stored_attempts(tmp_path):
    return json.loads((tmp_path / "journal.json").read_text())["tasks"]["a"]["attempts"]


def test_a_derived_key_is_left_out_and_read_back(tmp_path):
    journal = _journal(tmp_path)
    derived = submission_key(journal.run_id, "a", 1)
    labels = {"altar.run": journal.run_id, "altar.task": "a", "altar.attempt": "1"}
    handle = TaskHandle("fake", "x-1", {**labels, "altar.submission": derived})
    journal.tasks["a"].attempts = [
        Attempt(1, "failed", handle, key=derived),
        Attempt(2, "succeeded", key="not-derived"),  # adopted from elsewhere, say
        Attempt(3, "succeeded", key=None),  # an attempt of a journal from before keys
    ]
    journal.save()
    stored = _stored_attempts(tmp_path)
    assert json.loads((tmp_path / "journal.json").read_text())["version"] == 4
    assert "key" not in stored[0]
    assert stored[0]["handle"]["implied"] == 15  # its submission label is the derived key
    assert stored[1]["key"] == "not-derived"
    assert stored[2]["key"] is None  # said, so it does not read back derived
    reread = Journal.load(tmp_path)
    assert reread.tasks == journal.tasks
    assert reread.tasks["a"].attempts[0].handle == handle


def test_log_lines_of_a_new_attempt_leave_the_derived_key_out(tmp_path):
    journal = _journal(tmp_path)
    journal.tasks["a"].state = "queued"
    journal.save()
    record = journal.tasks["a"]
    key = submission_key(journal.run_id, "a", 1)
    record.attempts.append(Attempt(number=1, key=key, submitted_at=1.0))
    record.state = "submitting"
    journal.mark(record)
    journal.flush()
    line = json.loads((tmp_path / "journal.log").read_text())
    assert "key" not in line["attempts"][0]
    assert Journal.load(tmp_path).tasks["a"].attempts[0].key == key


def test_a_version_3_journal_keeps_its_keys_until_its_next_snapshot(tmp_path):
    journal = _journal(tmp_path)
    journal.tasks["a"].state = "queued"
    journal.save()
    snapshot = json.loads((tmp_path / "journal.json").read_text())
    snapshot["version"] = 3  # as altar before version 4 wrote it: a missing key is None
    (tmp_path / "journal.json").write_text(json.dumps(snapshot))
    old = Journal.load(tmp_path)
    assert not old.derived_keys
    record = old.tasks["a"]
    key = submission_key(old.run_id, "a", 1)
    record.attempts += [Attempt(number=1, key=key), Attempt(number=2, key=None)]
    old.mark(record)
    old.flush()
    line = json.loads((tmp_path / "journal.log").read_text())
    assert [a.get("key", "absent") for a in line["attempts"]] == [key, "absent"]
    reread = Journal.load(tmp_path)  # still version 3: the log reads as it was written
    assert [a.key for a in reread.tasks["a"].attempts] == [key, None]
    reread.save()
    assert reread.derived_keys
    assert Journal.load(tmp_path).tasks == reread.tasks


def test_lines_after_the_first_of_an_append_carry_no_seq_and_replay_in_order(tmp_path):
    journal = Journal(
        tmp_path, "fake", {}, "", {t: TaskRecord(t, "fold", "sha256:00") for t in "abc"}
    )
    journal.save()
    for state in ("pending", "running"):
        for record in journal.tasks.values():
            record.state = state
            journal.mark(record)
        journal.flush()  # one append of three lines
    lines = [json.loads(line) for line in (tmp_path / "journal.log").read_text().splitlines()]
    assert [line.get("seq") for line in lines] == [1, None, None, 4, None, None]
    reread = Journal.load(tmp_path)
    assert reread.seq == 6
    assert reread.tasks == journal.tasks
    # a snapshot at seq 5 that a kill kept from emptying the log: only line 6 is new
    snapshot = json.loads((tmp_path / "journal.json").read_text())
    snapshot["seq"] = 5
    snapshot["tasks"]["c"]["state"] = "succeeded"  # what line 6 must replace
    (tmp_path / "journal.json").write_text(json.dumps(snapshot))
    assert Journal.load(tmp_path).tasks["c"].state == "running"
    assert Journal.load(tmp_path).tasks["b"].state == "queued"  # the snapshot's, not line 5's


def test_a_snapshot_that_fails_leaves_a_version_3_journal_writing_its_keys(tmp_path, monkeypatch):
    from altar.execution.errors import JournalError
    from altar.execution.state import journal as journal_module

    journal = _journal(tmp_path)
    journal.tasks["a"].state = "queued"
    journal.save()
    snapshot = json.loads((tmp_path / "journal.json").read_text())
    snapshot["version"] = 3
    (tmp_path / "journal.json").write_text(json.dumps(snapshot))
    old = Journal.load(tmp_path)

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(journal_module, "atomic_write", full)
    with pytest.raises(JournalError, match="free space and resume"):
        old.save()
    assert not old.derived_keys  # the version 3 snapshot is still the one on disk
    record = old.tasks["a"]
    key = submission_key(old.run_id, "a", 1)
    record.attempts.append(Attempt(number=1, key=key))
    old.mark(record)
    old.flush()
    assert Journal.load(tmp_path).tasks["a"].attempts[0].key == key
