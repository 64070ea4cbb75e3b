"""Deprecated module name, kept for one release: import from
``altar.backends.kubernetes.testing.apiserver``.

Importing it warns (``DeprecationWarning``); it is removed in the release after next.
"""

from __future__ import annotations

import warnings

from altar.backends.kubernetes.testing.apiserver import (
    FakeApiServer,
    RecordedRequest,
    matches_selector,
    parse_selector,
    running_fake_apiserver,
)

__all__ = [
    "FakeApiServer",
    "RecordedRequest",
    "matches_selector",
    "parse_selector",
    "running_fake_apiserver",
]

warnings.warn(
    "altar.backends.kubernetes.testing.fake_apiserver is deprecated; "
    "import from altar.backends.kubernetes.testing.apiserver",
    DeprecationWarning,
    stacklevel=2,
)
