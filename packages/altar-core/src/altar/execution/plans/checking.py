"""``altar check PLAN`` and ``altar run --dry-run``: what would fail, before anything is staged.

The plan itself and the backend options are checked by loading them (one line naming the field
on error, as ``altar run`` does). Then, without creating anything:

- every staged input that is a file on this machine must exist and be a readable regular file
  (a digest covers one file; a FIFO or device never is one); a directory only where the
  backend stages directories (``ExecutionBackend.stages_directories``);
- every distinct image is asked about (``ExecutionBackend.image_present``); a backend that
  cannot tell says so, and the check notes it;
- the backend checks its own setup (``ExecutionBackend.check_backend``: Slurm's login node,
  partition, container runtime), each problem naming its option;
- every task's spec goes through ``ExecutionBackend.check_spec``, where a backend refuses the
  resources, GPU types or options it cannot represent (``submit`` would refuse them later).

Each problem is one line naming the plan field (``plan.toml: tasks[3].resources.gpu: ...``).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

from altar.execution.backend import ExecutionBackend
from altar.execution.errors import BackendUnavailableError, UnsupportedCapabilityError
from altar.execution.plans.plan import Plan
from altar.execution.run.routed import lanes_of
from altar.execution.uris import local_path_or_none

__all__ = ["CheckReport", "check_plan"]


@dataclass
class CheckReport:
    """What ``check_plan`` found: problems (each one line) and notes (what it could not tell)."""

    tasks: int
    backend: str
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    images_present: int = 0
    inputs_checked: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "tasks": self.tasks,
            "backend": self.backend,
            "problems": self.problems,
            "notes": self.notes,
            "images_present": self.images_present,
            "inputs_checked": self.inputs_checked,
        }


def _input_problem(path: str, *, directories: bool) -> str | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return f"{path!r} does not exist"
    except OSError as error:
        return f"{path!r} cannot be read: {error.strerror or error}"
    if stat.S_ISDIR(st.st_mode):
        if directories:
            return None  # the backend stages a directory without a digest as a tree
        return f"{path!r} is a directory; this backend stages single files, so ship an archive"
    if not stat.S_ISREG(st.st_mode):
        # a FIFO, socket or device: reading it would hang or never end, so no backend stages it
        return f"{path!r} is not a regular file ({_kind(st.st_mode)}); name a regular file"
    if not os.access(path, os.R_OK):
        return f"{path!r} cannot be read: Permission denied"
    return None


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a file"


def _check_inputs(plan: Plan, backend: ExecutionBackend, report: CheckReport) -> None:
    staged = {(t.uri, t.logical_path) for t in plan.staged_inputs()}
    for index, task in enumerate(plan.tasks):
        for number, transfer in enumerate(task.spec.inputs):
            if (transfer.uri, transfer.logical_path) not in staged:
                continue  # another task writes it: it is not staged
            path = local_path_or_none(transfer.uri)
            if path is None:
                continue  # bytes elsewhere: the backend fetches them
            where = f"{plan.source}: tasks[{index}].inputs[{number}]"
            problem = _input_problem(path, directories=backend.stages_directories)
            if problem is None and transfer.digest is not None and not os.path.isfile(path):
                problem = (
                    f"{path!r} is not a regular file; a sha256 digest covers the bytes of one "
                    "file, so ship a directory as an archive"
                )
            if problem:
                report.problems.append(f"{where}: input {problem}")
            else:
                report.inputs_checked += 1
            staged.discard((transfer.uri, transfer.logical_path))  # once per input


async def _check_images(plan: Plan, backend: ExecutionBackend, report: CheckReport) -> None:
    first: dict[str, int] = {}
    for index, task in enumerate(plan.tasks):
        first.setdefault(task.spec.image, index)
    unknown = 0
    for image, index in first.items():
        try:
            present = await backend.image_present(image)
        except BackendUnavailableError as error:
            report.notes.append(f"images not checked: the backend did not answer: {error}")
            return
        if present is None:
            unknown += 1
        elif present:
            report.images_present += 1
        else:
            report.problems.append(
                f"{plan.source}: tasks[{index}].image: backend {backend.name!r} cannot find "
                f"image {image!r}"
            )
    if unknown:
        report.notes.append(
            f"backend {backend.name!r} cannot tell whether {unknown} image(s) exist; "
            "they are pulled when the tasks start"
        )


#: A refused capability as the plan field the user wrote (``memory`` is ``resources.memory_gb``).
_PLAN_FIELDS = {
    "memory": "resources.memory_gb",
    "cpu": "resources.cpu",
    "gpu": "resources.gpu",
    "count": "resources.count",
    "timeout": "timeout_s",
}


async def _check_specs(plan: Plan, backend: ExecutionBackend, report: CheckReport) -> None:
    unanswered = False
    for index, task in enumerate(plan.tasks):
        # a routed task is checked on its backend and on each fallback it may move to
        for route, lane in lanes_of(backend, task.id):
            try:
                await lane.check_spec(task.spec)
            except (UnsupportedCapabilityError, ValueError) as error:
                capability = getattr(error, "capability", None)
                field_name = _PLAN_FIELDS.get(capability, capability) if capability else None
                where = f"tasks[{index}]" + (f".{field_name}" if field_name else "")
                text = " ".join(str(error).split())
                name = f"backends.{route}" if route is not None else repr(backend.name)
                report.problems.append(f"{plan.source}: {where}: backend {name} refuses it: {text}")
            except BackendUnavailableError as error:
                # Keep going: what a backend refuses without asking its provider still counts.
                if not unanswered:
                    report.notes.append(
                        f"resources not checked: the backend did not answer: {error}"
                    )
                unanswered = True


async def _check_backend(plan: Plan, backend: ExecutionBackend, report: CheckReport) -> None:
    for option, text in await backend.check_backend():
        where = f"backend.options.{option}" if option else "backend"  # "": no option (a login)
        report.problems.append(f"{plan.source}: {where}: {text}")


async def check_plan(plan: Plan, backend: ExecutionBackend) -> CheckReport:
    """Every check above; nothing is staged, submitted or written."""
    report = CheckReport(tasks=len(plan.tasks), backend=backend.name)
    await _check_backend(plan, backend, report)
    _check_inputs(plan, backend, report)
    await _check_images(plan, backend, report)
    await _check_specs(plan, backend, report)
    return report


def format_check(report: CheckReport, source: str) -> str:
    """The text ``altar check`` prints on success (problems are printed as errors)."""
    lines = [
        f"{source}: {report.tasks} task(s) on {report.backend}: plan and backend options valid, "
        f"{report.inputs_checked} local input(s) readable, {report.images_present} image(s) "
        "present, resources accepted"
    ]
    lines += [f"note: {note}" for note in report.notes]
    return "\n".join(lines)
