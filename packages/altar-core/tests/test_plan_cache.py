"""The read commands parse a plan file once per process while it is unchanged (issue 24)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from altar.execution.errors import PlanError
from altar.execution.plans import plan_cache

PLAN = """\
[backend]
type = "fake"

[[tasks]]
id = "{name}"
kind = "k"
image = "busybox"
command = ["true"]
"""


def test_an_unchanged_plan_is_parsed_once_and_an_edited_one_again(tmp_path: Path) -> None:
    plan_cache.clear()
    path = tmp_path / "plan.toml"
    path.write_text(PLAN.format(name="a"))
    first = plan_cache.cached_plan(path)
    assert plan_cache.cached_plan(str(path)) is first
    path.write_text(PLAN.format(name="bb"))
    os.utime(path, ns=(1, 1))  # a new modification time, whatever the clock's resolution
    again = plan_cache.cached_plan(path)
    assert again is not first
    assert [t.id for t in again.tasks] == ["bb"]


def test_a_missing_or_bad_plan_raises_and_is_not_cached(tmp_path: Path) -> None:
    plan_cache.clear()
    with pytest.raises((OSError, PlanError)):
        plan_cache.cached_plan(tmp_path / "none.toml")
    path = tmp_path / "plan.toml"
    path.write_text(PLAN.format(name="-bad id"))
    with pytest.raises(PlanError):
        plan_cache.cached_plan(path)
    path.write_text(PLAN.format(name="good"))
    os.utime(path, ns=(2, 2))
    assert [t.id for t in plan_cache.cached_plan(path).tasks] == ["good"]
