"""Run one plan on two backends and report every difference that portability forbids.

Three aspects are compared per task:

- ``command``: the argv each backend was asked to run, with that backend's mount root
  (``path_resolver().mount_root``) replaced by ``<mount-root>``;
- ``output``: the sha256 of every declared output each run produced (each run's output
  ``uri`` is redirected below ``workdir/<side>/outputs/<task id>/``);
- ``outcome``: the final status and failure reason.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from altar.execution.backend import ExecutionBackend
from altar.execution.digest import sha256_file
from altar.execution.plan import Plan, with_outputs_under
from altar.execution.runner import RunEvent, RunResult, TaskResult, run_plan

__all__ = [
    "MOUNT_ROOT_PLACEHOLDER",
    "ComparisonReport",
    "Difference",
    "compare_backends",
    "normalize_command",
]

MOUNT_ROOT_PLACEHOLDER = "<mount-root>"
Aspect = Literal["command", "output", "outcome"]
SIDES = ("backend", "reference")


@dataclass(frozen=True)
class Difference:
    """One way the two runs of a task differ."""

    task_id: str
    aspect: Aspect
    detail: str


@dataclass(frozen=True)
class ComparisonReport:
    """Every difference between a backend's run of a plan and a reference backend's run."""

    backend: str
    reference: str
    differences: list[Difference]
    backend_result: RunResult | None = None
    reference_result: RunResult | None = None
    task_ids: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.differences

    def format(self) -> str:
        """A readable report: one line per difference, or a one-line all-clear."""
        header = f"{self.backend} vs reference {self.reference}"
        if self.ok:
            return (
                f"{header}: no differences in commands, outputs or outcomes "
                f"across {len(self.task_ids)} task(s)"
            )
        lines = [f"{header}: {len(self.differences)} difference(s)"]
        width = max(len(d.task_id) for d in self.differences)
        for d in self.differences:
            lines.append(f"  {d.task_id:<{width}}  {d.aspect:<7}  {d.detail}")
        return "\n".join(lines)


def normalize_command(command: Sequence[str], mount_root: str) -> list[str]:
    """``command`` with every occurrence of ``mount_root`` replaced by ``<mount-root>``."""
    root = mount_root.rstrip("/")
    if not root:
        return list(command)
    return [arg.replace(root, MOUNT_ROOT_PLACEHOLDER) for arg in command]


def _digests(plan: Plan) -> dict[tuple[str, str], str | None]:
    digests: dict[tuple[str, str], str | None] = {}
    for task in plan.tasks:
        for transfer in task.spec.outputs:
            path = Path(transfer.uri)
            digest = None
            if path.is_file():
                size = path.stat().st_size
                digest = f"{sha256_file(path)} ({size} bytes)"
            digests[(task.id, transfer.logical_path)] = digest
    return digests


def _outcome(task: TaskResult | None) -> str:
    if task is None:
        return "not run"
    if task.status in ("succeeded", "cached"):
        return "succeeded"  # a cached result is the same result
    return f"{task.status} ({task.reason})" if task.reason else task.status


async def compare_backends(
    plan: Plan | Callable[[ExecutionBackend], Plan],
    backend: ExecutionBackend,
    reference: ExecutionBackend,
    *,
    workdir: str | Path,
    on_event: Callable[[str, RunEvent], None] | None = None,
    max_parallel: int | None = None,
    max_retries: int | None = None,
    poll_interval_s: float | None = None,
    max_poll_interval_s: float = 5.0,
) -> ComparisonReport:
    """Run ``plan`` on ``backend``, then on ``reference``, and report every difference.

    ``plan`` may be a function of the backend, for plans rendered with a backend's path
    resolver. The runs go to ``workdir/backend`` and ``workdir/reference`` (run directory and
    outputs); they run one after the other, so two backends sharing one volume cannot overwrite
    each other's outputs. The other options are :func:`~altar.execution.runner.run_plan`'s;
    ``on_event`` receives ``"backend"`` or ``"reference"`` with each run event.
    """
    workdir = Path(workdir)
    plans: dict[str, Plan] = {}
    results: dict[str, RunResult] = {}
    for side, each in zip(SIDES, (backend, reference), strict=True):
        base = plan(each) if callable(plan) else plan
        plans[side] = with_outputs_under(base, workdir / side / "outputs")

        def forward(event: RunEvent, side: str = side) -> None:
            if on_event is not None:
                on_event(side, event)

        results[side] = await run_plan(
            plans[side],
            each,
            run_dir=workdir / side / "run",
            on_event=forward,
            max_parallel=max_parallel,
            max_retries=max_retries,
            poll_interval_s=poll_interval_s,
            max_poll_interval_s=max_poll_interval_s,
            cache=False,  # each side must run the tasks: a cached result would compare itself
        )
    differences: list[Difference] = []
    ids = [task.id for task in plans["backend"].tasks]
    ref_ids = [task.id for task in plans["reference"].tasks]
    for task_id in sorted(set(ids) ^ set(ref_ids)):
        side = "backend" if task_id in ids else "reference"
        differences.append(Difference(task_id, "command", f"only the {side}'s plan has this task"))
    roots = {
        "backend": backend.path_resolver().mount_root,
        "reference": reference.path_resolver().mount_root,
    }
    outputs = {side: _digests(plans[side]) for side in SIDES}
    by_id = {side: {t.id: t for t in results[side].tasks} for side in SIDES}
    for task_id in [i for i in ids if i in ref_ids]:
        specs = {side: plans[side].task(task_id).spec for side in SIDES}
        commands = {side: normalize_command(specs[side].command, roots[side]) for side in SIDES}
        if commands["backend"] != commands["reference"]:
            differences.append(
                Difference(
                    task_id,
                    "command",
                    f"backend runs {commands['backend']!r}; "
                    f"reference runs {commands['reference']!r}",
                )
            )
        logical = dict.fromkeys(
            [t.logical_path for t in specs["backend"].outputs]
            + [t.logical_path for t in specs["reference"].outputs]
        )
        for path in logical:
            mine = outputs["backend"].get((task_id, path))
            theirs = outputs["reference"].get((task_id, path))
            if mine != theirs:
                differences.append(
                    Difference(
                        task_id,
                        "output",
                        f"{path}: backend {mine or 'produced nothing'}; "
                        f"reference {theirs or 'produced nothing'}",
                    )
                )
        outcomes = {side: _outcome(by_id[side].get(task_id)) for side in SIDES}
        if outcomes["backend"] != outcomes["reference"]:
            differences.append(
                Difference(
                    task_id,
                    "outcome",
                    f"backend {outcomes['backend']}; reference {outcomes['reference']}",
                )
            )
    return ComparisonReport(
        backend=backend.name,
        reference=reference.name,
        differences=differences,
        backend_result=results["backend"],
        reference_result=results["reference"],
        task_ids=ids,
    )
