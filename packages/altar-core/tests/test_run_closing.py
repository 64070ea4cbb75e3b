"""What `altar run` prints at its end (issue 24): groups above the threshold, JSON in batches."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from altar.execution.run import closing
from altar.execution.run.closing import format_outcome, write_result_json
from altar.execution.run.results import RunResult, TaskResult


def _result(n: int) -> RunResult:
    tasks = [
        TaskResult(
            f"t{i}",
            f"kind{i % 2}",
            "failed" if i % 50 == 7 else "succeeded",
            1,
            reason="exit_1" if i % 50 == 7 else None,
            detail='line one\nthe tail "quoted"\n' if i % 50 == 7 else None,
            exit_code=1 if i % 50 == 7 else 0,
            duration_s=0.5,
            external_id=f"x-{i}",
            reexecuted=1 if i == 3 else 0,
            provider_endings={"preempted": 1} if i == 4 else {},
        )
        for i in range(n)
    ]
    return RunResult(Path("/runs/my run"), "fake", tasks, 1.5, "r" * 32)


def _labels(n: int) -> dict[str, dict[str, str]]:
    return {f"t{i}": {"fold": str(i % 3), "batch": "b1"} for i in range(n)}


def test_a_small_run_prints_a_row_per_task_and_the_failures():
    text = format_outcome(_result(20), _labels(20))
    assert text.splitlines()[0].split() == ["TASK", "KIND", "STATUS", "ATTEMPTS", "TIME", "DETAIL"]
    assert "t19" in text
    assert "t7 (exit_1):\n    line one" in text


def test_a_large_run_prints_groups_failures_first_and_how_to_drill_down():
    n = 1000
    text = format_outcome(_result(n), _labels(n))
    assert f"{n} tasks in 6 groups by kind and fold" in text
    assert "t999" not in text  # no row per task
    group_lines = [line for line in text.splitlines() if line.startswith("kind")]
    assert len(group_lines) == 6
    assert group_lines[0].startswith("kind1 fold=")  # t7, t57, ... failed: kind1
    assert "failed: 20 (the last 5 lines of each failure)" in text
    assert '    the tail "quoted"' in text
    assert "1 task(s) started again after a submit whose answer never arrived" in text
    assert "every task: altar status '/runs/my run' --all; one group: --group 'kind1 fold=" in text
    assert len(text) < 4000


@pytest.mark.parametrize("n", [0, 1, 5, 4001])
@pytest.mark.parametrize("extra", [{}, {"transfers": {"bytes": 3, "by": ["a", "b"]}}])
def test_the_json_written_in_batches_is_the_whole_document(n, extra, monkeypatch):
    monkeypatch.setattr(closing, "JSON_BATCH", 1000)
    result = _result(n)
    out = io.StringIO()
    write_result_json(result, out, extra)
    assert out.getvalue() == json.dumps({**result.to_dict(), **extra}, indent=2) + "\n"
