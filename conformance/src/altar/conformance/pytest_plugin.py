"""pytest plugin (entry point ``pytest11``): the suite runs in a project with no configuration.

pytest-asyncio warns at start-up when ``asyncio_default_fixture_loop_scope`` is unset, so
``-W error`` (or ``filterwarnings = error``) stops a bare project before a single test runs.
The README promises that no asyncio configuration is needed: when the project leaves the
option unset, this plugin makes its default ``fixture-scope``, which is exactly what
pytest-asyncio does when it is unset, minus the warning. A value the project sets (in its
ini file or with ``-o``) always wins.
"""

from __future__ import annotations

import pytest

__all__ = ["LOOP_SCOPE_OPTION"]

LOOP_SCOPE_OPTION = "asyncio_default_fixture_loop_scope"


def _keep_current_behaviour() -> str | None:
    """pytest-asyncio's value for "the fixture's own scope", when it has one."""
    try:
        from pytest_asyncio import plugin
    except ImportError:  # pragma: no cover - pytest-asyncio is a dependency
        return None
    value = getattr(plugin, "_MATCH_FIXTURE_SCOPE", None)
    return value if isinstance(value, str) else None


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser) -> None:
    # Runs after every plugin declared its ini options and before pytest-asyncio reads this
    # one (in pytest_configure). Declaring it again only changes the default.
    default = _keep_current_behaviour()
    if default is not None:
        parser.addini(
            LOOP_SCOPE_OPTION,
            "default scope of the asyncio event loop used to execute async fixtures "
            f"(unset: {default!r}, set by altar-conformance)",
            type="string",
            default=default,
        )
