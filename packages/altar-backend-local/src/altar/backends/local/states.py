"""Deprecated module name, kept for one release: import from
``altar.backends.local.classify``.

Importing it warns (``DeprecationWarning``); it is removed in the release after next.
"""

from __future__ import annotations

import warnings

from altar.backends.local.classify import (
    DEADLINE_SLACK_S,
    LIVE_STATES,
    TERMINAL_STATES,
    Outcome,
    deadline,
    live_state,
    terminal_failure,
    timeout_failure,
)

__all__ = [
    "DEADLINE_SLACK_S",
    "LIVE_STATES",
    "TERMINAL_STATES",
    "Outcome",
    "deadline",
    "live_state",
    "terminal_failure",
    "timeout_failure",
]

warnings.warn(
    "altar.backends.local.states is deprecated; import from altar.backends.local.classify",
    DeprecationWarning,
    stacklevel=2,
)
