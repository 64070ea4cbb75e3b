"""A lane per backend in the report of a routed run (issue 26): model, page and ``altar report``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from altar.execution import TaskFailure, TaskHandle
from altar.execution.cli import command as cli
from altar.execution.report import build_report, render_html
from altar.execution.run.routed import LABEL_ROUTE
from altar.execution.state.journal import Attempt, Journal, TaskRecord

T0 = 1_800_000_000.0
SHA = "sha256:" + "0" * 64

ROUTED_PLAN = """
[backends.cpu]
type = "in-process"
options = { data_root = "cpu-root" }

[backends.gpu]
type = "in-process"
options = { data_root = "gpu-root" }

[[tasks]]
id = "make"
kind = "make"
image = "busybox:latest"
command = ["sh", "-c", "printf made > {altar:mount_root}/a.txt"]
outputs = [{ uri = "out/a.txt", logical_path = "a.txt" }]

[[tasks]]
id = "use"
kind = "use"
image = "busybox:latest"
backend = "gpu"
command = ["sh", "-c", "cat {altar:mount_root}/a.txt > {altar:mount_root}/b.txt"]
inputs = [{ uri = "out/a.txt", logical_path = "a.txt" }]
outputs = [{ uri = "out/b.txt", logical_path = "b.txt" }]
"""


def _handle(route: str | None, n: int) -> TaskHandle:
    return TaskHandle("routed", f"id-{n}", {LABEL_ROUTE: route} if route else {}, None)


def _routed_journal(run_dir: Path) -> Journal:
    """Three tasks: ``fold`` preempted on ``gpu`` then finished on its fallback ``hpc``,
    ``split`` on ``hpc`` and ``sum`` failed on ``cpu``; ``late`` never submitted."""
    preempted = TaskFailure("job_failed", "PREEMPTED", provider_ending="preempted")
    fold = TaskRecord("fold", "fold", SHA, state="succeeded", outputs_collected=True)
    fold.attempts = [
        Attempt(1, "failed", _handle("gpu", 1), preempted, T0 + 1, T0 + 2, T0 + 6),
        Attempt(2, "succeeded", _handle("hpc", 2), None, T0 + 7, T0 + 8, T0 + 9),
    ]
    split = TaskRecord("split", "split", SHA, state="succeeded", outputs_collected=True)
    split.attempts = [Attempt(1, "succeeded", _handle("hpc", 3), None, T0 + 1, T0 + 2, T0 + 8)]
    failed = TaskFailure("exit_1", "exit 1", True, 1)
    total = TaskRecord("sum", "sum", SHA, state="failed")
    total.attempts = [Attempt(1, "failed", _handle("cpu", 4), failed, T0 + 9, T0 + 9, T0 + 10)]
    late = TaskRecord("late", "sum", SHA, state="skipped", detail="dependency sum failed")
    records = {r.id: r for r in (fold, split, total, late)}
    return Journal(run_dir, "routed", {}, "plan.toml", records, finished=True, created_at=T0)


def test_each_backend_is_a_lane_with_its_own_outcomes_attempts_and_slots(tmp_path: Path) -> None:
    report = build_report(_routed_journal(tmp_path / "run"), [])
    lanes = {lane.name: lane for lane in report.lanes}
    assert sorted(lanes) == ["cpu", "gpu", "hpc"]
    # a task counts where its last attempt ran; its earlier attempt still counts where it ran
    assert dict(lanes["hpc"].counts) == {"succeeded": 2}
    assert (lanes["hpc"].attempts, lanes["hpc"].peak) == (2, 2)
    assert (dict(lanes["gpu"].counts), lanes["gpu"].attempts) == ({}, 1)
    assert lanes["gpu"].provider_endings == 1
    assert dict(lanes["cpu"].counts) == {"failed": 1}
    assert lanes["hpc"].slots[0] == (T0 + 1, 1)
    fold = next(row for row in report.tasks if row.id == "fold")
    assert [bar.backend for bar in fold.attempts] == ["gpu", "hpc"]


def test_the_page_draws_a_lane_per_backend_and_names_where_each_attempt_ran(
    tmp_path: Path,
) -> None:
    page = render_html(build_report(_routed_journal(tmp_path / "run"), []))
    assert '<table id="lanes">' in page
    assert re.findall(r'<tr data-lane="([^"]+)">', page) == ["cpu", "gpu", "hpc"]
    assert 'id="slots-hpc"' in page
    assert 'id="slots-gpu"' in page
    # the timeline: a heading per lane, in first-seen order, tasks under their last backend
    headings = re.findall(r'<text class="lane"[^>]*>([^<]+)</text>', page)
    assert headings == ["on hpc", "on cpu", "not submitted"]
    timeline = page[page.index('id="timeline"') : page.index("</svg>", page.index('id="timeline"'))]
    assert timeline.index("on hpc") < timeline.index('data-task="fold"') < timeline.index("on cpu")
    assert "fold attempt 1: running 4.0s on gpu" in page


def test_a_run_on_one_backend_has_no_lanes(tmp_path: Path) -> None:
    record = TaskRecord("a", "k", SHA, state="succeeded", outputs_collected=True)
    record.attempts = [Attempt(1, "succeeded", _handle(None, 1), None, T0, T0 + 1, T0 + 2)]
    journal = Journal(tmp_path, "fake", {}, "plan.toml", {"a": record}, created_at=T0)
    report = build_report(journal, [])
    assert report.lanes == ()
    page = render_html(report)
    assert 'id="lanes"' not in page
    assert 'class="lane"' not in page


def test_altar_report_of_a_real_routed_run_has_both_lanes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    plan = tmp_path / "plan.toml"
    plan.write_text(ROUTED_PLAN)
    run_dir = tmp_path / "r1"
    assert cli.main(["run", str(plan), "--run-dir", str(run_dir)]) == 0
    assert cli.main(["report", str(run_dir)]) == 0
    capsys.readouterr()
    page = (run_dir / "report.html").read_text()
    assert re.findall(r'<tr data-lane="([^"]+)">', page) == ["cpu", "gpu"]
    assert re.findall(r'<text class="lane"[^>]*>([^<]+)</text>', page) == ["on cpu", "on gpu"]
