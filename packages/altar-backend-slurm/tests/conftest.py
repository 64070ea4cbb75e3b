from __future__ import annotations

from pathlib import Path

import pytest
from altar.backends.slurm import SlurmExecutionBackend
from altar.backends.slurm.fake import FakeLoginNode

#: The fake cluster's partition caps jobs at one day, like many real ones.
MAX_TIME_S = 86400


@pytest.fixture
def node() -> FakeLoginNode:
    return FakeLoginNode(partitions={"debug": MAX_TIME_S, "long": None}, gpus={"a100": 2})


@pytest.fixture
def backend(tmp_path: Path, node: FakeLoginNode) -> SlurmExecutionBackend:
    return SlurmExecutionBackend(
        data_root=tmp_path / "data",
        container_runtime="docker",
        runtime=node,
        gpu_types={"gpu": None, "a100": "a100"},
        cancel_wait_s=0,
        # Classification tests: every poll may ask the queue, and a missing record is not
        # waited for (test_completion.py tests the pacing and the wait with a fake clock).
        queue_interval_s=0,
        exit_read_timeout_s=0,
    )
