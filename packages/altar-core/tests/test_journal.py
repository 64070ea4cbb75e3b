"""The run journal: opening, resuming, replaying its log, and its lock."""

from __future__ import annotations

import errno
import json
import os

import pytest
from altar.execution import JournalError
from altar.execution.plans.plan import Plan, PlanTask
from altar.execution.run.runner import (
    run_plan,
)
from altar.execution.state.journal import JOURNAL_NAME, LOG_NAME, Journal

from .runkit import FAST, journal_bytes, run_until, simple_plan, spec

DIGEST = "sha256:" + "ef" * 32


@pytest.mark.asyncio
async def test_a_changed_plan_or_backend_cannot_reuse_a_run_dir(
    tmp_path, provider, fake_backend_class
):
    backend = fake_backend_class(provider=provider)
    await run_plan(simple_plan("a"), backend, run_dir=tmp_path / "r", **FAST)
    with pytest.raises(JournalError, match="holds a run of other tasks"):
        await run_plan(simple_plan("a", "b"), backend, run_dir=tmp_path / "r")
    changed = Plan("fake", {}, [PlanTask("a", spec("a", command=["false"]))])
    with pytest.raises(JournalError, match="task 'a' changed since this run started"):
        await run_plan(changed, backend, run_dir=tmp_path / "r")

    class Other(fake_backend_class):
        name = "other"

    with pytest.raises(JournalError, match="is a run on backend 'fake', not 'other'"):
        await run_plan(simple_plan("a"), Other(provider=provider), run_dir=tmp_path / "r")


@pytest.mark.asyncio
async def test_incompatible_or_damaged_journals(tmp_path, provider, fake_backend_class):
    backend = fake_backend_class(provider=provider)
    await run_plan(simple_plan("a"), backend, run_dir=tmp_path / "r", **FAST)
    path = tmp_path / "r" / JOURNAL_NAME
    data = json.loads(path.read_text())
    data["version"] = 99
    path.write_text(json.dumps(data))
    expected = "is journal version 99, but this altar reads versions 1, 2, 3 and 4;"
    with pytest.raises(JournalError, match=expected):
        await run_plan(simple_plan("a"), backend, run_dir=tmp_path / "r")
    path.write_text('{"format": "something-else"}')
    with pytest.raises(JournalError, match="is not an altar run journal"):
        Journal.load(tmp_path / "r")
    path.write_text("{not json")
    with pytest.raises(JournalError, match="is not valid JSON"):
        Journal.load(tmp_path / "r")
    path.write_text('{"format": "altar-run-journal", "version": 1, "tasks": 3}')
    with pytest.raises(JournalError, match="is damaged"):
        Journal.load(tmp_path / "r")


@pytest.mark.asyncio
async def test_one_process_drives_a_run_dir(tmp_path, provider, fake_backend_class):
    from altar.execution.state.journal import run_lock

    with (
        run_lock(tmp_path / "r"),
        pytest.raises(
            JournalError, match=f"in use by another altar process \\(pid {os.getpid()}\\)"
        ),
    ):
        await run_plan(
            simple_plan("a"), fake_backend_class(provider=provider), run_dir=tmp_path / "r"
        )


@pytest.mark.asyncio
async def test_a_full_disk_leaves_the_previous_journal_intact(
    tmp_path, provider, fake_backend_class, monkeypatch
):
    from altar.execution.state import journal as journal_module

    plan = simple_plan("a", "b")
    seen = []
    await run_until(
        plan,
        fake_backend_class(provider=provider),
        tmp_path / "r",
        lambda e: seen.append(e) or len(seen) == 2,
    )
    before = journal_bytes(tmp_path / "r")
    assert before[1]  # the run so far is in the log, not yet in a snapshot
    real_write = os.write

    def half_then_full(fd, data):
        real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(journal_module.os, "write", half_then_full)
    with pytest.raises(
        JournalError, match="No space left on device; the previous journal is intact"
    ):
        await run_plan(plan, fake_backend_class(provider=provider), run_dir=tmp_path / "r", **FAST)
    monkeypatch.undo()
    assert journal_bytes(tmp_path / "r") == before
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == [
        "journal.json",
        "journal.log",
        "lock",
        "summary.json",
    ]
    result = await run_plan(
        plan, fake_backend_class(provider=provider), run_dir=tmp_path / "r", **FAST
    )
    assert result.ok
    assert provider.submits == {"a": 1, "b": 1}


@pytest.mark.asyncio
async def test_the_log_replays_over_the_snapshot_and_a_torn_line_is_ignored(
    tmp_path, provider, fake_backend_class
):
    provider.duration = 10
    plan = simple_plan("a", "b")
    await run_until(
        plan,
        fake_backend_class(provider=provider),
        tmp_path / "r",
        lambda e: e.kind == "submitted" and e.task_id == "b",
        poll_interval_s=60.0,  # stopped before the first poll
    )
    snapshot = json.loads((tmp_path / "r" / JOURNAL_NAME).read_text())
    assert snapshot["tasks"]["b"]["state"] == "queued"  # the snapshot predates the submits
    journal = Journal.load(tmp_path / "r")
    assert journal.tasks["b"].state == "pending"
    with (tmp_path / "r" / LOG_NAME).open("ab") as log:
        log.write(b'{"seq": 999, "task": "a", "record": {"kind"')  # a crash mid-append
    again = Journal.load(tmp_path / "r")
    assert again.tasks["a"].state == journal.tasks["a"].state
    assert again.seq == journal.seq
    result = await run_plan(
        plan, fake_backend_class(provider=provider), run_dir=tmp_path / "r", **FAST
    )
    assert result.ok
    assert provider.submits == {"a": 1, "b": 1}
    assert (tmp_path / "r" / LOG_NAME).read_bytes() == b""  # folded into the final snapshot


def test_a_failed_snapshot_write_leaves_the_old_snapshot_and_no_temp_file(tmp_path, monkeypatch):
    from altar.execution.state import journal as journal_module
    from altar.execution.state.journal import TaskRecord

    journal = Journal(tmp_path, "fake", {}, "plan.toml", {"a": TaskRecord("a", "k", "sha256:x")})
    journal.save()
    before = (tmp_path / JOURNAL_NAME).read_bytes()
    journal.tasks["a"].state = "running"

    def no_space(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(journal_module.os, "fsync", no_space)
    with pytest.raises(JournalError, match="No space left on device"):
        journal.save()
    monkeypatch.undo()
    assert (tmp_path / JOURNAL_NAME).read_bytes() == before
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [JOURNAL_NAME, LOG_NAME, "summary.json"]  # no temp file
    assert Journal.load(tmp_path).tasks["a"].state == "queued"


@pytest.mark.asyncio
async def test_changes_appended_after_a_torn_line_survive_the_next_crash(
    tmp_path, provider, fake_backend_class
):
    # A crash tore the log's last line; the resumed run appends to that log. Its own lines
    # must replay after a second crash, not be glued to the torn bytes and dropped with them.
    provider.duration = 1
    plan = Plan("fake", {}, [PlanTask(k, spec(k)) for k in ("a", "b")], max_parallel=1)
    await run_until(
        plan,
        fake_backend_class(provider=provider),
        tmp_path / "r",
        lambda e: e.kind == "submitted" and e.task_id == "a",
        poll_interval_s=60.0,
    )
    assert Journal.load(tmp_path / "r").tasks["b"].state == "queued"
    with (tmp_path / "r" / LOG_NAME).open("ab") as log:
        log.write(b'{"seq": 999, "task": "a", "record": {"kind"')  # a crash mid-append
    await run_until(
        plan,
        fake_backend_class(provider=provider),
        tmp_path / "r",
        lambda e: e.kind == "submitted" and e.task_id == "b",
    )
    journal = Journal.load(tmp_path / "r")
    assert journal.tasks["a"].state == "succeeded"
    assert journal.tasks["b"].state == "pending"
    assert journal.tasks["b"].last.handle is not None
    result = await run_plan(
        plan, fake_backend_class(provider=provider), run_dir=tmp_path / "r", **FAST
    )
    assert result.ok
    assert provider.submits == {"a": 1, "b": 1}


def test_a_log_line_that_lost_only_its_newline_is_kept_and_mended(tmp_path):
    from altar.execution.state.journal import TaskRecord

    journal = Journal(
        tmp_path, "fake", {}, "plan", {k: TaskRecord(k, "fold", DIGEST) for k in ("a", "b")}
    )
    journal.save()
    journal.tasks["a"].state = "running"
    journal.mark(journal.tasks["a"])
    journal.flush()
    log = tmp_path / LOG_NAME
    log.write_bytes(log.read_bytes().rstrip(b"\n"))  # a crash just before the newline
    resumed = Journal.load(tmp_path)
    assert resumed.tasks["a"].state == "running"
    resumed.tasks["b"].state = "running"
    resumed.mark(resumed.tasks["b"])
    resumed.flush()
    again = Journal.load(tmp_path)
    assert (again.tasks["a"].state, again.tasks["b"].state) == ("running", "running")


@pytest.mark.asyncio
async def test_a_run_dir_that_cannot_be_made_is_a_journal_error(
    tmp_path, provider, fake_backend_class
):
    (tmp_path / "a file").write_text("")
    with pytest.raises(JournalError, match=r"cannot use .*a file/run as a run directory: Not a"):
        await run_plan(
            simple_plan("a"),
            fake_backend_class(provider=provider),
            run_dir=tmp_path / "a file" / "run",
            **FAST,
        )


def test_the_log_exists_before_the_first_snapshot_is_made_durable(tmp_path, monkeypatch):
    # A new file's name is durable only once its directory is fsync'd. The snapshot's rename
    # fsyncs the directory; the log must already be there by then, or a power cut after the
    # first fsync'd appends (the first handles) could lose the log's name and every line in it.
    from altar.execution.state import journal as journal_module
    from altar.execution.state.journal import TaskRecord

    seen = []
    real_replace = journal_module.os.replace

    def replace(src, dst):
        seen.append((os.path.basename(dst), (tmp_path / LOG_NAME).exists()))
        real_replace(src, dst)

    monkeypatch.setattr(journal_module.os, "replace", replace)
    Journal(tmp_path, "fake", {}, "plan", {"a": TaskRecord("a", "fold", DIGEST)}).save()
    assert seen[0] == (JOURNAL_NAME, True)
    assert (tmp_path / LOG_NAME).read_bytes() == b""
    assert (tmp_path / LOG_NAME).stat().st_mode & 0o777 == 0o600


@pytest.mark.asyncio
async def test_a_run_resumes_only_with_the_backend_options_it_started_with(
    tmp_path, provider, fake_backend_class
):
    provider.duration = 1000
    plan = simple_plan("a")
    await run_until(
        plan,
        fake_backend_class(provider=provider),
        tmp_path / "r",
        lambda e: e.kind == "submitted",
    )
    with pytest.raises(JournalError) as caught:
        await run_plan(
            plan,
            fake_backend_class(provider=provider),
            run_dir=tmp_path / "r",
            backend_options={"docker_host": "unix:///elsewhere.sock"},
            **FAST,
        )
    assert str(caught.value) == (
        f"{tmp_path / 'r'} was started with backend options (none), not "
        'docker_host="unix:///elsewhere.sock"; resume it with the same options (altar run '
        "--option KEY=VALUE) or use a new run directory"
    )
    assert provider.submits == {"a": 1}
    assert Journal.load(tmp_path / "r").backend_options == {}


def test_lock_is_held_tells_a_driven_run_from_an_idle_one(tmp_path):
    from altar.execution.state.journal import LOCK_NAME, lock_is_held, run_lock

    assert not lock_is_held(tmp_path / "r")  # no run directory yet
    with run_lock(tmp_path / "r"):
        assert lock_is_held(tmp_path / "r")
        (tmp_path / "r" / LOCK_NAME).chmod(0o444)  # asking needs no write access
        assert lock_is_held(tmp_path / "r")
    assert not lock_is_held(tmp_path / "r")
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(JournalError, match="cannot read"):
        lock_is_held(tmp_path / "file")


@pytest.mark.asyncio
async def test_a_journal_of_the_previous_release_resumes_with_a_run_id_and_keys(
    tmp_path, provider, fake_backend_class
):
    from altar.execution.labels import submission_key

    plan = simple_plan("a", "b")
    run_dir = tmp_path / "r"
    await run_plan(plan, fake_backend_class(provider=provider), run_dir=run_dir, **FAST)
    data = json.loads((run_dir / JOURNAL_NAME).read_bytes())
    for key in ("run_id", "pids", "removed"):
        del data[key]
    record = data["tasks"]["b"]
    record["state"] = "submitting"  # an old runner died inside b's submit
    record["attempts"] = [{"number": 1, "state": "submitting", "handle": None, "failure": None}]
    data["finished"] = False
    (run_dir / JOURNAL_NAME).write_text(json.dumps(data))
    (run_dir / LOG_NAME).write_bytes(b"")
    seen = []

    class Recording(fake_backend_class):
        async def submit(self, spec):
            seen.append(dict(spec.labels))
            return await super().submit(spec)

    result = await run_plan(plan, Recording(provider=provider), run_dir=run_dir, **FAST)
    assert result.ok
    journal = Journal.load(run_dir)
    assert len(journal.run_id) == 32
    assert Journal.load(run_dir).run_id == journal.run_id  # kept, not made up again
    assert [labels["altar.submission"] for labels in seen] == [
        submission_key(journal.run_id, "b", 1)
    ]
    assert journal.tasks["b"].attempts[0].key == submission_key(journal.run_id, "b", 1)
