"""compare_backends over two fake providers that differ in controlled ways."""

from __future__ import annotations

import hashlib

import pytest
from altar.execution import ContainerTaskSpec, Transfer
from altar.execution.plans.plan import Plan, PlanTask
from altar.execution.run.compare import (
    MOUNT_ROOT_PLACEHOLDER,
    ComparisonReport,
    Difference,
    compare_backends,
    normalize_command,
)

FAST = {"poll_interval_s": 0.0, "max_poll_interval_s": 0.0}


def plan_for(mount_root: str = "/mnt/volume") -> Plan:
    tasks = []
    for key in ("fold-0", "fold-1"):
        out = f"jobs/J/{key}.txt"
        tasks.append(
            PlanTask(
                key,
                ContainerTaskSpec(
                    kind="fold",
                    image="busybox:latest",
                    command=["sh", "-c", f"echo {key} > {mount_root}/{out}"],
                    labels={"task": key},
                    outputs=[Transfer(f"gs://bucket/{key}.txt", out)],
                ),
            )
        )
    return Plan("fake", {}, tasks)


@pytest.fixture
def pair(tmp_path, fake_backend_class):
    def make(name: str, mount_root: str = "/mnt/volume"):
        backend = fake_backend_class()
        backend.provider.root = tmp_path / f"{name}-volume"
        backend.provider.mount_root = mount_root
        return backend

    return make


@pytest.mark.asyncio
async def test_identical_runs_have_no_differences(tmp_path, pair):
    backend, reference = pair("a"), pair("b")
    report = await compare_backends(plan_for(), backend, reference, workdir=tmp_path / "w", **FAST)
    assert report.ok
    assert report.differences == []
    assert report.format() == (
        "fake vs reference fake: no differences in commands, outputs or outcomes across 2 task(s)"
    )
    produced = tmp_path / "w/backend/outputs/fold-0/jobs/J/fold-0.txt"
    assert produced.read_bytes() == b"fold-0\n"
    assert (tmp_path / "w/reference/outputs/fold-1/jobs/J/fold-1.txt").is_file()
    assert report.backend_result is not None
    assert report.backend_result.ok


@pytest.mark.asyncio
async def test_every_aspect_is_reported(tmp_path, pair):
    backend, reference = pair("a"), pair("b")
    backend.provider.output_bytes = {"fold-0": b"different\n"}
    backend.provider.script = {"fold-1": ["exit_2"]}
    report = await compare_backends(plan_for(), backend, reference, workdir=tmp_path / "w", **FAST)
    assert not report.ok
    aspects = [(d.task_id, d.aspect) for d in report.differences]
    assert aspects == [("fold-0", "output"), ("fold-1", "output"), ("fold-1", "outcome")]
    expected = "sha256:" + hashlib.sha256(b"different\n").hexdigest()
    assert f"jobs/J/fold-0.txt: backend {expected} (10 bytes); reference sha256:" in (
        report.differences[0].detail
    )
    assert report.differences[1].detail.startswith(
        "jobs/J/fold-1.txt: backend produced nothing; reference sha256:"
    )
    assert report.differences[2] == Difference(
        "fold-1", "outcome", "backend failed (exit_2); reference succeeded"
    )
    text = report.format()
    assert text.splitlines()[0] == "fake vs reference fake: 3 difference(s)"
    assert "fold-1  outcome  backend failed (exit_2); reference succeeded" in text


@pytest.mark.asyncio
async def test_commands_compare_with_each_mount_root_normalized(tmp_path, pair):
    backend, reference = pair("a", "/mnt/volume"), pair("b", "/data/root")
    # a plan rendered per backend with its own mount root is portable...
    report = await compare_backends(
        lambda b: plan_for(b.path_resolver().mount_root),
        backend,
        reference,
        workdir=tmp_path / "w1",
        **FAST,
    )
    assert report.ok, report.format()
    # ...one that hard-codes a mount root is not
    report = await compare_backends(plan_for(), backend, reference, workdir=tmp_path / "w2", **FAST)
    assert [(d.task_id, d.aspect) for d in report.differences] == [
        ("fold-0", "command"),
        ("fold-1", "command"),
    ]
    assert f"'echo fold-0 > {MOUNT_ROOT_PLACEHOLDER}/jobs/J/fold-0.txt'" in (
        report.differences[0].detail
    )
    assert "reference runs ['sh', '-c', 'echo fold-0 > /mnt/volume/jobs" in (
        report.differences[0].detail
    )


def test_normalize_command():
    assert normalize_command(["a", "/mnt/volume/x", "--out=/mnt/volume/"], "/mnt/volume/") == [
        "a",
        "<mount-root>/x",
        "--out=<mount-root>/",
    ]
    assert normalize_command(["/x"], "") == ["/x"]


def test_report_format_without_runs():
    report = ComparisonReport("k", "ref", [Difference("t", "command", "differs")])
    assert report.format() == "k vs reference ref: 1 difference(s)\n  t  command  differs"
