"""The in-process reference backend passes the suite, in every configuration it offers."""

from __future__ import annotations

from altar.conformance.reference import InProcessTaskVerifyingBackend
from altar.conformance.reference_contract import InProcessBackendContract


class TestInProcessBackend(InProcessBackendContract):
    """CPU only: GPU requests are refused explicitly; no lifetime cap."""


class TestInProcessBackendWithGpus(InProcessBackendContract):
    """A host with 4 devices: GPU counts are launched exactly; 5 are refused."""

    backend_options = {"gpus": 4}


class TestInProcessBackendWithLifetimeCap(InProcessBackendContract):
    """A capped provider: no limit means the maximum; a longer explicit limit is refused."""

    unlimited_timeout_s = 3600
    max_timeout_s = 3600


class TestInProcessBackendVerifyingInTask(InProcessBackendContract):
    """ "task" verification: a wrong input fails the task with input_digest_mismatch."""

    backend_class = InProcessTaskVerifyingBackend
