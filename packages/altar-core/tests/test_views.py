"""Grouped views of large runs (issue 24): the pure grouping, ``altar status`` and the report."""

from __future__ import annotations

import json
from pathlib import Path

from altar.execution import (
    TaskFailure,
    TaskHandle,
    TaskState,
    TaskStatus,
)
from altar.execution.cli import command as cli
from altar.execution.report import build_report, render_html
from altar.execution.report import grouped as grouped_module
from altar.execution.report.model import TaskRow, thin_steps
from altar.execution.run.budget import RetryBudget
from altar.execution.state.journal import Attempt, Journal, TaskRecord
from altar.execution.state.runs import row_state, task_row, task_row_dict
from altar.execution.state.views import (
    Group,
    group_tasks,
    group_threshold,
    grouping_labels,
    matches,
    user_labels,
)

T0 = 1_800_000_000.0


def test_grouping_labels_keep_the_keys_that_split_the_run_in_a_few_parts():
    labels = [
        {"fold": str(i % 3), "seed": str(i), "batch": "b1", "altar.task": f"t{i}"}
        for i in range(40)
    ]
    assert grouping_labels(labels) == ("fold",)  # seed: 40 values; batch: one; altar.*: ours
    assert grouping_labels(labels, most=50) == ("fold", "seed")
    assert grouping_labels([{"fold": "0"}, {}]) == ("fold",)  # unlabelled is a value: "-"
    assert grouping_labels([]) == ()


def test_groups_come_failed_first_then_running_pending_succeeded_cached():
    tasks = [
        ("a", {"fold": "0"}, "succeeded"),
        ("a", {"fold": "0"}, "cached"),
        ("a", {"fold": "1"}, "running"),
        ("b", {"fold": "0"}, "succeeded"),
        ("b", {"fold": "0"}, "failed"),
        ("b", {}, "pending"),
    ]
    groups = group_tasks(tasks, ("fold",))
    assert [g.name for g in groups] == ["b fold=0", "a fold=1", "b fold=-", "a fold=0"]
    assert list(groups[0].counts.items()) == [("failed", 1), ("succeeded", 1)]
    assert list(groups[-1].counts.items()) == [("succeeded", 1), ("cached", 1)]
    assert [g.total for g in groups] == [2, 1, 1, 2]
    assert groups[0].to_dict() == {
        "name": "b fold=0",
        "kind": "b",
        "labels": {"fold": "0"},
        "total": 2,
        "counts": {"failed": 1, "succeeded": 1},
    }
    assert [g.name for g in group_tasks(tasks, ())] == ["b", "a"]


def test_a_selector_names_a_kind_and_labels():
    labels = {"fold": "3", "batch": "b1"}
    assert matches("train", "train", labels)
    assert matches("fold=3", "train", labels)
    assert matches("train fold=3 batch=b1", "train", labels)
    assert not matches("train fold=2", "train", labels)
    assert not matches("eval", "train", labels)
    assert matches("seed=-", "train", labels)  # a label a task lacks reads "-"


def test_the_threshold_comes_from_the_environment():
    assert group_threshold(environ={}) == 200
    assert group_threshold(2000, environ={}) == 2000
    assert group_threshold(environ={"ALTAR_GROUP_THRESHOLD": "3"}) == 3
    assert group_threshold(environ={"ALTAR_GROUP_THRESHOLD": "many"}) == 200


def test_thinned_slot_steps_keep_the_peak_and_the_end():
    steps = [(float(i), (i * 7919) % 50) for i in range(10_000)] + [(10_000.0, 0)]
    steps[4321] = (4321.0, 99)
    thin = thin_steps(steps, at_most=100)
    assert len(thin) <= 102
    assert max(count for _, count in thin) == 99
    assert thin[-1] == (10_000.0, 0)
    assert thin[0][0] == steps[0][0]
    assert thin_steps(steps[:50], at_most=100) == tuple(steps[:50])


def _record(i: int, state: str, failure: TaskFailure | None = None) -> TaskRecord:
    record = TaskRecord(f"t{i:03d}", f"kind{i % 2}", "sha256:" + "0" * 64, state=state)
    handle = TaskHandle("fake", f"id-{i}", {"fold": str(i % 3), "altar.task": f"t{i:03d}"})
    record.attempts.append(Attempt(1, state, handle, failure, T0 + i, T0 + i + 1, T0 + i + 2))
    record.outputs_collected = state == "succeeded"
    if failure is not None:
        record.detail = "\n".join(f"line {n} of t{i:03d}" for n in range(30))
    return record


def test_row_state_is_the_status_of_the_row_it_does_not_build():
    exit_1 = TaskFailure("exit_1", "exit 1", True, 1)
    oom = TaskFailure("oom_killed", "killed", False, 137)
    records = [
        _record(0, "succeeded"),
        _record(1, "failed", exit_1),
        _record(2, "running"),
        _record(3, "succeeded"),
        _record(4, "skipped"),
    ]
    records[3].outputs_collected = False
    records[4].cached = {"run_id": "r", "task_id": "t"}
    records[4].state = "succeeded"
    handle = records[2].attempts[0].handle
    assert handle is not None
    polls = [
        None,
        TaskStatus(handle, TaskState.FAILED, oom),  # retried: queued
        TaskStatus(handle, TaskState.FAILED, exit_1),
        TaskStatus(handle, TaskState.SUCCEEDED),
    ]
    for record in records:
        for status in polls:
            for outputs in (None, frozenset(), frozenset({record.id})):
                row = task_row(record, status, RetryBudget(), outputs)
                assert row_state(record, status, RetryBudget(), outputs) == row.status
                assert task_row_dict(record, status, RetryBudget(), outputs) == row.to_dict()
    assert user_labels(records[0]) == {"fold": "0", "altar.task": "t000"}
    assert user_labels(TaskRecord("x", "k", "s")) == {}


def _journal(run_dir: Path, n: int, failed_every: int) -> Journal:
    exit_1 = TaskFailure("exit_1", "exit 1", True, 1)
    records = {}
    for i in range(n):
        failed = i % failed_every == failed_every - 1
        record = _record(i, "failed" if failed else "succeeded", exit_1 if failed else None)
        records[record.id] = record
    return Journal(run_dir, "fake", {}, "plan.toml", records, finished=True, created_at=T0)


def test_a_large_report_is_grouped_with_drill_down_and_every_failure(tmp_path, monkeypatch):
    monkeypatch.setattr(grouped_module, "ROWS_PER_GROUP", 4)
    monkeypatch.setattr(grouped_module, "FAILURES_WITH_TAIL", 3)
    report = build_report(_journal(tmp_path / "run", 120, failed_every=10))
    page = render_html(report, group_above=50)
    assert page.count('<details class="group"') == 6  # 2 kinds x 3 folds
    # a failed group comes first and opens; every group shows 4 rows (its failed ones first)
    first = page.index('<details class="group" id="group-0" open>')
    assert "kind1 fold=0" in page[first : first + 200]
    assert page.count('<tr id="task-') == 6 * 4
    assert "and 16 more: 16 succeeded" in page
    assert "altar status" in page
    assert "--group &#x27;kind0 fold=0&#x27;" in page
    # all 12 failures listed, the first 3 with their tails, the rest one line each
    failures = page[page.index('<div id="failures">') : page.index("<h2>Groups</h2>")]
    assert failures.count("line 29 of") == 3
    assert failures.count("<li><code>") == 9
    flat = render_html(report, group_above=200)  # a small run keeps its row per task
    assert flat.count('<tr id="task-') == 120
    assert '<details class="group"' not in flat


def test_report_groups_put_each_groups_failed_rows_first():
    rows = [
        TaskRow(f"t{i}", "k", "failed" if i == 3 else "succeeded", (), None, None, "")
        for i in range(5)
    ]
    (only,) = grouped_module.report_groups(rows)
    assert isinstance(only.group, Group)
    assert [t.id for t in only.rows] == ["t3", "t0", "t1", "t2", "t4"]


# -- altar status, on a small plan with the threshold lowered --------------------------------

PLAN_HEAD = '[backend]\ntype = "fake"\noptions = { slots = 4 }\n'
TASK = (
    '\n[[tasks]]\nid = "t{i}"\nkind = "{kind}"\nimage = "busybox:latest"\n'
    'command = ["true"]\nlabels = {{ fold = "{fold}", task = "t{i}" }}\n'
)


def run_cli(argv, capsys):
    code = cli.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_status_groups_a_run_above_the_threshold(fake_registry, tmp_path, capsys, monkeypatch):
    plan = tmp_path / "plan.toml"
    tasks = "".join(TASK.format(i=i, kind=f"k{i % 2}", fold=i % 3) for i in range(14))
    plan.write_text(PLAN_HEAD + tasks)
    fake_registry.script = {"t4": ["exit_3"], "t10": ["exit_3"]}
    run_dir = tmp_path / "r"
    code, _, err = run_cli(["run", plan, "--run-dir", run_dir], capsys)
    assert code == 1, err
    monkeypatch.setenv("ALTAR_GROUP_THRESHOLD", "5")
    code, out, _ = run_cli(["status", run_dir], capsys)
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == "14 tasks in 6 groups by kind and fold"  # 14 values of task: no group
    assert lines[2].split() == ["GROUP", "TASKS", "FAILED", "SUCCEEDED"]
    assert lines[3].split() == ["k0", "fold=1", "2", "2"]  # t4 and t10: k0, fold 1
    assert "failed: 2 (the last 5 lines of each failure)" in out
    assert "t4  k0  exit_3, exit code 3  (attempts: 1)\n    log tail of t4: it went wrong" in out
    assert "one group: --group 'k0 fold=1'" in out
    assert lines[-1] == f"14 tasks: 12 succeeded, 2 failed; run directory {run_dir}"
    assert "t0 " not in out  # no row for a task that is fine
    code, out, _ = run_cli(["status", run_dir, "--all"], capsys)
    assert out.count("\n") == 1 + 14 + 2
    assert "t13" in out
    code, out, _ = run_cli(["status", run_dir, "--group", "k1 fold=2"], capsys)
    assert [line.split()[0] for line in out.split("\n\n")[0].splitlines()[1:]] == ["t5", "t11"]
    assert "2 of 14 tasks match" in out
    code, out, _ = run_cli(["status", run_dir, "--state", "failed"], capsys)
    assert [line.split()[0] for line in out.split("\n\n")[0].splitlines()[1:]] == ["t4", "t10"]
    code, out, _ = run_cli(["status", run_dir, "--json"], capsys)
    data = json.loads(out)
    assert [t["id"] for t in data["tasks"]] == [f"t{i}" for i in range(14)]  # complete
    assert data["counts"] == {"succeeded": 12, "failed": 2}
    assert data["groups"][0] == {
        "name": "k0 fold=1",
        "kind": "k0",
        "labels": {"fold": "1"},
        "total": 2,
        "counts": {"failed": 2},
    }
    assert {"run_dir", "backend", "run_id", "ok", "driven", "staging_error"} <= set(data)
    code, out, _ = run_cli(["status", run_dir, "--json", "--state", "failed"], capsys)
    assert [t["id"] for t in json.loads(out)["tasks"]] == ["t4", "t10"]
    code, out, _ = run_cli(["report", run_dir, "--json"], capsys)
    assert json.loads(out)["grouped"] is True  # the report follows the same variable
    monkeypatch.setenv("ALTAR_GROUP_THRESHOLD", "14")  # at the threshold: still a row per task
    code, out, _ = run_cli(["status", run_dir], capsys)
    assert "GROUP" not in out
    assert out.count("\n") == 1 + 14 + 2
    code, out, _ = run_cli(["report", run_dir, "--json"], capsys)
    assert json.loads(out)["grouped"] is False
