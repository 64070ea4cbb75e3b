"""Altar execution backend for Slurm clusters: ``slurm`` in ``altar.execution_backends``."""

from altar.backends.slurm.__about__ import __version__
from altar.backends.slurm.backend import (
    DATA_ROOT_ENV,
    LOG_TAIL_LINES,
    SCRATCH_DIR,
    SlurmExecutionBackend,
)
from altar.backends.slurm.render import (
    ALLOWED_DIRECTIVES,
    CONTAINER_RUNTIMES,
    JobLayout,
    RuntimeCommand,
    SlurmPlacement,
    batch_script,
    runtime_command,
)
from altar.backends.slurm.runtime import (
    CommandResult,
    LoginNode,
    LoginNodeLostError,
    LoginNodeUnknownError,
    LoginNodeUnreachableError,
    TransferError,
)
from altar.backends.slurm.sdk_runtime import LocalLoginNode, SshLoginNode

__all__ = [
    "ALLOWED_DIRECTIVES",
    "CONTAINER_RUNTIMES",
    "DATA_ROOT_ENV",
    "LOG_TAIL_LINES",
    "SCRATCH_DIR",
    "CommandResult",
    "JobLayout",
    "LocalLoginNode",
    "LoginNode",
    "LoginNodeLostError",
    "LoginNodeUnknownError",
    "LoginNodeUnreachableError",
    "RuntimeCommand",
    "SlurmExecutionBackend",
    "SlurmPlacement",
    "SshLoginNode",
    "TransferError",
    "__version__",
    "batch_script",
    "runtime_command",
]
