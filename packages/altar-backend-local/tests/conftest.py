from __future__ import annotations

from pathlib import Path

import pytest
from altar.backends.local import LocalDockerExecutionBackend
from altar.backends.local.fake import FakeDockerRuntime


@pytest.fixture
def engine() -> FakeDockerRuntime:
    return FakeDockerRuntime()


@pytest.fixture
def backend(tmp_path: Path, engine: FakeDockerRuntime) -> LocalDockerExecutionBackend:
    instance = LocalDockerExecutionBackend(
        data_root=tmp_path / "data", runtime=engine, watchdog=False
    )
    return instance
