"""Altar's execution contract: portable container tasks on any compute fabric.

Only the contract lives here; backends are separate distributions found through the
``altar.execution_backends`` entry-point group (see :mod:`altar.execution.registry`).

Importing this package stays cheap (``altar backends`` and every backend pay for it): the
members that need hashing, threads or the journal (``_LAZY``) are imported on first use
(PEP 562), and ``from altar.execution import X`` works the same for every ``X`` in ``__all__``.
"""

import importlib
import typing

from altar.execution.__about__ import __version__
from altar.execution._moved import install_moved_finder as _install_moved_finder
from altar.execution.atomic import atomic_write, remove_stale_temporaries, temp_path
from altar.execution.backend import EXECUTION_BACKEND_GROUP, DigestVerification, ExecutionBackend
from altar.execution.errors import (
    AltarError,
    BackendCallError,
    BackendImportError,
    BackendUnavailableError,
    BackendValidationError,
    CancelIncompleteError,
    DigestMismatchError,
    DuplicateBackendError,
    JournalError,
    OutputCollectionError,
    PlanError,
    ProviderLimitError,
    RegistryError,
    RunStoppedError,
    StagingError,
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
from altar.execution.types import (
    CONTAINER_MOUNT_ROOT,
    PROVIDER_ENDINGS,
    Capacity,
    ContainerTaskSpec,
    GpuPool,
    PathResolver,
    ResourceRequest,
    TaskFailure,
    TaskHandle,
    TaskLogs,
    TaskState,
    TaskStatus,
    Transfer,
    is_sha256_digest,
    spec_from_dict,
    spec_to_dict,
)
from altar.execution.uris import local_file, local_path

_install_moved_finder()

# Imported on first use: digests pull in hashlib, results the journal and JSON, the stager
# threads; a backend's import and `altar backends` need none of them.
_LAZY = {
    "VERIFICATION_RECORD_FORMAT": "digests.digest",
    "VERIFICATION_RECORD_SUFFIX": "digests.digest",
    "copy_and_verify": "digests.copy",
    "has_verification_record": "digests.digest",
    "sha256_file": "digests.digest",
    "verify_file_digest": "digests.digest",
    "verify_files": "digests.digest",
    "verify_files_script": "digests.digest",
    "verify_transfer_digest": "digests.digest",
    "RunEvent": "run.results",
    "RunResult": "run.results",
    "TaskResult": "run.results",
    "LocalStager": "digests.stager",
    "StageAction": "digests.stager",
    "collect_output": "digests.stager",
    "verify_output_digest": "digests.stager",
}

if typing.TYPE_CHECKING:  # what type checkers see: the same names, imported eagerly
    from altar.execution.digests.copy import copy_and_verify
    from altar.execution.digests.digest import (
        VERIFICATION_RECORD_FORMAT,
        VERIFICATION_RECORD_SUFFIX,
        has_verification_record,
        sha256_file,
        verify_file_digest,
        verify_files,
        verify_files_script,
        verify_transfer_digest,
    )
    from altar.execution.digests.stager import (
        LocalStager,
        StageAction,
        collect_output,
        verify_output_digest,
    )
    from altar.execution.run.results import RunEvent, RunResult, TaskResult

else:  # hidden from type checkers, which would otherwise accept any name as an attribute

    def __getattr__(name: str) -> object:
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
        globals()[name] = value  # once: later lookups do not come here
        return value

    def __dir__() -> list[str]:
        return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "CONTAINER_MOUNT_ROOT",
    "EXECUTION_BACKEND_GROUP",
    "LABEL_ATTEMPT",
    "LABEL_RUN",
    "LABEL_SUBMISSION",
    "LABEL_TASK",
    "PROVIDER_ENDINGS",
    "RESERVED_LABEL_PREFIX",
    "VERIFICATION_RECORD_FORMAT",
    "VERIFICATION_RECORD_SUFFIX",
    "AltarError",
    "BackendCallError",
    "BackendImportError",
    "BackendUnavailableError",
    "BackendValidationError",
    "CancelIncompleteError",
    "Capacity",
    "ContainerTaskSpec",
    "DigestMismatchError",
    "DigestVerification",
    "DuplicateBackendError",
    "ExecutionBackend",
    "GpuPool",
    "JournalError",
    "LocalStager",
    "OutputCollectionError",
    "PathResolver",
    "PlanError",
    "ProviderLimitError",
    "RegistryError",
    "ResourceRequest",
    "RunEvent",
    "RunResult",
    "RunStoppedError",
    "StageAction",
    "StagingError",
    "TaskFailure",
    "TaskHandle",
    "TaskLogs",
    "TaskResult",
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
