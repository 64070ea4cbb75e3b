"""Removing the temporary files that killed processes of this run left, and nothing else.

A run journals the pid of every process that drives it before that process writes anything.
On resume and at a clean end the runner removes, from the run directory and from the
directories of the plan's local outputs, the temporary files of altar's one pattern
(:mod:`altar.execution.atomic`) whose pid is one of those earlier processes. While staging it
names the same pids (:func:`~altar.execution.atomic.sweeping_for`), so a
:class:`~altar.execution.digests.stager.LocalStager` removes their leftovers where it copies. A file
that is not of the pattern, or of another process, is never touched.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from altar.execution.atomic import remove_stale_temporaries, temp_owner
from altar.execution.plans.plan import Plan
from altar.execution.uris import local_path_or_none

__all__ = ["litter_directories", "remove_litter", "remove_run_dir_litter"]


def litter_directories(plan: Plan, run_dir: Path) -> list[Path]:
    """Where this run's processes write temporary files: the run directory, the outputs' dirs."""
    found = {os.path.abspath(run_dir): None}
    for task in plan.tasks:
        for transfer in task.spec.outputs:
            path = local_path_or_none(transfer.uri)
            if path is not None:
                found[os.path.dirname(os.path.abspath(path))] = None
    return [Path(directory) for directory in found]


def remove_litter(directories: Iterable[Path], owners: Iterable[int]) -> list[Path]:
    """Remove the owners' temporary files in ``directories``; return what was removed."""
    owners = set(owners) - {os.getpid()}
    removed: list[Path] = []
    if owners:
        for directory in directories:
            removed.extend(remove_stale_temporaries(directory, owners))
    return removed


def remove_run_dir_litter(run_dir: Path) -> list[Path]:
    """Remove every other process's temporary file in ``run_dir`` (call it with the lock held)."""
    try:
        names = os.listdir(run_dir)
    except OSError:
        return []
    strangers = {pid for name in names if (pid := temp_owner(name)) is not None}
    return remove_stale_temporaries(run_dir, strangers - {os.getpid()})
