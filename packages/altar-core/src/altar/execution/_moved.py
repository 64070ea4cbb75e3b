"""The old, flat import paths of altar-core's modules, kept working after they moved into rooms.

Until 0.5 every module sat directly in ``altar.execution``; they now live in subpackages
(``run``, ``state``, ``digests``, ``plans``, ``cli``). Code that imports an old path, say
``altar.execution.runner``, gets the very module object of its new path
(``altar.execution.run.runner``), so attributes and monkeypatches are shared. Type checkers see
only the new paths.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Sequence

_PACKAGE = "altar.execution"

MOVED: dict[str, str] = {
    **{
        name: f"run.{name}"
        for name in (
            "runner",
            "scheduling",
            "submitting",
            "observing",
            "reconciling",
            "retrying",
            "holding",
            "budget",
            "ledger",
            "staging",
            "staging_progress",
            "caching",
            "cancelling",
            "litter",
            "clock",
            "results",
            "progress",
            "routed",
            "compare",
        )
    },
    **{name: f"state.{name}" for name in ("journal", "records", "summary", "runs", "bulk")},
    **{
        name: f"plans.{name}"
        for name in (
            "plan",
            "plan_cache",
            "sweeps",
            "routing",
            "placeholders",
            "checking",
        )
    },
    "digest": "digests.digest",
    "digest_copy": "digests.copy",
    "digest_transfers": "digests.transfers",
    "stager": "digests.stager",
    **{
        f"cli_{name}": f"cli.{name}"
        for name in (
            "cache",
            "check",
            "logs",
            "report",
            "resume",
            "runs",
            "status",
        )
    },
}
"""Old module name under ``altar.execution`` -> its path under ``altar.execution`` today."""


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self._target = target
        self._spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        # The import system keeps the module's __name__ and __file__ (it fills in only missing
        # ones), so the alias and the new path are one object; __spec__ it always replaces.
        module = importlib.import_module(self._target)
        self._spec = module.__spec__
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        """Give the module back the spec of its real path (``reload`` and ``find_spec`` read it)."""
        module.__spec__ = self._spec


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        package, _, name = fullname.rpartition(".")
        if package != _PACKAGE or name not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(f"{_PACKAGE}.{MOVED[name]}"))


def install_moved_finder() -> None:
    """Put the finder last on ``sys.meta_path`` (once): real modules are always found first."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
