"""Old name of :mod:`altar.backends.local.classify`, kept for one release (altar 0.4).

Import from ``altar.backends.local.classify`` instead. No warning is raised; the module goes
away in the release after next.
"""

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
