"""The adapters' error family: what can go wrong, as types, on top of the builtin bases.

Every class keeps the builtin base the adapter contract documents for that case, so code
written against the contract (``except RuntimeError``, ``except ValueError``,
``except TimeoutError``) keeps catching exactly what it caught before::

    Exception
    ├── AdapterError                       any failure this package reports
    │   ├── AdapterRefused                 + RuntimeError: the result said ok false
    │   │   └── RemoteUnreachable          the host, its key or the login failed (ssh exit 255)
    │   ├── AdapterCrashed                 + RuntimeError: the adapter exited non-zero
    │   ├── AdapterTimeout                 + TimeoutError: over timeout_seconds; its group killed
    │   ├── AdapterResultError             + ValueError: stdout was not one valid result document
    │   └── BundleError                    + ValueError: a bundle, name or setting cannot be used
    │       ├── UnknownRemote              no bundle of that name in either scope
    │       └── InvalidRemoteName          not one plain directory entry, or holds ':'
    └── Warning
        └── InsecureCredentialsWarning     credentials.json readable by others (not 0600)

The message of each instance is the contract's exact text (``cannot reach HOST: …``,
``unknown remote: NAME``, ``adapter OP exceeded N seconds``…); the types only add a way to
tell a refusal from a crash without parsing it. The adapter process itself (the runtime)
needs none of these: it reports refusals as ``ok: false`` documents and crashes as exit 2.
"""

from __future__ import annotations

__all__ = [
    "AdapterCrashed",
    "AdapterError",
    "AdapterRefused",
    "AdapterResultError",
    "AdapterTimeout",
    "BundleError",
    "InsecureCredentialsWarning",
    "InvalidRemoteName",
    "RemoteUnreachable",
    "UnknownRemote",
]


class AdapterError(Exception):
    """Base of every failure this package reports."""


class AdapterRefused(AdapterError, RuntimeError):
    """The adapter understood the request and will not, or cannot, carry it out.

    ``operation`` is the operation refused; the message is the adapter's ``error``.
    """

    def __init__(self, message: str, *, operation: str | None = None) -> None:
        super().__init__(message)
        self.operation = operation


class RemoteUnreachable(AdapterRefused):
    """The remote could not be reached: connection, host key or authentication failed."""


class AdapterCrashed(AdapterError, RuntimeError):
    """The adapter exited non-zero without a result: ``returncode`` and ``stderr`` tell why."""

    def __init__(self, message: str, *, operation: str, returncode: int, stderr: str) -> None:
        super().__init__(message)
        self.operation = operation
        self.returncode = returncode
        self.stderr = stderr


class AdapterTimeout(AdapterError, TimeoutError):
    """The operation overran its limit; its whole process group was killed."""

    def __init__(self, message: str, *, operation: str, seconds: float) -> None:
        super().__init__(message)
        self.operation = operation
        self.seconds = seconds


class AdapterResultError(AdapterError, ValueError):
    """The adapter's stdout was not exactly one result document for this operation."""


class BundleError(AdapterError, ValueError):
    """A bundle, a remote name or a setting cannot be used as given."""


class UnknownRemote(BundleError):
    """No bundle of that name in the project or the global scope."""


class InvalidRemoteName(BundleError):
    """A remote name must be one plain directory entry without ``:`` (it separates the queue)."""


class InsecureCredentialsWarning(UserWarning):
    """``credentials.json`` can be read by other users; it should be mode 0600."""
