"""Run a plan through a backend and the in-process reference, and report every difference.

A thin layer over :func:`altar.execution.run.compare.compare_backends`: it accepts specs as well as
plans, and builds the reference for you (an :class:`InProcessExecutionBackend` that runs each
command as a local process) so a backend's test needs only::

    report = await compare_with_reference(plan, backend, workdir=tmp_path)
    assert report.ok, report.format()
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from altar.conformance.reference import InProcessExecutionBackend, run_command_locally
from altar.execution import ContainerTaskSpec, ExecutionBackend
from altar.execution.plans.plan import Plan, plan_from_specs
from altar.execution.run.compare import ComparisonReport, Difference, compare_backends

__all__ = ["ComparisonReport", "Difference", "PlanSource", "compare_with_reference"]

PlanLike = Plan | Sequence[ContainerTaskSpec]
PlanSource = PlanLike | Callable[[ExecutionBackend], PlanLike]
"""A plan, a list of specs, or a function of the backend returning either."""


def _as_plan(value: PlanLike) -> Plan:
    if isinstance(value, Plan):
        return value
    specs = list(value)
    for index, spec in enumerate(specs):
        if not isinstance(spec, ContainerTaskSpec):
            raise TypeError(
                f"compare_with_reference needs a Plan or ContainerTaskSpecs; item {index} is "
                f"{type(spec).__name__}"
            )
    if not specs:
        raise ValueError("compare_with_reference needs at least one task to compare")
    return plan_from_specs(specs)


async def compare_with_reference(
    plan_or_specs: PlanSource,
    backend: ExecutionBackend,
    reference: ExecutionBackend | None = None,
    *,
    workdir: str | os.PathLike[str],
    **options: Any,
) -> ComparisonReport:
    """Run the plan on ``backend`` and on ``reference`` and compare commands, outputs, outcomes.

    ``plan_or_specs`` may be a function of the backend, for specs whose commands name paths
    from that backend's :meth:`~altar.execution.ExecutionBackend.path_resolver` (the commands
    are compared with each backend's mount root normalized). Without ``reference``, an
    in-process backend running each command as a local process is used, with its data root
    under ``workdir/reference-data``. ``options`` go to ``compare_backends`` (``max_parallel``,
    ``max_retries``, ``poll_interval_s``, ``on_event``, ...).
    """
    workdir = Path(workdir)
    if reference is None:
        reference = InProcessExecutionBackend(
            run_command_locally, data_root=workdir / "reference-data"
        )
    if callable(plan_or_specs):
        source = plan_or_specs

        def plan(each: ExecutionBackend) -> Plan:
            return _as_plan(source(each))

        return await compare_backends(plan, backend, reference, workdir=workdir, **options)
    return await compare_backends(
        _as_plan(plan_or_specs), backend, reference, workdir=workdir, **options
    )
