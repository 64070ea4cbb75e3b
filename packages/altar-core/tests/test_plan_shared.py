"""A plan's equal texts and label/env tables are held once (issue 24), and parse the same."""

from __future__ import annotations

import json

import pytest
from altar.execution import PlanError
from altar.execution.plans.plan import load_plan, parse_plan

HOSTILE = [
    "has spaces",
    'it\'s "quoted"',
    "$(rm -rf /)",
    "`id`",
    "line one\nline two",
    "tab\there",
    "ünïcode ✓",
    "",
]


def _tasks(n: int) -> list[dict]:
    return [
        {
            "id": f"t{i}",
            "kind": "fold",
            "image": "busybox:latest",
            "command": ["sh", "-c", HOSTILE[i % len(HOSTILE)], str(i)],
            "labels": {"batch": "b1", "fold": str(i % 3), "note": HOSTILE[i % len(HOSTILE)]},
            "env": {"A": HOSTILE[(i + 1) % len(HOSTILE)], "B": "$(x)"},
            **({"resources": {"cpu": 2}} if i % 4 == 0 else {}),
        }
        for i in range(n)
    ]


def _plan_data(n: int) -> dict:
    return {"backend": {"type": "local"}, "tasks": _tasks(n)}


def test_a_plan_read_from_its_file_equals_the_one_parsed_eagerly(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(_plan_data(40)))
    eager = parse_plan(_plan_data(40), source=str(path), base_dir=tmp_path)
    read = load_plan(path)
    assert [t.spec for t in read.tasks] == [t.spec for t in eager.tasks]
    assert [t.id for t in read.tasks] == [t.id for t in eager.tasks]
    assert read.dependencies == eager.dependencies
    specs = [t.spec for t in read.tasks]
    assert specs[4].command[2] == "line one\nline two"
    assert specs[1].labels is specs[25].labels  # equal tables: one dict
    assert specs[1].labels is not specs[2].labels
    assert specs[1].image is specs[2].image
    assert specs[1].resources is specs[2].resources  # the shared default, frozen
    assert specs[0].resources.cpu == 2
    assert specs[1].inputs is specs[2].outputs  # none: one empty list
    assert specs[1].inputs == []


def test_consume_drops_each_task_table_and_leaves_the_rest(tmp_path):
    data = _plan_data(5)
    plan = parse_plan(data, consume=True)
    assert data["tasks"] == [None] * 5
    assert data["backend"] == {"type": "local"}
    assert len(plan.tasks) == 5
    kept = _plan_data(5)
    parse_plan(kept)
    assert kept == _plan_data(5)  # without consume the caller's data is left alone


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("labels", {"a": 1}, "labels"),
        ("env", {"A": ["x"]}, "env"),
        ("command", ["ok", 3], "command"),
        ("kind", 7, "kind"),
    ],
)
def test_values_of_the_wrong_type_are_still_refused_by_field(tmp_path, field, value, message):
    data = _plan_data(3)
    data["tasks"][1][field] = value
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    with pytest.raises(PlanError, match=rf"tasks\[1\]\.{message}"):
        load_plan(path)
