"""Altar's execution contract: portable container tasks on any compute fabric.

Only the contract lives here; backends are separate distributions found through the
``altar.execution_backends`` entry-point group (see :mod:`altar.execution.registry`).
"""

from altar.execution.__about__ import __version__
from altar.execution.backend import EXECUTION_BACKEND_GROUP, DigestVerification, ExecutionBackend
from altar.execution.digest import (
    VERIFICATION_RECORD_FORMAT,
    VERIFICATION_RECORD_SUFFIX,
    copy_and_verify,
    has_verification_record,
    sha256_file,
    verify_file_digest,
    verify_files,
    verify_files_script,
    verify_transfer_digest,
)
from altar.execution.errors import (
    AltarError,
    BackendImportError,
    BackendUnavailableError,
    BackendValidationError,
    DigestMismatchError,
    DuplicateBackendError,
    JournalError,
    PlanError,
    RegistryError,
    TransferIntegrityError,
    UnsupportedCapabilityError,
)
from altar.execution.types import (
    CONTAINER_MOUNT_ROOT,
    Capacity,
    ContainerTaskSpec,
    GpuPool,
    PathResolver,
    ResourceRequest,
    TaskFailure,
    TaskHandle,
    TaskState,
    TaskStatus,
    Transfer,
    is_sha256_digest,
    spec_from_dict,
    spec_to_dict,
)

__all__ = [
    "CONTAINER_MOUNT_ROOT",
    "EXECUTION_BACKEND_GROUP",
    "VERIFICATION_RECORD_FORMAT",
    "VERIFICATION_RECORD_SUFFIX",
    "AltarError",
    "BackendImportError",
    "BackendUnavailableError",
    "BackendValidationError",
    "Capacity",
    "ContainerTaskSpec",
    "DigestMismatchError",
    "DigestVerification",
    "DuplicateBackendError",
    "ExecutionBackend",
    "GpuPool",
    "JournalError",
    "PathResolver",
    "PlanError",
    "RegistryError",
    "ResourceRequest",
    "TaskFailure",
    "TaskHandle",
    "TaskState",
    "TaskStatus",
    "Transfer",
    "TransferIntegrityError",
    "UnsupportedCapabilityError",
    "__version__",
    "copy_and_verify",
    "has_verification_record",
    "is_sha256_digest",
    "sha256_file",
    "spec_from_dict",
    "spec_to_dict",
    "verify_file_digest",
    "verify_files",
    "verify_files_script",
    "verify_transfer_digest",
]
