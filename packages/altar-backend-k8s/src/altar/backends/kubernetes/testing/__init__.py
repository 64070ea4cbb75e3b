"""Test support for the Kubernetes backend: a fake API server the real clients accept."""

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
