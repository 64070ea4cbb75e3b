"""Errors raised by altar-core, every class that crosses a public boundary.

The whole tree (a class's other bases in parentheses)::

    Exception
    ├── ValueError
    │   ├── DigestMismatchError            bytes do not match their declared sha256
    │   │   └── TransferIntegrityError     ... for an input or output a backend moved or a task read
    │   ├── UnsupportedCapabilityError     the backend cannot represent what the spec asks for
    │   └── UncacheableError               the task cache cannot key a task (a tag, no digest)
    ├── OSError
    │   └── ConnectionError
    │       └── BackendUnavailableError    the provider could not be asked; transient, retry later
    │           └── ProviderLimitError     the provider refuses more work for now (quota, limit)
    └── AltarError                         altar's own usage, configuration and run errors
        ├── PlanError                      a plan file or plan object is invalid
        ├── JournalError                   a run journal is unreadable, unwritable or foreign
        ├── RegistryError (LookupError)    a backend could not be found, loaded or validated
        │   ├── DuplicateBackendError      two distributions claim one backend name
        │   ├── BackendImportError (ImportError)  a backend's optional dependency is missing
        │   └── BackendValidationError     an entry point does not name a valid backend class
        └── RunStoppedError                a run stopped early; it resumes from its run directory
            ├── StagingError               staging the plan's inputs failed
            ├── OutputCollectionError      no space to collect outputs (the success is kept)
            ├── BackendCallError (RuntimeError)  poll or capacity failed, not transiently
            └── CancelIncompleteError      some tasks could not be cancelled (``task_ids``)

Seam-internal, never raised out of altar-core::

    Exception
    ├── _NotARegularFile                   digest: an open found no regular file (becomes a
    │                                      DigestMismatchError or the OSError it wraps)
    └── UsageError                         cli: a command-line mistake (one line, exit status 2)

How the runner treats what ``submit`` raises (the submit-error rule): a ``ValueError`` (so also
``UnsupportedCapabilityError``) fails the attempt as ``submit_rejected``, deterministic, not
retried; ``BackendUnavailableError`` withdraws the attempt and tries again later without using
one; ``ProviderLimitError`` does the same and also holds every further submit back until
the limit lifts (said once); anything else fails it as ``submit_failed``, retried while
attempts remain. A refusal that can never pass (a quota smaller than the task's own request)
is a ``ValueError``, not a limit.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "AltarError",
    "BackendCallError",
    "BackendImportError",
    "BackendUnavailableError",
    "BackendValidationError",
    "CancelIncompleteError",
    "DigestMismatchError",
    "DuplicateBackendError",
    "JournalError",
    "OutputCollectionError",
    "PlanError",
    "ProviderLimitError",
    "RegistryError",
    "RunStoppedError",
    "StagingError",
    "TransferIntegrityError",
    "UncacheableError",
    "UnsupportedCapabilityError",
]


class AltarError(Exception):
    """Base class for Altar's own usage and configuration errors."""


class DigestMismatchError(ValueError):
    """A file's bytes do not match its declared sha256 digest, or it is not a regular file."""


class TransferIntegrityError(DigestMismatchError):
    """An input transfer failed its content-addressed check."""


class UnsupportedCapabilityError(ValueError):
    """The backend cannot represent a capability the spec requires (never silently degraded)."""

    def __init__(self, message: str, *, capability: str | None = None) -> None:
        super().__init__(message)
        self.capability = capability


class UncacheableError(ValueError):
    """The task cache cannot key this task (say, its image is a mutable tag); says why."""


class BackendUnavailableError(ConnectionError):
    """The provider could not be reached or answered with a server error.

    Transient: the task may well exist. Callers retry later; a backend must never turn this
    into a terminal ``container_missing`` status.
    """


class ProviderLimitError(BackendUnavailableError):
    """The provider refused a submit because a limit is reached, not because the task is wrong.

    A namespace quota, a per-user submit limit, a rate limit: the submit may pass later. The
    runner withdraws the attempt (no retry is used), holds further submits back for
    ``retry_after_s`` (when the provider says) or a growing pause, and says once what holds
    the run. ``limit`` names the limit in a few words (``"QOSMaxSubmitJobPerUserLimit"``,
    ``"ResourceQuota compute"``); the message says it in a sentence.
    """

    def __init__(
        self, message: str, *, limit: str | None = None, retry_after_s: float | None = None
    ) -> None:
        super().__init__(message)
        self.limit = limit
        self.retry_after_s = retry_after_s


class PlanError(AltarError):
    """A plan is invalid; the message names the file and the field.

    ``problems`` holds every problem found (each one line); the message is the first.
    """

    def __init__(self, message: str, problems: Sequence[str] | None = None) -> None:
        super().__init__(message)
        self.problems: list[str] = list(problems) if problems else [message]


class JournalError(AltarError):
    """A run journal cannot be used (unreadable, corrupt, or written by an incompatible version)."""


class RegistryError(AltarError, LookupError):
    """A backend name cannot be resolved to a usable backend class."""


class DuplicateBackendError(RegistryError):
    """More than one installed distribution registers the same backend name."""


class BackendImportError(RegistryError, ImportError):
    """Importing a backend failed, usually because its distribution's dependency is missing."""


class BackendValidationError(RegistryError):
    """An entry point names something that is not a valid ExecutionBackend for its key."""


class RunStoppedError(AltarError):
    """A run stopped before its end; its tasks keep their journal and it can be resumed.

    The one base the CLI catches for "the run stopped" (exit status 1): the message says why
    and what to do, and the run directory resumes once the cause is fixed.
    """


class StagingError(RunStoppedError):
    """Staging the plan's inputs failed (a digest mismatch, a missing source, ...)."""


class OutputCollectionError(RunStoppedError):
    """Outputs could not be collected because this machine is out of space; the run stopped.

    The task keeps its success and its outputs are collected when the run resumes, so a full
    disk costs neither the result nor a rerun of the task.
    """


class BackendCallError(RunStoppedError, RuntimeError):
    """The backend's ``poll`` or ``capacity`` failed with an error that is not transient.

    For example a refused credential, or a backend bug. The run stops; its tasks keep running
    and the run resumes from its run directory once the cause is fixed.
    """


class CancelIncompleteError(RunStoppedError):
    """Some tasks could not be cancelled (the provider refused or could not be reached).

    They keep their state in the journal, since they may still be running; cancelling the run
    again retries them. ``task_ids`` names them.
    """

    def __init__(self, message: str, task_ids: list[str]) -> None:
        super().__init__(message)
        self.task_ids = task_ids
