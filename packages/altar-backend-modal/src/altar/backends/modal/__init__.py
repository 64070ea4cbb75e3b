"""Altar execution backend for Modal Sandboxes, with inputs staged on a Modal Volume.

``ModalExecutionBackend`` (registered as ``modal`` in ``altar.execution_backends``) runs each
task as one sandbox through a :class:`ModalRuntime`: by default the modal SDK, in tests the
in-memory :class:`~altar.backends.modal.fake.FakeModalRuntime`.
"""

from altar.backends.modal.__about__ import __version__
from altar.backends.modal.backend import (
    DEFAULT_APP_NAME,
    DEFAULT_VOLUME_NAME,
    ModalExecutionBackend,
)
from altar.backends.modal.render import DEFAULT_POOL_ACCELERATORS, MODAL_MAX_SANDBOX_TIMEOUT_S
from altar.backends.modal.runtime import (
    ListedSandbox,
    ModalCredentialsError,
    ModalRuntime,
    ResultStatus,
    SandboxExistsError,
    SandboxNotFoundError,
    SandboxRequest,
    SandboxResult,
)
from altar.backends.modal.staging import STAGING_RECORD_FORMAT, STAGING_RECORD_SUFFIX

__all__ = [
    "DEFAULT_APP_NAME",
    "DEFAULT_POOL_ACCELERATORS",
    "DEFAULT_VOLUME_NAME",
    "MODAL_MAX_SANDBOX_TIMEOUT_S",
    "STAGING_RECORD_FORMAT",
    "STAGING_RECORD_SUFFIX",
    "ListedSandbox",
    "ModalCredentialsError",
    "ModalExecutionBackend",
    "ModalRuntime",
    "ResultStatus",
    "SandboxExistsError",
    "SandboxNotFoundError",
    "SandboxRequest",
    "SandboxResult",
    "__version__",
]
