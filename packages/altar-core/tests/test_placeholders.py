"""Portable paths in plans: {altar:mount_root} and {altar:path:LOGICAL} (issue 15 item 2)."""

from __future__ import annotations

import asyncio

import pytest
from altar.execution import ContainerTaskSpec, PathResolver, PlanError
from altar.execution.plans.placeholders import expand, expand_spec, placeholder_error
from altar.execution.plans.plan import parse_plan
from altar.execution.run.runner import run_plan
from altar.execution.state.journal import Journal, spec_digest


def plan_with(command: list[str], env: dict[str, str] | None = None):
    task = {"kind": "k", "image": "busybox", "command": command, "labels": {"task": "t"}}
    if env:
        task["env"] = env
    return parse_plan({"tasks": [task]}, source="plan.toml")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{altar:mount_root}/demo/x.tsv", "/data/vol/demo/x.tsv"),
        ("--in={altar:path:demo/x.tsv}", "--in=/data/vol/demo/x.tsv"),
        ("{altar:mount_root} {altar:mount_root}", "/data/vol /data/vol"),
        ("awk '{print $1}' ${HOME} {a,b} {}", "awk '{print $1}' ${HOME} {a,b} {}"),
    ],
)
def test_expand(text, expected):
    assert placeholder_error(text) is None
    assert expand(text, PathResolver("/data/vol/")) == expected


@pytest.mark.parametrize(
    ("command", "field", "message"),
    [
        (
            ["sh", "{altar:mountroot}/x"],
            "tasks[0].command[1]",
            "unknown placeholder {altar:mountroot}",
        ),
        (["{altar:path:../../etc/passwd}"], "tasks[0].command[0]", "leaves the mount root"),
        (["{altar:path:}"], "tasks[0].command[0]", "names no logical path"),
        (["{altar:mount_root"], "tasks[0].command[0]", "unterminated placeholder"),
    ],
)
def test_an_unknown_placeholder_is_one_line_naming_the_field(command, field, message):
    with pytest.raises(PlanError) as caught:
        plan_with(command)
    text = str(caught.value)
    assert text.startswith(f"plan.toml: {field}: ")
    assert message in text
    assert "\n" not in text


def test_an_unknown_placeholder_in_env_names_the_variable():
    with pytest.raises(PlanError, match=r"^plan.toml: tasks\[0\]\.env\.OUT: unknown placeholder"):
        plan_with(["true"], {"OUT": "{altar:root}/out"})


def test_expand_spec_keeps_a_spec_without_placeholders():
    spec = ContainerTaskSpec("k", "i", ["echo", "{x}"])
    assert expand_spec(spec, PathResolver("/r")) is spec


def test_the_runner_expands_through_the_backends_resolver(fake_backend_class, provider, tmp_path):
    provider.mount_root = "/data/vol"
    plan = plan_with(
        ["sh", "-c", "cat {altar:path:demo/in.txt} > {altar:mount_root}/demo/out.txt"],
        {"OUT": "{altar:mount_root}/demo"},
    )
    backend = fake_backend_class(provider=provider)
    result = asyncio.run(run_plan(plan, backend, run_dir=tmp_path / "run", poll_interval_s=0.0))
    assert result.ok
    (launched,) = provider.launched.values()
    assert launched == ["sh", "-c", "cat /data/vol/demo/in.txt > /data/vol/demo/out.txt"]
    (submitted,) = provider.tasks.values()
    assert submitted.spec.env == {"OUT": "/data/vol/demo"}
    # the journal keeps the plan's own text: one digest whatever the backend's root
    journal = Journal.load(tmp_path / "run")
    assert journal.tasks["k-0"].spec_sha256 == spec_digest(plan.tasks[0].spec)


@pytest.mark.parametrize(
    ("command", "env", "has"),
    [
        (["echo", "x"], {}, False),
        (["echo", "{altar:mount_root}/x"], {}, True),
        (["echo"], {"P": "{altar:path:a/b}"}, True),
        (["{altar", ":mount_root}"], {"A": "{altar", "B": ":x}"}, False),  # never across texts
        (["{altar:"], {}, True),
        ([], {"K": "{altar:"}, True),
    ],
)
def test_has_placeholders_is_what_expand_spec_looks_for(command, env, has):
    from altar.execution.plans.placeholders import has_placeholders

    spec = ContainerTaskSpec("k", "i", command, env=env)
    assert has_placeholders(spec) is has
    expected = any("{altar:" in t for t in [*command, *env.values()])
    assert has is expected
