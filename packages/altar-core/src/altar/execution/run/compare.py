"""Run one plan on two backends (or read two runs) and report every difference portability forbids.

Three aspects are compared per task:

- ``command``: the argv each backend was asked to run, with that backend's mount root
  (``path_resolver().mount_root``) replaced by ``<mount-root>``;
- ``output``: the sha256 of every declared output each run produced (each run's output
  ``uri`` is redirected below ``workdir/<side>/outputs/<task id>/``);
- ``outcome``: the final status and failure reason, with the log tail of each side it failed on.

:func:`compare_runs` compares two runs that already happened (each run directory's journal, and
the outputs it collected), running nothing: a run on the workstation and one on the cluster,
or this week's run and last week's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from altar.execution.backend import ExecutionBackend
from altar.execution.digests.digest import sha256_file
from altar.execution.errors import AltarError
from altar.execution.plans.plan import (
    Plan,
    PlanTask,
    load_plan,
    outputs_for_run,
    with_outputs_under,
)
from altar.execution.report.model import log_tail
from altar.execution.run.runner import RunEvent, RunResult, TaskResult, run_plan, run_status
from altar.execution.state.journal import Journal, spec_digest

__all__ = [
    "MOUNT_ROOT_PLACEHOLDER",
    "ComparisonReport",
    "Difference",
    "compare_backends",
    "compare_runs",
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
    log_tails: tuple[tuple[str, str], ...] = field(default=(), compare=False)
    """(side, the last lines of its log) for each side an ``outcome`` difference failed on."""


@dataclass(frozen=True)
class ComparisonReport:
    """Every difference between a backend's run of a plan and a reference backend's run."""

    backend: str
    reference: str
    differences: list[Difference]
    backend_result: RunResult | None = None
    reference_result: RunResult | None = None
    task_ids: list[str] = field(default_factory=list)
    title: str | None = None
    """The first line's subject (default: ``<backend> vs reference <reference>``)."""
    notes: list[str] = field(default_factory=list)
    """What could not be compared, and why."""

    @property
    def ok(self) -> bool:
        return not self.differences

    def format(self) -> str:
        """A readable report: one line per difference (failing sides' log tails below it, and
        notes at the end), or a one-line all-clear."""
        header = self.title or f"{self.backend} vs reference {self.reference}"
        notes = [f"note: {note}" for note in self.notes]
        if self.ok:
            return "\n".join(
                [
                    f"{header}: no differences in commands, outputs or outcomes "
                    f"across {len(self.task_ids)} task(s)",
                    *notes,
                ]
            )
        lines = [f"{header}: {len(self.differences)} difference(s)"]
        width = max(len(d.task_id) for d in self.differences)
        for d in self.differences:
            lines.append(f"  {d.task_id:<{width}}  {d.aspect:<7}  {d.detail}")
            for side, tail in d.log_tails:
                lines.append(f"      {side} log tail:")
                lines += [f"        {line}" for line in tail.splitlines()]
        return "\n".join(lines + notes)

    def to_dict(self) -> dict[str, object]:
        return {
            "backend": self.backend,
            "reference": self.reference,
            "ok": self.ok,
            "differences": [
                {
                    "task_id": d.task_id,
                    "aspect": d.aspect,
                    "detail": d.detail,
                    "log_tails": {side: tail for side, tail in d.log_tails},
                }
                for d in self.differences
            ],
            "notes": list(self.notes),
        }


def normalize_command(command: Sequence[str], mount_root: str) -> list[str]:
    """``command`` with every occurrence of ``mount_root`` replaced by ``<mount-root>``."""
    root = mount_root.rstrip("/")
    if not root:
        return list(command)
    return [arg.replace(root, MOUNT_ROOT_PLACEHOLDER) for arg in command]


def _digests(plan: Plan) -> dict[tuple[str, str], str | None]:
    return {
        (task.id, transfer.logical_path): _file_digest(transfer.uri)
        for task in plan.tasks
        for transfer in task.spec.outputs
    }


def _outcome(task: TaskResult | None) -> str:
    if task is None:
        return "not run"
    if task.status in ("succeeded", "cached"):
        return "succeeded"  # a cached result is the same result
    return f"{task.status} ({task.reason})" if task.reason else task.status


def _outcome_difference(
    task_id: str, sides: Sequence[str], results: Sequence[TaskResult | None]
) -> Difference | None:
    """The outcome difference of one task, with each failed side's log tail (None if equal)."""
    outcomes = [_outcome(result) for result in results]
    if outcomes[0] == outcomes[1]:
        return None
    tails = tuple(
        (side, log_tail(result.detail))
        for side, result in zip(sides, results, strict=True)
        if result is not None and result.status == "failed" and result.detail
    )
    return Difference(
        task_id, "outcome", f"{sides[0]} {outcomes[0]}; {sides[1]} {outcomes[1]}", tails
    )


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
    each other's outputs. The other options are :func:`~altar.execution.run.runner.run_plan`'s;
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
        outcome = _outcome_difference(task_id, SIDES, [by_id[side].get(task_id) for side in SIDES])
        if outcome is not None:
            differences.append(outcome)
    return ComparisonReport(
        backend=backend.name,
        reference=reference.name,
        differences=differences,
        backend_result=results["backend"],
        reference_result=results["reference"],
        task_ids=ids,
    )


def _side_names(run_dirs: Sequence[Path]) -> tuple[str, str]:
    """Each run's name in the report: its directory's name, or its path when those are equal."""
    names = [run_dir.resolve().name or str(run_dir) for run_dir in run_dirs]
    if names[0] == names[1]:
        names = [str(run_dir) for run_dir in run_dirs]
    return names[0], names[1]


def _plan_path(journal: Journal) -> Path:
    """Where the run's plan file is: the journal names it as given to ``altar run``, relative to
    the directory it ran from, which is often an ancestor of the run directory (``.altar/runs/``
    or ``--run-dir`` below it). Only a plan that still holds the specs the run ran is used."""
    path = Path(journal.plan_source)
    if path.is_absolute() or path.exists():
        return path
    for folder in Path(journal.run_dir).resolve().parents:
        if (folder / path).is_file():
            return folder / path
    return path


def _current_plan(journal: Journal, name: str, notes: list[str]) -> Plan | None:
    """The run's plan as written (None, with a note, if it cannot be read)."""
    try:
        return load_plan(_plan_path(journal))
    except AltarError as error:
        notes.append(f"{name}: cannot read its plan ({error}); commands and outputs not compared")
        return None


async def _failure_tail(
    result: TaskResult, journal: Journal, backend: ExecutionBackend | None
) -> TaskResult:
    """``result`` with the backend's log tail as its detail when the journal kept none."""
    record = journal.tasks.get(result.id)
    handle = record.last.handle if record is not None and record.last is not None else None
    if result.status != "failed" or result.detail or backend is None or handle is None:
        return result
    try:
        detail = await backend.failure_detail(handle)
    except Exception:  # a provider that cannot answer leaves the journal's view
        return result
    return replace(result, detail=detail) if detail else result


async def compare_runs(
    first: str | Path,
    second: str | Path,
    *,
    backends: Sequence[ExecutionBackend | None] = (None, None),
) -> ComparisonReport:
    """Compare two existing runs from their run directories; nothing is run or changed.

    Commands compare as the plans wrote them (the journal keeps their portable text, so runs
    on two backends compare equal), when each run's plan file still holds the spec that ran
    (else a note says so); outputs compare by the sha256 of the files each run collected;
    outcomes by final status and reason. A failed side's log tail comes from its journal, or
    from ``backends`` (the run's backend, to ask for ``failure_detail``) when it kept none.
    """
    run_dirs = (Path(first), Path(second))
    journals = [Journal.load(run_dir) for run_dir in run_dirs]
    sides = _side_names(run_dirs)
    notes: list[str] = []
    plans = [_current_plan(j, side, notes) for j, side in zip(journals, sides, strict=True)]
    results = [await run_status(run_dir) for run_dir in run_dirs]
    by_id = [
        {t.id: await _failure_tail(t, journal, backend) for t in result.tasks}
        for result, journal, backend in zip(results, journals, backends, strict=True)
    ]
    differences: list[Difference] = []
    ids = [list(journal.tasks) for journal in journals]
    for task_id in sorted(set(ids[0]) ^ set(ids[1])):
        side = sides[0] if task_id in ids[0] else sides[1]
        differences.append(Difference(task_id, "command", f"only run {side} has this task"))
    ran: list[dict[str, PlanTask]] = []
    for plan, journal, side in zip(plans, journals, sides, strict=True):
        held, changed = _ran_tasks(plan, journal)
        ran.append(held)
        if changed:
            notes.append(
                f"{side}: its plan changed since the run for {len(changed)} task(s) "
                f"({', '.join(changed[:3])}{', ...' if len(changed) > 3 else ''}); "
                "their commands and outputs are not compared"
            )
    shared_locations: list[str] = []
    for task_id in [i for i in ids[0] if i in ids[1]]:
        pair = [ran[0].get(task_id), ran[1].get(task_id)]
        # a task without both is in a note: a spec digest covers absolute uris too, so runs of
        # one plan in two checkouts differ in it; it cannot tell a changed command
        if pair[0] is not None and pair[1] is not None:
            tasks = [pair[0], pair[1]]
            if tasks[0].spec.command != tasks[1].spec.command:
                differences.append(
                    Difference(
                        task_id,
                        "command",
                        f"{sides[0]} ran {tasks[0].spec.command!r}; "
                        f"{sides[1]} ran {tasks[1].spec.command!r}",
                    )
                )
            differences += _output_differences(task_id, tasks, sides, shared_locations)
        outcome = _outcome_difference(
            task_id, sides, [by_id[0].get(task_id), by_id[1].get(task_id)]
        )
        if outcome is not None:
            differences.append(outcome)
    if shared_locations:
        notes.append(
            f"both runs collect {len(shared_locations)} output(s) to one location "
            f"({shared_locations[0]}{', ...' if len(shared_locations) > 1 else ''}), so those "
            "compare equal whatever each run wrote; give the plan outputs_dir = "
            '"results/{altar:run}" to keep each run\'s outputs'
        )
    return ComparisonReport(
        backend=journals[0].backend_type,
        reference=journals[1].backend_type,
        differences=differences,
        backend_result=results[0],
        reference_result=results[1],
        task_ids=ids[0],
        title=(
            f"run {sides[0]} ({journals[0].backend_type}) vs run {sides[1]} "
            f"({journals[1].backend_type})"
        ),
        notes=notes,
    )


def _ran_tasks(plan: Plan | None, journal: Journal) -> tuple[dict[str, PlanTask], list[str]]:
    """The plan's tasks that still hold the spec the run ran (with the output uris of this run),
    and the ids of the run's tasks the plan no longer holds as they ran."""
    if plan is None:
        return {}, []
    written = {task.id: task for task in plan.tasks}  # the journal has the plan's own text
    collected = {task.id: task for task in outputs_for_run(plan, journal.run_dir).tasks}
    ran: dict[str, PlanTask] = {}
    changed: list[str] = []
    for task_id, record in journal.tasks.items():
        task = written.get(task_id)
        if task is None or spec_digest(task.spec) != record.spec_sha256:
            changed.append(task_id)
        else:
            ran[task_id] = collected[task_id]
    return ran, changed


def _output_differences(
    task_id: str, tasks: Sequence[PlanTask], sides: Sequence[str], shared: list[str]
) -> list[Difference]:
    found = []
    outputs = [{t.logical_path: t.uri for t in task.spec.outputs} for task in tasks]
    for path in dict.fromkeys([*outputs[0], *outputs[1]]):
        uris = [outputs[0].get(path), outputs[1].get(path)]
        if uris[0] is not None and uris[0] == uris[1]:
            shared.append(uris[0])
        digests = [_file_digest(uri) for uri in uris]
        if digests[0] != digests[1]:
            found.append(
                Difference(
                    task_id,
                    "output",
                    f"{path}: {sides[0]} {digests[0] or 'produced nothing'}; "
                    f"{sides[1]} {digests[1] or 'produced nothing'}",
                )
            )
    return found


def _file_digest(uri: str | None) -> str | None:
    if uri is None:
        return None
    path = Path(uri)
    if not path.is_file():
        return None
    return f"{sha256_file(path)} ({path.stat().st_size} bytes)"
