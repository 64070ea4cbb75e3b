"""The Altar execution-backend conformance suite, reference backend and comparison harness.

``from altar.conformance import ExecutionBackendContract`` in a test module and subclass it.
Names are imported lazily so that loading the ``in-process`` backend through the entry-point
registry does not import pytest, and so the suite module is registered for pytest's assertion
rewriting before it is first imported.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

from altar.conformance.__about__ import __version__

if TYPE_CHECKING:
    from altar.conformance.compare import compare_with_reference
    from altar.conformance.contract import ExecutionBackendContract
    from altar.conformance.launched import LaunchedTask, ProviderTask
    from altar.conformance.reference import InProcessExecutionBackend, InProcessFabric

__all__ = [
    "ExecutionBackendContract",
    "InProcessExecutionBackend",
    "InProcessFabric",
    "LaunchedTask",
    "ProviderTask",
    "__version__",
    "compare_with_reference",
]

_EXPORTS = {
    "ExecutionBackendContract": "altar.conformance.contract",
    "LaunchedTask": "altar.conformance.launched",
    "ProviderTask": "altar.conformance.launched",
    "InProcessExecutionBackend": "altar.conformance.reference",
    "InProcessFabric": "altar.conformance.reference",
    "compare_with_reference": "altar.conformance.compare",
}

# Every module of the suite that asserts: pytest rewrites their plain asserts (values shown)
# whether the distribution is installed as a wheel or editable.
_SUITE_MODULES = (
    "altar.conformance._polling",
    "altar.conformance.adoption",
    "altar.conformance.contract",
    "altar.conformance.endings",
    "altar.conformance.provider",
    "altar.conformance.reference_contract",
)


def _register_suite_for_assert_rewriting() -> None:
    import pytest

    # Rewriting only works for modules not yet imported (pytest warns otherwise).
    pending = [name for name in _SUITE_MODULES if name not in sys.modules]
    if pending:
        pytest.register_assert_rewrite(*pending)


if "pytest" in sys.modules:
    # Inside a test session: register now, so importing a suite module directly
    # (altar.conformance.contract) still gets readable assertion failures.
    _register_suite_for_assert_rewriting()


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if module_name in _SUITE_MODULES:
        _register_suite_for_assert_rewriting()
    # Not cached in this module's globals: the package stays imported (the pytest plugin
    # lives in it) while a pytester session may drop and re-import the suite's modules.
    return getattr(importlib.import_module(module_name), name)
