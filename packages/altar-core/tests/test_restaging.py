"""Every start of a run stages what the plan names now (issue 23: never run on stale bytes)."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

import pytest
from altar.execution import Transfer
from altar.execution.cli import command as cli
from altar.execution.errors import JournalError
from altar.execution.plans.plan import Plan, PlanTask
from altar.execution.run.retrying import reopen_failed_in
from altar.execution.run.runner import StagingError, run_plan
from altar.execution.state.journal import Journal

from .runkit import FAST, spec


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def one_task_plan(source, digest: str | None, command: str = "echo t") -> Plan:
    transfer = Transfer(str(source), "in/data.txt", digest=digest)
    return Plan(
        "fake", {}, [PlanTask("t", spec("t", inputs=[transfer], command=["sh", "-c", command]))]
    )


def staged_paths(provider) -> list[list[str]]:
    return [[t.uri for t in call] for call in provider.stage_calls]


async def run(plan, provider, backend_class, run_dir, outcome=None, **options):
    """One run of ``plan`` on a fresh backend; ``outcome`` scripts task ``t``'s next attempt."""
    if outcome is not None:
        provider.script = {"t": [outcome]}
    return await run_plan(
        plan, backend_class(provider=provider), run_dir=run_dir, **FAST, **options
    )


@pytest.mark.asyncio
async def test_an_unchanged_plan_is_not_staged_again_on_resume(
    tmp_path, provider, fake_backend_class
):
    source = tmp_path / "data.txt"
    source.write_bytes(b"good\n")
    plan = one_task_plan(source, sha(b"good\n"))
    await run(plan, provider, fake_backend_class, tmp_path / "r", "exit_1")
    reopen_failed_in(tmp_path / "r", plan)
    result = await run(plan, provider, fake_backend_class, tmp_path / "r", "ok")
    assert result.ok
    assert len(provider.stage_calls) == 1  # one stat per input, nothing re-sent
    entry = Journal.load(tmp_path / "r").inputs["in/data.txt"]
    assert entry["digest"] == sha(b"good\n")
    assert entry["source"][0] == 5  # its size


@pytest.mark.asyncio
async def test_a_fixed_input_without_digest_is_staged_again_by_retry_failed(
    tmp_path, provider, fake_backend_class
):
    source = tmp_path / "data.txt"
    source.write_bytes(b"bad\n")
    plan = one_task_plan(source, None)
    await run(plan, provider, fake_backend_class, tmp_path / "r", "exit_1")
    source.write_bytes(b"good, and longer\n")
    reopen_failed_in(tmp_path / "r", plan)
    events = []
    await run(plan, provider, fake_backend_class, tmp_path / "r", "ok", on_event=events.append)
    assert staged_paths(provider) == [[str(source)], [str(source)]]
    assert any("1 changed since they were staged: 'in/data.txt'" in e.message for e in events)


@pytest.mark.asyncio
async def test_an_edited_uri_and_digest_are_staged_before_the_retry(
    tmp_path, provider, fake_backend_class
):
    old, new = tmp_path / "old.txt", tmp_path / "new.txt"
    old.write_bytes(b"old\n")
    new.write_bytes(b"new\n")
    await run(
        one_task_plan(old, sha(b"old\n")), provider, fake_backend_class, tmp_path / "r", "exit_1"
    )
    edited = one_task_plan(new, sha(b"new\n"))
    reopen_failed_in(tmp_path / "r", edited)
    await run(edited, provider, fake_backend_class, tmp_path / "r", "ok")
    assert provider.stage_calls[-1] == [Transfer(str(new), "in/data.txt", digest=sha(b"new\n"))]
    # and the retry was submitted with the plan's new input
    last = [t for t in provider.tasks.values() if t.key == "t"][-1]
    assert last.spec.inputs[0].digest == sha(b"new\n")


@pytest.mark.asyncio
async def test_a_replaced_source_under_the_same_digest_is_refused(
    tmp_path, provider, fake_backend_class
):
    source = tmp_path / "data.txt"
    source.write_bytes(b"good\n")
    plan = one_task_plan(source, sha(b"good\n"))
    await run(plan, provider, fake_backend_class, tmp_path / "r", "exit_1")
    source.write_bytes(b"other\n")  # new bytes; the plan still names the old digest
    reopen_failed_in(tmp_path / "r", plan)
    submits = dict(provider.submits)
    with pytest.raises(StagingError, match=r"changed since it was staged.*put their digest"):
        await run(plan, provider, fake_backend_class, tmp_path / "r")
    assert provider.submits == submits  # nothing ran on bytes that do not match
    journal = Journal.load(tmp_path / "r")
    assert "tasks[0].inputs[0] (task t): staging failed" in (journal.staging_error or "")


@pytest.mark.asyncio
async def test_a_staging_failure_is_journaled_and_a_corrected_digest_resumes(
    tmp_path, provider, fake_backend_class
):
    source = tmp_path / "data.txt"
    source.write_bytes(b"good\n")

    class Verifying(fake_backend_class):
        async def stage_inputs(self, transfers):
            for transfer in transfers:
                data = await asyncio.to_thread(Path(transfer.uri).read_bytes)
                if sha(data) != transfer.digest:
                    raise ValueError(f"{transfer.uri!r} does not match {transfer.digest}")
            await super().stage_inputs(transfers)

    wrong = one_task_plan(source, sha(b"typo"))
    with pytest.raises(StagingError):
        await run(wrong, provider, Verifying, tmp_path / "r")
    journal = Journal.load(tmp_path / "r")
    assert "does not match" in (journal.staging_error or "")
    assert "run the same `altar run` again" in (journal.staging_error or "")
    # the corrected digest: the task never ran, so the edit is taken on a plain resume
    events = []
    corrected = one_task_plan(source, sha(b"good\n"))
    result = await run(corrected, provider, Verifying, tmp_path / "r", on_event=events.append)
    assert result.ok
    assert Journal.load(tmp_path / "r").staging_error is None
    assert [e.kind for e in events if e.kind == "edited"] == ["edited"]


@pytest.mark.asyncio
async def test_a_submitted_task_may_still_not_change(tmp_path, provider, fake_backend_class):
    source = tmp_path / "data.txt"
    source.write_bytes(b"good\n")
    await run(one_task_plan(source, None), provider, fake_backend_class, tmp_path / "r")
    changed = one_task_plan(source, None, "echo other")
    with pytest.raises(JournalError, match="changed since this run started, and it was submitted"):
        await run(changed, provider, fake_backend_class, tmp_path / "r")


@pytest.mark.asyncio
async def test_a_journal_without_staging_entries_stages_everything_again(
    tmp_path, provider, fake_backend_class
):
    """A run directory of altar-core before 0.6 recorded only ``staged = true``."""
    source = tmp_path / "data.txt"
    source.write_bytes(b"good\n")
    plan = one_task_plan(source, None)
    await run(plan, provider, fake_backend_class, tmp_path / "r", "exit_1")
    journal = Journal.load(tmp_path / "r")
    journal.inputs = {}
    journal.save()
    reopen_failed_in(tmp_path / "r", plan)
    await run(plan, provider, fake_backend_class, tmp_path / "r", "ok")
    assert len(provider.stage_calls) == 2


def test_status_shows_a_staging_failure_and_its_fix(tmp_path, fake_registry, capsys):
    (tmp_path / "data.txt").write_bytes(b"good\n")
    plan = tmp_path / "plan.toml"
    plan.write_text(
        '[backend]\ntype = "fake"\n\n[[tasks]]\nid = "t"\nkind = "k"\nimage = "busybox:latest"\n'
        'command = ["true"]\ninputs = [{ uri = "data.txt", logical_path = "in/d" }]\n'
    )
    fake_registry.stage_error = "No space left on device"
    assert cli.main(["run", str(plan), "--run-dir", str(tmp_path / "r")]) == 1
    capsys.readouterr()
    cli.main(["status", str(tmp_path / "r")])
    out = capsys.readouterr().out
    assert "staging failed: staging inputs failed: OSError: No space left on device; fix it" in out
    cli.main(["status", str(tmp_path / "r"), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert "No space left on device" in data["staging_error"]
