"""``altar compare RUN_DIR RUN_DIR``: two existing runs, nothing run again (issue 23)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

import pytest
from altar.execution.cli import command as cli
from altar.execution.run.compare import compare_runs
from altar.execution.state.journal import Journal

PLAN = """\
OUTPUTS_DIR
[backend]
type = "fake"

[[tasks]]
id = "score-{n}"
kind = "score"
matrix = { n = [0, 1] }
image = "busybox:latest"
command = ["sh", "-c", "echo {n}"]
labels = { task = "score-{n}" }
outputs = [{ uri = "s-{n}.txt", logical_path = "jobs/s-{n}.txt" }]
"""


def write(tmp_path: Path, outputs_dir: str | None = "results/{altar:run}") -> Path:
    path = tmp_path / "plan.toml"
    line = f'outputs_dir = "{outputs_dir}"' if outputs_dir else ""
    path.write_text(PLAN.replace("OUTPUTS_DIR", line))
    return path


def run(argv: list[object], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def two_runs(provider, tmp_path, capsys, *, fail_second: bool, plan: Path | None = None):
    plan = plan or write(tmp_path)
    for name in ("mon", "tue"):
        provider.submits.clear()
        if name == "tue" and fail_second:
            provider.script = {"score-1": ["exit_3"]}
            provider.output_bytes = {"score-0": b"changed\n"}
        code, _, err = run(["run", plan, "--run-dir", tmp_path / name, "--max-retries", 0], capsys)
        assert code == (1 if name == "tue" and fail_second else 0), err
    return tmp_path / "mon", tmp_path / "tue"


def test_identical_runs_compare_equal_without_running_anything(fake_registry, tmp_path, capsys):
    mon, tue = two_runs(fake_registry, tmp_path, capsys, fail_second=False)
    submits = dict(fake_registry.submits)
    code, out, err = run(["compare", mon, tue], capsys)
    assert code == 0, err
    assert out == (
        "run mon (fake) vs run tue (fake): no differences in commands, outputs or outcomes "
        "across 2 task(s)\n"
    )
    assert fake_registry.submits == submits  # nothing ran
    assert Journal.load(tue).finished


def test_a_failing_side_shows_its_log_tail(fake_registry, tmp_path, capsys):
    mon, tue = two_runs(fake_registry, tmp_path, capsys, fail_second=True)
    code, out, _ = run(["compare", mon, tue], capsys)
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == "run mon (fake) vs run tue (fake): 3 difference(s)"
    assert lines[1].split()[:3] == ["score-0", "output", "jobs/s-0.txt:"]
    assert "score-1  output   jobs/s-1.txt: mon sha256:" in out
    assert out.rstrip().endswith(
        "score-1  outcome  mon succeeded; tue failed (exit_3)\n"
        "      tue log tail:\n"
        "        log tail of score-1: it went wrong"
    )
    code, out, _ = run(["compare", mon, tue, "--json"], capsys)
    data = json.loads(out)
    assert (code, data["ok"]) == (1, False)
    assert data["differences"][-1]["log_tails"] == {"tue": "log tail of score-1: it went wrong"}


def test_the_backend_gives_the_log_tail_the_journal_did_not_keep(
    fake_registry, fake_backend_class, tmp_path, capsys
):
    mon, tue = two_runs(fake_registry, tmp_path, capsys, fail_second=True)
    journal = Journal.load(tue)
    record = journal.tasks["score-1"]
    record.detail = None
    record.attempts[-1].failure = replace(record.attempts[-1].failure, detail="")
    journal.save()
    bare = asyncio.run(compare_runs(mon, tue))
    assert bare.differences[-1].log_tails == ()
    backend = fake_backend_class(provider=fake_registry)
    report = asyncio.run(compare_runs(mon, tue, backends=(None, backend)))
    assert report.differences[-1].log_tails == (("tue", "log tail of score-1: it went wrong"),)


def test_runs_sharing_an_output_location_get_a_note(fake_registry, tmp_path, capsys):
    mon, tue = two_runs(
        fake_registry, tmp_path, capsys, fail_second=False, plan=write(tmp_path, None)
    )
    code, out, _ = run(["compare", mon, tue], capsys)
    assert code == 0
    assert (
        f"note: both runs collect 2 output(s) to one location ({tmp_path / 's-0.txt'}, ...)" in out
    )


def test_a_plan_changed_since_a_run_is_not_compared_as_if_it_ran(fake_registry, tmp_path, capsys):
    mon, tue = two_runs(fake_registry, tmp_path, capsys, fail_second=False)
    plan = write(tmp_path)
    plan.write_text(plan.read_text().replace('"echo {n}"', '"echo {n} again"'))
    code, out, _ = run(["compare", mon, tue], capsys)
    assert code == 0
    assert "note: mon: its plan changed since the run for 2 task(s) (score-0, score-1)" in out


def test_compare_usage_errors(fake_registry, tmp_path, capsys):
    mon, _ = two_runs(fake_registry, tmp_path, capsys, fail_second=False)
    code, _, err = run(["compare", mon, tmp_path / "nope"], capsys)
    assert code == 2
    assert f"{tmp_path / 'nope'} is not a run directory (no journal)" in err
    code, _, err = run(["compare", mon, mon, "--backend", "fake"], capsys)
    assert (code, "--backend: not used when comparing two run directories" in err) == (2, True)
    code, _, err = run(["compare", write(tmp_path), "--backend", "fake"], capsys)
    assert code == 2
    assert "required to compare a plan on two backends: --reference" in err


def test_a_plan_named_relative_to_where_it_ran_is_found_from_elsewhere(
    fake_registry, tmp_path, capsys, monkeypatch
):
    write(tmp_path)
    monkeypatch.chdir(tmp_path)
    for name in ("mon", "tue"):
        assert run(["run", "plan.toml", "--run-dir", Path("runs") / name], capsys)[0] == 0
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert Journal.load(tmp_path / "runs" / "mon").plan_source == "plan.toml"
    code, out, _ = run(["compare", tmp_path / "runs" / "mon", tmp_path / "runs" / "tue"], capsys)
    assert (code, "note:" in out) == (0, False), out


def test_runs_of_one_plan_in_two_checkouts_compare_equal(fake_registry, tmp_path, capsys):
    """Their specs differ in the absolute uris the plans resolve to, not in what ran."""
    dirs = []
    for name in ("laptop", "cluster"):
        (tmp_path / name).mkdir()
        plan = write(tmp_path / name)
        fake_registry.submits.clear()
        assert run(["run", plan, "--run-dir", tmp_path / name / "run"], capsys)[0] == 0
        dirs.append(tmp_path / name / "run")
    digests = [Journal.load(d).tasks["score-0"].spec_sha256 for d in dirs]
    assert digests[0] != digests[1]
    code, out, _ = run(["compare", *dirs], capsys)
    assert code == 0, out
    assert "no differences in commands, outputs or outcomes across 2 task(s)" in out
