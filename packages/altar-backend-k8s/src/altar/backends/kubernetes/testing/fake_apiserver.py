"""Import shim, kept for one release: the fake API server moved to :mod:`.apiserver`.

This module will be removed in the next release.
"""

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
