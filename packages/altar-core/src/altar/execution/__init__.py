"""Altar's execution contract: portable container tasks on any compute fabric.

Only the contract lives here; backends are separate distributions found through the
``altar.execution_backends`` entry-point group (see :mod:`altar.execution.registry`).
"""

from altar.execution.__about__ import __version__
from altar.execution.atomic import atomic_write, remove_stale_temporaries, temp_path
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
from altar.execution.gather import gather_bounded
from altar.execution.handles import mint_handle
from altar.execution.labels import (
    LABEL_ATTEMPT,
    LABEL_RUN,
    LABEL_SUBMISSION,
    LABEL_TASK,
    RESERVED_LABEL_PREFIX,
    submission_key,
    submission_labels,
)
from altar.execution.stager import LocalStager, StageAction, collect_output, verify_output_digest
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
from altar.execution.uris import local_file, local_path

__all__ = [
    "CONTAINER_MOUNT_ROOT",
    "EXECUTION_BACKEND_GROUP",
    "LABEL_ATTEMPT",
    "LABEL_RUN",
    "LABEL_SUBMISSION",
    "LABEL_TASK",
    "RESERVED_LABEL_PREFIX",
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
    "LocalStager",
    "PathResolver",
    "PlanError",
    "RegistryError",
    "ResourceRequest",
    "StageAction",
    "TaskFailure",
    "TaskHandle",
    "TaskState",
    "TaskStatus",
    "Transfer",
    "TransferIntegrityError",
    "UnsupportedCapabilityError",
    "__version__",
    "atomic_write",
    "collect_output",
    "copy_and_verify",
    "gather_bounded",
    "has_verification_record",
    "is_sha256_digest",
    "local_file",
    "local_path",
    "mint_handle",
    "remove_stale_temporaries",
    "sha256_file",
    "spec_from_dict",
    "spec_to_dict",
    "submission_key",
    "submission_labels",
    "temp_path",
    "verify_file_digest",
    "verify_files",
    "verify_files_script",
    "verify_output_digest",
    "verify_transfer_digest",
]
