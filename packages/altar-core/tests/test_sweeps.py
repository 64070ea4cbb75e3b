"""Sweeps: a [[tasks]] entry with a matrix expands to one task per combination (issue 23)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from altar.execution import PlanError
from altar.execution.cli import command as cli
from altar.execution.plans import plan as plan_module
from altar.execution.plans import sweeps
from altar.execution.plans.plan import Plan, load_plan, parse_plan
from altar.execution.state.records import spec_digest

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "sweep" / "plan.toml"

SWEEP = """\
[backend]
type = "fake"

[[tasks]]
id = "prep-f{fold}"
kind = "prep"
matrix = { fold = [0, 1, 2] }
image = "busybox:latest"
command = ["sh", "-c", "prep {fold} > {altar:path:p/f{fold}.txt}"]
inputs = [{ uri = "data/fold-{fold}.tsv", logical_path = "p/in-{fold}.tsv" }]
outputs = [{ uri = "out/p-{fold}.txt", logical_path = "p/f{fold}.txt" }]

[[tasks]]
id = "score-f{fold}-b{batch:02d}"
kind = "score"
matrix = { fold = [0, 1, 2], batch = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] }
image = "busybox:latest"
command = ["sh", "-c", "score {fold} {batch} | awk '{ print $1 }' > out-{batch:03d}"]
env = { FOLD = "{fold}", HOME_TOO = "${HOME}" }
labels = { fold = "{fold}", batch = "{batch:02d}" }
after = ["prep-f{fold}"]
outputs = [{ uri = "out/s-{fold}-{batch}.txt", logical_path = "s/f{fold}-b{batch:02d}.txt" }]

[[tasks]]
id = "summary"
kind = "summarize"
image = "busybox:latest"
command = ["cat"]
after = ["score-*"]
"""


def parse(text: str, tmp_path: Path | None = None) -> Plan:
    import tomllib

    return parse_plan(tomllib.loads(text), source="plan.toml", base_dir=tmp_path)


def test_a_matrix_expands_in_place_in_the_matrix_order(tmp_path):
    plan = parse(SWEEP, tmp_path)
    ids = [task.id for task in plan.tasks]
    assert len(ids) == 3 + 30 + 1
    assert ids[:5] == ["prep-f0", "prep-f1", "prep-f2", "score-f0-b01", "score-f0-b02"]
    assert ids[12:14] == ["score-f0-b10", "score-f1-b01"]
    assert ids[-2:] == ["score-f2-b10", "summary"]
    [prep, score] = plan.sweeps
    assert (prep.field, prep.id, prep.count) == ("tasks[0]", "prep-f{fold}", 3)
    assert score.keys == (("fold", 3), ("batch", 10))
    assert score.describe() == "tasks[1] score-f{fold}-b{batch:02d}: 3 fold x 10 batch = 30 task(s)"


def test_values_fill_every_field_and_other_braces_stay(tmp_path):
    plan = parse(SWEEP, tmp_path)
    task = plan.task("score-f2-b07")
    assert task.spec.command[2] == "score 2 7 | awk '{ print $1 }' > out-007"
    assert task.spec.env == {"FOLD": "2", "HOME_TOO": "${HOME}"}
    assert task.spec.labels == {"fold": "2", "batch": "07"}
    assert task.spec.outputs[0].logical_path == "s/f2-b07.txt"
    assert task.spec.outputs[0].uri == str(tmp_path / "out" / "s-2-7.txt")
    prep = plan.task("prep-f1").spec
    # {altar:...} is the runner's: only the {fold} inside it is the sweep's
    assert prep.command[2] == "prep 1 > {altar:path:p/f1.txt}"
    assert prep.inputs[0].uri == str(tmp_path / "data" / "fold-1.tsv")
    assert task.origin == "tasks[1][fold=2, batch=7]"


def test_a_sweep_task_runs_after_the_matching_task_and_a_pattern_after_all(tmp_path):
    plan = parse(SWEEP, tmp_path)
    assert plan.dependencies["score-f1-b04"] == ("prep-f1",)
    summary = plan.dependencies["summary"]
    assert len(summary) == 30
    assert (summary[0], summary[-1]) == ("score-f0-b01", "score-f2-b10")


def test_a_sweep_gives_the_tasks_written_out_by_hand():
    """The expansion is plain tasks: the same specs (and journal digests) as writing them out."""
    swept = parse(
        textwrap.dedent("""\
        [[tasks]]
        id = "t-{n}"
        kind = "k"
        matrix = { n = [1, 2] }
        image = "busybox:latest"
        command = ["echo", "{n}"]
        labels = { n = "{n}" }
        """)
    )
    by_hand = parse(
        textwrap.dedent("""\
        [[tasks]]
        id = "t-1"
        kind = "k"
        image = "busybox:latest"
        command = ["echo", "1"]
        labels = { n = "1" }

        [[tasks]]
        id = "t-2"
        kind = "k"
        image = "busybox:latest"
        command = ["echo", "2"]
        labels = { n = "2" }
        """)
    )
    assert swept.tasks == by_hand.tasks
    digests = [[spec_digest(t.spec) for t in plan.tasks] for plan in (swept, by_hand)]
    assert digests[0] == digests[1]
    assert by_hand.sweeps == ()


def test_doubled_braces_are_literal():
    plan = parse(
        '[[tasks]]\nid = "t-{n}"\nkind = "k"\nmatrix = { n = [1] }\nimage = "i"\n'
        'command = ["awk", "{{print}} {n}"]\n'
    )
    assert plan.tasks[0].spec.command == ["awk", "{print} 1"]


BASE = '[[tasks]]\nkind = "k"\nimage = "i"\ncommand = ["echo", "{n}"]\n'


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            'id = "t-{n}"\nmatrix = { n = [1] }\nlabels = { x = "{m}" }\n',
            "plan.toml: tasks[0].labels.x: unknown placeholder {m}: the matrix has n "
            "(write {{m}} for literal braces)",
        ),
        ('id = "t"\nmatrix = {}\n', "plan.toml: tasks[0].matrix: is empty: it would expand"),
        ('id = "t-{n}"\nmatrix = { n = [] }\n', "tasks[0].matrix.n: must be a non-empty"),
        ('id = "t-{n}"\nmatrix = { n = [1, 1] }\n', "plan.toml: tasks[0].matrix.n: 1 is listed"),
        ('id = "t-{n}"\nmatrix = { n = [true] }\n', "tasks[0].matrix.n: values are strings or"),
        ('id = "t-{n}"\nmatrix = [1, 2]\n', "plan.toml: tasks[0].matrix: must be a table"),
        ('id = "t-{altar}"\nmatrix = { altar = [1] }\n', "tasks[0].matrix.altar: a matrix key"),
        ("matrix = { n = [1] }\n", "plan.toml: tasks[0].id: a task with a matrix needs an id"),
        (
            'id = "t-{n}"\nmatrix = { n = [1], m = [2, 3] }\n',
            "plan.toml: tasks[0].id: 't-{n}' does not name matrix key(s) m",
        ),
        (
            'id = "t-{n:.0f}"\nmatrix = { n = [1.1, 1.2] }\n',
            "plan.toml: tasks[0].id: 't-{n:.0f}' gives 't-1' for both tasks[0][n=1.1] and "
            "tasks[0][n=1.2]",
        ),
        (
            'id = "t-{n:02d}"\nmatrix = { n = ["a"] }\n',
            "plan.toml: tasks[0].id: {n:02d} cannot format 'a'",
        ),
        (
            'id = "t-{n}"\nmatrix = { n = ["a b"] }\n',
            "plan.toml: tasks[0][n='a b'].id: must start with a letter or digit",
        ),
        (
            'id = "t-{n}"\nmatrix = { n = [1] }\nafter = ["other-*"]\n',
            "plan.toml: tasks[0][n=1].after[0]: 'other-*' matches no other task's id",
        ),
        ('id = "t-{n}"\nmatrix = { n = [1] }\ncomand = []\n', "tasks[0].comand: unknown"),
    ],
)
def test_bad_sweeps_are_one_line_naming_the_field(extra, message):
    with pytest.raises(PlanError) as error:
        parse(BASE + extra)
    assert message in str(error.value)


def test_too_large_expansions_are_refused_before_expanding(monkeypatch: pytest.MonkeyPatch):
    # a smaller limit keeps the test fast; the checks read the module's constant
    monkeypatch.setattr(sweeps, "MAX_TASKS", 10_000)
    monkeypatch.setattr(plan_module, "MAX_TASKS", 10_000)
    big = list(range(101))
    with pytest.raises(PlanError) as error:
        parse(BASE + f'id = "t-{{n}}-{{m}}"\nmatrix = {{ n = {big}, m = {big} }}\n')
    assert str(error.value) == (
        "plan.toml: tasks[0].matrix: expands to 10201 tasks (101 n x 101 m); a plan may have "
        "at most 10000"
    )
    half = list(range(10_000 // 2 + 1))
    twice = (BASE + f'id = "a-{{n}}"\nmatrix = {{ n = {half} }}\n') * 2
    with pytest.raises(PlanError, match=r"plan\.toml: tasks: 10002 tasks after expanding"):
        parse(twice.replace('"a-{n}"', '"b-{n}"', 1))


def test_ids_two_sweeps_share_are_refused_naming_both():
    text = (BASE + 'id = "t-{n}"\nmatrix = { n = [1, 2] }\n') + (
        BASE + 'id = "t-{n}"\nmatrix = { n = [2, 3] }\n'
    )
    with pytest.raises(PlanError) as error:
        parse(text)
    assert str(error.value) == (
        "plan.toml: tasks[1][n=2].id: 't-2' is already the id of tasks[0][n=2]; task ids must "
        "be unique"
    )


def test_the_issue_plan_is_at_most_40_lines_and_31_tasks():
    lines = EXAMPLE.read_text().splitlines()
    assert len(lines) <= 40
    plan = load_plan(EXAMPLE)
    assert len(plan.tasks) == 31
    assert [s.count for s in plan.sweeps] == [30]
    assert plan.dependencies["summary"] == tuple(t.id for t in plan.tasks[:30])
    assert plan.tasks[6].id == "score-f0-b07"


def test_check_prints_the_expansion_count(tmp_path, capsys, monkeypatch):
    pytest.importorskip("altar.conformance")
    monkeypatch.chdir(tmp_path)
    code = cli.main(["check", str(EXAMPLE), "--backend", "in-process"])
    out = capsys.readouterr().out
    assert code == 0
    assert ": 31 task(s) on in-process" in out
    assert "sweep tasks[0] score-f{fold}-b{batch:02d}: 3 fold x 10 batch = 30 task(s)" in out
    code = cli.main(["check", str(EXAMPLE), "--backend", "in-process", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert (code, data["tasks"]) == (0, 31)
    assert data["sweeps"] == [
        {
            "field": "tasks[0]",
            "id": "score-f{fold}-b{batch:02d}",
            "matrix": {"fold": 3, "batch": 10},
            "tasks": 30,
        }
    ]


def test_check_json_of_a_bad_sweep_lists_every_problem(tmp_path, capsys):
    path = tmp_path / "p.toml"
    path.write_text(
        BASE + 'id = "t-{n}"\nmatrix = { n = [] }\n' + BASE + 'id = "u-{n}"\nmatrix = {}\n'
    )
    code = cli.main(["check", str(path), "--backend", "in-process", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 2
    assert [p.split(": ")[1] for p in data["problems"]] == ["tasks[0].matrix.n", "tasks[1].matrix"]
    assert (data["sweeps"], data["outputs_dir"]) == ([], None)


def test_a_staging_error_names_the_sweep_task_it_came_from(tmp_path):
    plan = parse(SWEEP, tmp_path)
    uri = str(tmp_path / "data" / "fold-1.tsv")
    assert plan.input_fields(f"staged input {uri!r} does not exist") == [
        "tasks[0][fold=1].inputs[0] (task prep-f1)"
    ]


def test_a_per_fold_summary_waits_for_its_folds_tasks_only(tmp_path):
    per_fold = (
        '\n[[tasks]]\nid = "sum-f{fold}"\nkind = "s"\nmatrix = { fold = [0, 1, 2] }\n'
        'image = "i"\ncommand = ["cat"]\nafter = ["score-f{fold}-*"]\n'
    )
    plan = parse(SWEEP + per_fold, tmp_path)
    assert plan.dependencies["sum-f1"] == tuple(f"score-f1-b{b:02d}" for b in range(1, 11))
