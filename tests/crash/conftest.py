"""The crash-consistency tests' harness, ``crashkit``, importable from the tests.

``crashkit`` is a plain package beside the tests; under ``--import-mode=importlib`` a test
module cannot import its neighbours, so this directory goes on ``sys.path`` once here. The
counts the tests record are printed by ``tests/conftest.py``. The fixtures here: the lock that
keeps crash tests apart, and a private Docker engine the engine-kill tests may kill.
"""

from __future__ import annotations

import fcntl
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from crashkit.engine import PrivateEngine  # noqa: E402  (needs HERE on sys.path)

LOCK = Path(tempfile.gettempdir()) / "altar-crash-tests.lock"


@pytest.fixture
def crash_lock() -> Iterator[None]:
    """One crash test at a time on this machine, whichever xdist worker runs it."""
    with open(LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture
def private_engine(docker_host: str) -> Iterator[PrivateEngine]:
    """A Docker engine of this test's own (``scripts/services`` in a private state directory).

    ``docker_host`` only makes sure Docker is there (or the test is skipped/failed as the
    other real-provider tests are); the engine killed here is never the shared one.
    """
    # short: the engine's unix socket path must fit in 108 bytes
    state = Path(tempfile.mkdtemp(prefix="altar-crash-engine-", dir="/tmp"))
    engine = PrivateEngine(state)
    try:
        engine.up()
        yield engine
    finally:
        engine.down()  # also ends the shims a killed daemon leaves behind
        engine.remove()
