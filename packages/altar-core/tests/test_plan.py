"""Plan files: TOML and JSON, validation messages, ids, relative uris, dependencies."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest
from altar.execution import ContainerTaskSpec, PlanError, ResourceRequest, Transfer
from altar.execution.plans.plan import (
    Plan,
    PlanTask,
    load_plan,
    parse_plan,
    plan_from_specs,
    with_outputs_under,
)

DIGEST = "sha256:" + "cd" * 32

PLAN = """\
max_parallel = 2

[backend]
type = "local"
options = { slots = 2, data_root = "data" }

[[tasks]]
kind = "fold"
image = "busybox:latest"
command = ["sh", "-c", "echo 0 > /mnt/volume/jobs/demo/fold-0.txt"]
labels = { job_id = "demo", fold = "0" }
inputs = [{ uri = "inputs/weights.bin", logical_path = "models/w.bin", digest = "DIGEST" }]
outputs = [{ uri = "out/fold-0.txt", logical_path = "jobs/demo/fold-0.txt" }]
resources = { memory_gb = 0.5, cpu = 1 }
timeout_s = 60
env = { FOLD = "0" }

[[tasks]]
kind = "fold"
image = "busybox:latest"
command = ["sh", "-c", "echo 1 > /mnt/volume/jobs/demo/fold-1.txt"]
inputs = [{ uri = "inputs/weights.bin", logical_path = "models/w.bin", digest = "DIGEST" }]
outputs = [{ uri = "/abs/fold-1.txt", logical_path = "jobs/demo/fold-1.txt" }]

[[tasks]]
id = "summary"
kind = "summarize"
image = "busybox:latest"
command = ["cat", "/mnt/volume/jobs/demo/fold-0.txt", "/mnt/volume/jobs/demo/fold-1.txt"]
inputs = [
  { uri = "out/fold-0.txt", logical_path = "jobs/demo/fold-0.txt" },
  { uri = "out/fold-1.txt", logical_path = "jobs/demo/fold-1.txt" },
]
outputs = [{ uri = "gs://bucket/summary.txt", logical_path = "jobs/demo/summary.txt" }]
""".replace("DIGEST", DIGEST)


def write(tmp_path, text, name="plan.toml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_a_toml_plan(tmp_path):
    plan = load_plan(write(tmp_path, PLAN))
    assert plan.backend_type == "local"
    assert plan.backend_options == {"slots": 2, "data_root": "data"}
    assert plan.max_parallel == 2
    assert plan.max_retries is None
    assert [t.id for t in plan.tasks] == ["fold-0", "fold-1", "summary"]
    first = plan.tasks[0].spec
    assert first.resources == ResourceRequest(memory_gb=0.5, cpu=1)
    assert first.env == {"FOLD": "0"}
    assert first.timeout_s == 60
    # relative uris resolve against the plan's directory; absolute and remote ones stay
    assert first.inputs[0].uri == str(tmp_path / "inputs/weights.bin")
    assert plan.tasks[1].spec.outputs[0].uri == "/abs/fold-1.txt"
    assert plan.tasks[2].spec.outputs[0].uri == "gs://bucket/summary.txt"
    # the summary reads what the folds write: it runs after them, and those inputs are not staged
    assert plan.dependencies == {"fold-0": (), "fold-1": (), "summary": ("fold-0", "fold-1")}
    assert plan.staged_inputs() == [first.inputs[0]]


def test_the_same_plan_as_json(tmp_path):
    import tomllib

    data = tomllib.loads(PLAN)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    assert load_plan(path).tasks == load_plan(write(tmp_path, PLAN)).tasks


def test_relative_uris_follow_the_plan_not_the_cwd(tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    path = write(tmp_path / "sub", PLAN)
    monkeypatch.chdir(tmp_path)
    plan = load_plan(os.path.relpath(path))
    assert plan.tasks[0].spec.inputs[0].uri == str(tmp_path / "sub/inputs/weights.bin")


def bad(tmp_path, text, name="plan.toml"):
    with pytest.raises(PlanError) as caught:
        load_plan(write(tmp_path, text, name))
    message = str(caught.value)
    assert "\n" not in message
    return message


TASK = 'kind = "fold"\nimage = "busybox"\ncommand = ["true"]\n'


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (
            "resources = { count = 0 }",
            "tasks[2].resources.count: resource count must be at least 1, got 0",
        ),
        ("resources = { memory = 2 }", "tasks[2].resources.memory: unknown field"),
        ("timeout_s = 0", "tasks[2].timeout_s: timeout_s must be a positive number of seconds"),
        ("timeout_s = 1.5", "tasks[2].timeout_s: timeout_s must be a whole number of seconds"),
        ("labels = { fold = 1 }", "tasks[2].labels: labels must map str to str"),
        ("env = { 'A=B' = 'x' }", "tasks[2].env: env name 'A=B'"),
        ("comand = ['x']", "tasks[2].comand: unknown field (expected one of: after, "),
        (
            "inputs = [{ uri = 'x', logical_path = 'y', digest = 'sha256:ABC' }]",
            "tasks[2].inputs[0].digest: transfer digest must be sha256:<64 lowercase hex>",
        ),
        ("inputs = [{ uri = 'x' }]", "tasks[2].inputs[0].logical_path: required"),
        ("inputs = 'x'", "tasks[2].inputs: must be a list of tables, got a string"),
        (
            "outputs = [{ uri = 'x', logical_path = '../../etc/passwd' }]",
            "tasks[2].outputs[0].logical_path: must stay below the mount root",
        ),
        ("id = '../escape'", "tasks[2].id: must start with a letter or digit"),
        ("id = 'a b'", "tasks[2].id: must start with a letter or digit"),
        ("id = 'fold-0'", "tasks[2].id: 'fold-0' is already the id of tasks[0]"),
        ("after = ['nope']", "tasks[2].after[0]: no task has id 'nope'"),
        ("command = 'echo hi'", "tasks[2].command: command must be a list of str"),
        (
            "resources = { memory_gb = inf }",
            "tasks[2].resources.memory_gb: resources.memory_gb must be a positive number",
        ),
        (
            "plugin_identity = { built = 1979-05-27T07:32:00Z }",
            "tasks[2].plugin_identity: must be JSON data",
        ),
    ],
)
def test_bad_task_fields_name_file_and_field(tmp_path, extra, expected):
    last = TASK.replace('command = ["true"]\n', "") if extra.startswith("command") else TASK
    text = f"[[tasks]]\n{TASK}\n[[tasks]]\n{TASK}\n[[tasks]]\n{last}{extra}\n"
    message = bad(tmp_path, text)
    assert message.startswith(f"{tmp_path / 'plan.toml'}: {expected}")


def test_required_task_fields(tmp_path):
    message = bad(tmp_path, '[[tasks]]\nkind = "k"\ncommand = []\n')
    assert message.endswith("plan.toml: tasks[0].image: required")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "tasks: a plan needs at least one [[tasks]] entry"),
        (f'backend = "local"\n[[tasks]]\n{TASK}', "backend: must be a table, got a string"),
        (f"[backend]\ntype = 3\n[[tasks]]\n{TASK}", "backend.type: must be a backend name"),
        (f"[backend]\nopts = 3\n[[tasks]]\n{TASK}", "backend.opts: unknown field"),
        (f"max_parallel = 0\n[[tasks]]\n{TASK}", "max_parallel: must be an integer of at least 1"),
        (f"max_retries = -1\n[[tasks]]\n{TASK}", "max_retries: must be an integer of at least 0"),
        (
            f"max_retries = 1\n[backend]\nmax_retries = 2\n[[tasks]]\n{TASK}",
            "backend.max_retries: also set at the top level",
        ),
        (f"nonsense = 1\n[[tasks]]\n{TASK}", "nonsense: unknown field"),
        ("tasks = [", "invalid TOML"),
    ],
)
def test_bad_plan_structure(tmp_path, text, expected):
    assert expected in bad(tmp_path, text)


def test_unreadable_and_malformed_files(tmp_path):
    message = bad(tmp_path, '{"tasks": [', name="plan.json")
    assert "plan.json: invalid JSON: Expecting value (line 1, column 12)" in message
    with pytest.raises(PlanError, match="cannot read the plan: No such file or directory"):
        load_plan(tmp_path / "missing.toml")
    (tmp_path / "binary.toml").write_bytes(b"\xff\xfe")
    with pytest.raises(PlanError, match="not UTF-8 text"):
        load_plan(tmp_path / "binary.toml")
    with pytest.raises(PlanError, match="a plan must be a table/object, got a list"):
        load_plan(write(tmp_path, "[1, 2]", "list.json"))


def test_conflicting_writers_and_sources(tmp_path):
    out = "outputs = [{ uri = 'a', logical_path = 'same' }]"
    message = bad(tmp_path, f"[[tasks]]\n{TASK}{out}\n[[tasks]]\n{TASK}{out}\n")
    assert "tasks[1].outputs[0].logical_path: 'same' is also written by 'fold-0'" in message
    in_a = "inputs = [{ uri = 'a', logical_path = 'same' }]"
    in_b = "inputs = [{ uri = 'b', logical_path = 'same' }]"
    message = bad(tmp_path, f"[[tasks]]\n{TASK}{in_a}\n[[tasks]]\n{TASK}{in_b}\n")
    assert "tasks[1].inputs[0]: logical path 'same' is staged from two sources" in message


def test_dependency_cycles_are_refused(tmp_path):
    text = (
        f"[[tasks]]\nid = 'a'\nafter = ['b']\n{TASK}\n"
        f"[[tasks]]\nid = 'b'\nafter = ['a']\n{TASK}\n"
        f"[[tasks]]\nid = 'c'\nafter = ['c']\n{TASK}\n"
    )
    assert "tasks[2].after: a task cannot run after itself" in bad(tmp_path, text)
    text = text.rsplit("[[tasks]]", 1)[0]
    assert "tasks: dependency cycle among a, b" in bad(tmp_path, text)


def test_default_ids_are_safe_for_odd_kinds():
    spec = ContainerTaskSpec(kind="ChromBPNet Score/Fold", image="i", command=[])
    assert [t.id for t in plan_from_specs([spec, spec]).tasks] == [
        "ChromBPNet-Score-Fold-0",
        "ChromBPNet-Score-Fold-1",
    ]


def test_outputs_can_be_redirected(tmp_path):
    spec = ContainerTaskSpec(
        kind="k", image="i", command=[], outputs=[Transfer("gs://b/x", "/jobs/x.txt")]
    )
    plan = with_outputs_under(plan_from_specs([spec]), tmp_path)
    assert plan.tasks[0].spec.outputs[0].uri == str(tmp_path / "k-0" / "jobs/x.txt")


def test_plans_built_in_code_are_checked_too():
    from altar.execution.plans.plan import Plan, PlanTask

    spec = ContainerTaskSpec(kind="k", image="i", command=[])
    with pytest.raises(PlanError, match=r"tasks\[1\]\.id: 'a' is already the id of tasks\[0\]"):
        Plan("fake", {}, [PlanTask("a", spec), PlanTask("a", spec)])
    with pytest.raises(PlanError, match="no task has id 'b'"):
        Plan("fake", {}, [PlanTask("a", spec, after=("b",))])


def test_hostile_strings_pass_through_unchanged(tmp_path):
    hostile = "a b 'c' \"d\" $(touch /tmp/pwned) `id`\nnext line; rm -rf ~"
    data = {
        "tasks": [
            {
                "kind": "k",
                "image": "busybox",
                "command": ["sh", "-c", hostile],
                "labels": {"note": hostile},
                "env": {"V": hostile},
                "inputs": [{"uri": "dir with spaces/in put.txt", "logical_path": "in put.txt"}],
            }
        ]
    }
    folder = tmp_path / "a dir $(x)"
    folder.mkdir()
    path = folder / "plan.json"
    path.write_text(json.dumps(data))
    spec = load_plan(path).tasks[0].spec
    assert spec.command == ["sh", "-c", hostile]
    assert spec.labels == {"note": hostile}
    assert spec.env == {"V": hostile}
    assert spec.inputs[0].uri == str(folder / "dir with spaces/in put.txt")
    assert not os.path.exists("/tmp/pwned")


def test_an_input_a_task_updates_in_place_is_still_staged():
    # a task that reads a file and writes it back (a database it appends to) produces that
    # path itself: nothing else will put it on the volume, so staging must
    from altar.execution.plans.plan import Plan, PlanTask

    db = Transfer("/data/index.db", "jobs/J/index.db")
    update = ContainerTaskSpec(kind="k", image="i", command=[], inputs=[db], outputs=[db])
    reader = ContainerTaskSpec(kind="r", image="i", command=[], inputs=[db])
    plan = Plan("fake", {}, [PlanTask("update", update), PlanTask("read", reader)])
    assert plan.staged_inputs() == [db]
    assert plan.dependencies == {"update": (), "read": ("update",)}


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("deep.json", '{"tasks": ' + "[" * 100_000 + "]" * 100_000 + "}"),
        ("deep.toml", "x = " + "[" * 100_000 + "]" * 100_000 + "\n"),
    ],
)
def test_a_hostile_nesting_depth_is_a_plan_error(tmp_path, name, text):
    with pytest.raises(PlanError, match=f"{name}: nested too deeply"):
        load_plan(write(tmp_path, text, name))


def test_plans_may_not_declare_reserved_labels(tmp_path):
    data = {
        "tasks": [
            {"kind": "k", "image": "i", "command": [], "labels": {"altar.run": "x", "fold": "1"}}
        ]
    }
    with pytest.raises(PlanError, match=r"tasks\[0\]\.labels: 'altar\.run': labels starting"):
        parse_plan(data, source="p.toml")
    data["tasks"][0]["labels"] = {"altarx": "1", "altar": "2"}
    assert parse_plan(data).tasks[0].spec.labels == {"altarx": "1", "altar": "2"}
    reserved = ContainerTaskSpec(kind="k", image="i", command=[], labels={"altar.task": "t"})
    with pytest.raises(PlanError, match="reserved for the runner"):
        Plan(None, {}, [PlanTask("t", reserved)])


@pytest.mark.parametrize(
    "uri",
    [
        "out/o1",
        "a/b/c.txt",
        "./a/../b//c",
        ".",
        "..",
        "a/./b",
        "a/",
        "a//b",
        "s3:/x",
        "~/x",
        "a\\b",
        "gs://bucket/x",
        "/abs/p",
        "-x",
        " a",
    ],
)
@pytest.mark.parametrize("base", ["/plans/lab", "/", "/plans/lab/../x", "rel/dir", "gs://b/r"])
def test_a_relative_uri_resolves_as_normpath_of_the_join(uri, base):
    # the fast path for plain relative uris gives what the general rule gives
    from altar.execution.plans.fields import _SCHEME, _resolve_uri

    if _SCHEME.match(uri) or os.path.isabs(uri):
        expected = uri
    elif _SCHEME.match(base):
        expected = f"{base}/{uri.removeprefix('./')}"
    else:
        expected = os.path.normpath(os.path.join(base, uri))
    assert _resolve_uri(uri, base) == expected
    assert _resolve_uri(uri, Path(base) if "://" not in base else base) == expected
