"""The runtime seam between the backend and Modal: plain values in, plain values out.

:class:`ModalRuntime` is what :class:`~altar.backends.modal.ModalExecutionBackend` needs from
Modal. :class:`~altar.backends.modal.sdk_runtime.ModalSdkRuntime` implements it with the modal SDK;
:class:`~altar.backends.modal.fake.FakeModalRuntime` implements it in memory for tests. No
Modal type crosses this seam, so the backend never imports the SDK.

Errors a runtime raises:

- :class:`SandboxNotFoundError` (a ``LookupError``) for a sandbox id Modal does not know;
- :class:`~altar.execution.BackendUnavailableError` when Modal could not be asked (network,
  server errors, no capacity). It is transient and never means "missing".
- :class:`ModalCredentialsError` when Modal refuses the credentials (missing, invalid or
  revoked token): not transient, the user has to act.
- :class:`SandboxExistsError` when a sandbox name is already held by a running sandbox of the app.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from altar.execution import AltarError

__all__ = [
    "ListedSandbox",
    "ModalCredentialsError",
    "ModalRuntime",
    "ResultStatus",
    "SandboxExistsError",
    "SandboxNotFoundError",
    "SandboxRequest",
    "SandboxResult",
]


class ModalCredentialsError(AltarError, ValueError):
    """Modal refused the credentials. Not transient, unlike BackendUnavailableError.

    A ValueError, so a submit that meets it is refused rather than retried, and an AltarError,
    so ``altar`` reports it in one line.
    """


class SandboxNotFoundError(LookupError):
    """Modal does not know this sandbox id (gRPC ``NOT_FOUND``)."""


class SandboxExistsError(Exception):
    """A running sandbox of the app already holds the requested name (``AlreadyExistsError``)."""


class ResultStatus(enum.Enum):
    """Where a sandbox is, after Modal's ``GenericResult.GenericStatus`` (plus two live states).

    ``PENDING`` is reported only by runtimes that can see a sandbox before it is scheduled;
    the SDK's ``Sandbox.create`` returns once it is, so the SDK runtime never reports it.
    """

    PENDING = "pending"
    RUNNING = "running"
    SUCCESS = "success"
    FAILURE = "failure"
    TERMINATED = "terminated"
    TIMEOUT = "timeout"
    INIT_FAILURE = "init_failure"
    INTERNAL_FAILURE = "internal_failure"
    IDLE_TIMEOUT = "idle_timeout"
    MEMORY_MANAGER_EVICTION = "memory_manager_eviction"
    MEMORY_THRASHING_EVICTION = "memory_thrashing_eviction"
    KERNEL_OOM_KILL = "kernel_oom_kill"
    UNKNOWN = "unknown"  # a status this version of the backend does not know


@dataclass(frozen=True)
class SandboxResult:
    """A sandbox's state: its status, exit code once it has one, and Modal's message."""

    status: ResultStatus
    exit_code: int | None = None
    message: str = ""

    @property
    def finished(self) -> bool:
        return self.status not in (ResultStatus.PENDING, ResultStatus.RUNNING)


@dataclass(frozen=True)
class SandboxRequest:
    """Everything one ``Sandbox.create`` call needs, already mapped to Modal's units.

    ``cpu`` is a ``(request, limit)`` pair of cores and ``memory_mib`` a ``(request, limit)``
    pair of MiB; ``gpu`` is ``"TYPE:COUNT"``; ``timeout_s`` is always set (Modal has no
    unlimited lifetime). ``tags`` are set atomically with the sandbox. ``volume_name`` is
    mounted at ``mount_root`` when set. ``name``, when set, is unique among the app's running
    sandboxes: Modal refuses a second one (:class:`SandboxExistsError`).
    """

    app_name: str
    image: str
    command: tuple[str, ...]
    timeout_s: int
    env: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    cpu: tuple[float, float] | None = None
    memory_mib: tuple[int, int] | None = None
    gpu: str | None = None
    volume_name: str | None = None
    mount_root: str = "/mnt/volume"
    name: str | None = None


@dataclass(frozen=True)
class ListedSandbox:
    """One entry of a listing: the sandbox id and its result as the listing reported it."""

    sandbox_id: str
    result: SandboxResult


@runtime_checkable
class ModalRuntime(Protocol):
    """What the Modal backend needs from Modal. Every method is a coroutine.

    Volume paths are relative to the volume root (no leading ``/``).
    """

    async def create_sandbox(self, request: SandboxRequest) -> str:
        """Create a sandbox and return its id. A failure must not leave it running."""
        ...

    async def sandbox_result(self, sandbox_id: str) -> SandboxResult:
        """The sandbox's current state, without waiting for it to finish."""
        ...

    def list_running(
        self, app_name: str, tags: Mapping[str, str]
    ) -> AsyncGenerator[ListedSandbox, None]:
        """The app's running sandboxes that carry at least ``tags``, newest first.

        Fetched one page (one request) at a time as the caller iterates; the caller stops
        paging by closing the generator. Finished sandboxes are never listed.
        """
        ...

    async def sandbox_by_name(self, app_name: str, name: str) -> str | None:
        """The id of the app's running sandbox with this name, or None if none runs."""
        ...

    async def sandbox_tags(self, sandbox_id: str) -> dict[str, str]:
        """The sandbox's tags. Raises SandboxNotFoundError if unknown."""
        ...

    async def terminate_sandbox(self, sandbox_id: str) -> None:
        """Stop a sandbox; a no-op for a finished one. Raises SandboxNotFoundError if unknown."""
        ...

    async def output_tail(self, sandbox_id: str, lines: int) -> list[str]:
        """The last ``lines`` lines the sandbox's command printed (stdout and stderr)."""
        ...

    async def upload(self, volume_name: str, remote_path: str, source: Path | bytes) -> None:
        """Write a local file, a local directory (recursively) or bytes to the volume."""
        ...

    async def download(self, volume_name: str, remote_path: str, destination: Path) -> None:
        """Write a volume file's bytes to ``destination`` (which the caller then renames)."""
        ...

    async def file_version(self, volume_name: str, remote_path: str) -> str | None:
        """A string that changes whenever the file is rewritten; None if missing or unknown."""
        ...

    async def read_file(self, volume_name: str, remote_path: str) -> bytes | None:
        """A small volume file's bytes, or None if it does not exist."""
        ...

    async def remove(self, volume_name: str, remote_path: str) -> None:
        """Delete a volume file; a missing file is fine."""
        ...
