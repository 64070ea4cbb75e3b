"""``outputs_dir``: where relative output uris go, per run with ``{altar:run}`` (issue 23)."""

from __future__ import annotations

from pathlib import Path

import pytest
from altar.execution import PlanError
from altar.execution.cli import command as cli
from altar.execution.plans.plan import load_plan, outputs_for_run, parse_plan
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
outputs = [
  { uri = "s-{n}.txt", logical_path = "jobs/s-{n}.txt" },
  { uri = "ABS/kept-{n}.txt", logical_path = "jobs/k-{n}.txt" },
]
"""


def write(tmp_path: Path, outputs_dir: str | None) -> Path:
    path = tmp_path / "plan" / "plan.toml"
    path.parent.mkdir(exist_ok=True)
    line = f'outputs_dir = "{outputs_dir}"' if outputs_dir is not None else ""
    path.write_text(PLAN.replace("OUTPUTS_DIR", line).replace("ABS", str(tmp_path / "abs")))
    return path


def run(argv: list[object], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = cli.main([str(a) for a in argv])
    return code, capsys.readouterr().err


def test_relative_output_uris_go_below_outputs_dir_and_absolute_ones_stay(tmp_path):
    plan = load_plan(write(tmp_path, "results/{altar:run}"))
    outputs = plan.task("score-1").spec.outputs
    assert outputs[0].uri == str(tmp_path / "plan" / "results" / "{altar:run}" / "s-1.txt")
    assert outputs[1].uri == str(tmp_path / "abs" / "kept-1.txt")
    assert plan.outputs_dir == "results/{altar:run}"
    mine = outputs_for_run(plan, tmp_path / "runs" / "monday")
    assert mine.task("score-1").spec.outputs[0].uri == str(
        tmp_path / "plan" / "results" / "monday" / "s-1.txt"
    )
    assert mine.dependencies == plan.dependencies


def test_without_outputs_dir_outputs_resolve_against_the_plan_as_before(tmp_path):
    plan = load_plan(write(tmp_path, None))
    assert plan.task("score-0").spec.outputs[0].uri == str(tmp_path / "plan" / "s-0.txt")
    assert plan.outputs_dir is None
    assert outputs_for_run(plan, tmp_path / "r") is plan


def test_a_uri_outputs_dir_is_joined_as_text():
    data = {
        "outputs_dir": "gs://bucket/results/{altar:run}/",
        "tasks": [{"kind": "k", "image": "i", "command": [], "outputs": [
            {"uri": "x/y.txt", "logical_path": "y.txt"}]}],
    }  # fmt: skip
    plan = parse_plan(data)
    assert plan.tasks[0].spec.outputs[0].uri == "gs://bucket/results/{altar:run}/x/y.txt"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('"results/{altar:mount_root}"', "outputs_dir: {altar:mount_root}: the only placeholder"),
        ("3", "outputs_dir: must be a folder or uri, got 3"),
        ('"  "', "outputs_dir: must be a folder or uri"),
        ('"r/{altar:run"', "outputs_dir: must be a folder or uri"),
    ],
)
def test_bad_outputs_dir_is_refused(tmp_path, value, message):
    path = tmp_path / "p.toml"
    path.write_text(f'outputs_dir = {value}\n[[tasks]]\nkind = "k"\nimage = "i"\ncommand = []\n')
    with pytest.raises(PlanError, match=r"p\.toml: ") as error:
        load_plan(path)
    assert message in str(error.value)


def test_two_runs_of_one_plan_keep_their_own_outputs(fake_registry, tmp_path, capsys):
    plan = write(tmp_path, "results/{altar:run}")
    results = tmp_path / "plan" / "results"
    fake_registry.output_bytes = {"score-0": b"monday 0\n", "score-1": b"monday 1\n"}
    code, err = run(["run", plan, "--run-dir", tmp_path / "runs" / "monday"], capsys)
    assert code == 0, err
    fake_registry.output_bytes = {"score-0": b"tuesday 0\n", "score-1": b"tuesday 1\n"}
    code, err = run(["run", plan, "--run-dir", tmp_path / "runs" / "tuesday"], capsys)
    assert code == 0, err
    assert (results / "monday" / "s-0.txt").read_bytes() == b"monday 0\n"
    assert (results / "monday" / "s-1.txt").read_bytes() == b"monday 1\n"
    assert (results / "tuesday" / "s-1.txt").read_bytes() == b"tuesday 1\n"
    assert not (tmp_path / "plan" / "s-0.txt").exists()
    # the journal keeps the plan's text: every run of the plan has the same spec digests
    digests = [
        {t: r.spec_sha256 for t, r in Journal.load(tmp_path / "runs" / day).tasks.items()}
        for day in ("monday", "tuesday")
    ]
    assert digests[0] == digests[1]


def test_a_resume_collects_into_the_same_runs_folder(fake_registry, tmp_path, capsys):
    plan = write(tmp_path, "results/{altar:run}")
    fake_registry.script = {"score-1": ["exit_3"]}
    run_dir = tmp_path / "runs" / "r1"
    code, _ = run(["run", plan, "--run-dir", run_dir], capsys)
    assert code == 1
    fake_registry.script = {}
    code, err = run(["run", plan, "--run-dir", run_dir, "--retry-failed"], capsys)
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "plan" / "results" / "r1").iterdir()) == [
        "s-0.txt",
        "s-1.txt",
    ]


def test_a_shared_outputs_dir_is_the_plans_explicit_choice(fake_registry, tmp_path, capsys):
    plan = write(tmp_path, "latest")
    fake_registry.output_bytes = {"score-0": b"first\n"}
    assert run(["run", plan, "--run-dir", tmp_path / "a"], capsys)[0] == 0
    fake_registry.output_bytes = {"score-0": b"second\n"}
    assert run(["run", plan, "--run-dir", tmp_path / "b"], capsys)[0] == 0
    assert (tmp_path / "plan" / "latest" / "s-0.txt").read_bytes() == b"second\n"


def test_check_says_where_outputs_go(fake_registry, tmp_path, capsys):
    code = cli.main(["check", str(write(tmp_path, "results/{altar:run}"))])
    out = capsys.readouterr().out
    assert code == 0
    assert "outputs: relative output uris go below outputs_dir = 'results/{altar:run}'" in out


def test_an_output_uri_may_name_the_run_itself(tmp_path):
    data = {
        "tasks": [{"kind": "k", "image": "i", "command": [], "outputs": [
            {"uri": "out/{altar:run}.txt", "logical_path": "y.txt"}]}],
    }  # fmt: skip
    plan = parse_plan(data, base_dir=tmp_path)
    mine = outputs_for_run(plan, tmp_path / "runs" / "friday")
    assert mine.tasks[0].spec.outputs[0].uri == str(tmp_path / "out" / "friday.txt")
    data["tasks"][0]["outputs"][0]["uri"] = "out/{altar:mount_root}.txt"
    with pytest.raises(PlanError) as error:
        parse_plan(data, source="p.toml")
    assert str(error.value) == (
        "p.toml: tasks[0].outputs[0].uri: {altar:mount_root}: the only placeholder in an output "
        "uri is {altar:run} (the run's name)"
    )
