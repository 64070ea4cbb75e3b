"""``ModalSdkRuntime``: the :class:`ModalRuntime` seam implemented with the modal SDK's async API.

Every call goes through the SDK's ``.aio`` methods, so nothing blocks the event loop. The
sandbox's result *status* (TIMEOUT, TERMINATED, KERNEL_OOM_KILL, ...) is not public: the SDK
folds it into ``returncode`` (TIMEOUT → 124, TERMINATED → 137, everything else → the raw exit
code). This runtime reads the ``GenericResult`` the SDK keeps on the sandbox implementation,
which is private, so it is read defensively and pinned to the SDK versions in
:data:`VERIFIED_SDK_VERSIONS`; on any other layout it falls back to the public return code.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import socket
from collections.abc import AsyncGenerator, Iterator, Mapping
from pathlib import Path
from typing import Any

import grpclib
from altar.backends.modal.runtime import (
    ListedSandbox,
    ModalCredentialsError,
    ResultStatus,
    SandboxExistsError,
    SandboxNotFoundError,
    SandboxRequest,
    SandboxResult,
)
from altar.execution import (
    BackendUnavailableError,
    ProviderLimitError,
    UnsupportedCapabilityError,
)
from grpclib.exceptions import StreamTerminatedError
from modal_proto import api_pb2

import modal
import modal.exception as modal_errors
from modal.types import FileEntryType

__all__ = ["VERIFIED_SDK_VERSIONS", "ModalSdkRuntime", "limit_error", "result_from_proto"]

log = logging.getLogger(__name__)

VERIFIED_SDK_VERSIONS = ("1.6.",)
"""SDK release lines whose private result layout this runtime was checked against."""

# GenericResult.GenericStatus numbers (modal_proto api.proto) → our statuses.
_GENERIC_STATUS = {
    0: ResultStatus.RUNNING,  # UNSPECIFIED: no result yet
    1: ResultStatus.SUCCESS,
    2: ResultStatus.FAILURE,
    3: ResultStatus.TERMINATED,
    4: ResultStatus.TIMEOUT,
    5: ResultStatus.INIT_FAILURE,
    6: ResultStatus.INTERNAL_FAILURE,
    7: ResultStatus.IDLE_TIMEOUT,
    8: ResultStatus.MEMORY_MANAGER_EVICTION,
    9: ResultStatus.MEMORY_THRASHING_EVICTION,
    10: ResultStatus.KERNEL_OOM_KILL,
}

_UNAVAILABLE_GRPC = {
    grpclib.Status.UNAVAILABLE,
    grpclib.Status.DEADLINE_EXCEEDED,
    grpclib.Status.INTERNAL,
    grpclib.Status.UNKNOWN,
}


def result_from_proto(result: Any) -> SandboxResult:
    """Our view of a ``modal_proto.api_pb2.GenericResult`` (None or status 0: still running)."""
    if result is None or not result.status:
        return SandboxResult(ResultStatus.RUNNING)
    status = _GENERIC_STATUS.get(int(result.status), ResultStatus.UNKNOWN)
    return SandboxResult(status, exit_code=int(result.exitcode), message=str(result.exception))


def _private_result(sandbox: modal.Sandbox) -> tuple[bool, Any]:
    """``(found, GenericResult | None)`` from the SDK's private sandbox state."""
    try:
        from modal._utils.async_utils import synchronizer

        impl = synchronizer._translate_in(sandbox)  # type: ignore[no-untyped-call]
        return True, impl._impl.result
    except (ImportError, AttributeError):
        return False, None


def _exhausted(error: BaseException) -> bool:
    if isinstance(error, modal_errors.ResourceExhaustedError):
        return True
    if isinstance(error, modal_errors.Error):
        return False  # the SDK's other wrappers: their status is private (.status warns)
    return (
        isinstance(error, grpclib.GRPCError) and error.status is grpclib.Status.RESOURCE_EXHAUSTED
    )


def limit_error(error: BaseException) -> ProviderLimitError:
    """What a RESOURCE_EXHAUSTED answer means for the runner: hold submits back.

    The server's ``RPCRetryPolicy`` detail (``retry_after_secs``) is the wait it asks for; the
    SDK already slept through it until ``MODAL_MAX_THROTTLE_WAIT`` ran out, so what escapes
    carries it on as ``retry_after_s``.
    """
    # The SDK's own wrapper keeps the details in _grpc_details (.details warns); a raw
    # grpclib error has them as .details.
    details = getattr(error, "_grpc_details", None)
    if details is None and type(error) is grpclib.GRPCError:
        details = error.details
    retry_after = next(
        (
            max(float(entry.retry_after_secs), 0.1)
            for entry in details or ()
            if isinstance(entry, api_pb2.RPCRetryPolicy)
        ),
        None,
    )
    text = str(getattr(error, "_grpc_message", "") or error) or "RESOURCE_EXHAUSTED"
    if "capacity" in text.lower():
        return ProviderLimitError(
            f"Modal has no capacity for this sandbox now: {text}; retry later",
            limit="Modal capacity",
            retry_after_s=retry_after,
        )
    return ProviderLimitError(
        f"Modal refuses more requests for now (RESOURCE_EXHAUSTED: {text}); retry later",
        limit="Modal rate limit or quota (RESOURCE_EXHAUSTED)",
        retry_after_s=retry_after,
    )


@contextlib.contextmanager
def _modal_errors(sandbox_id: str | None = None) -> Iterator[None]:
    """Translate SDK errors: NOT_FOUND → SandboxNotFoundError, network/server → unavailable."""
    try:
        yield
    except modal_errors.NotFoundError as error:
        if sandbox_id is None:
            raise
        raise SandboxNotFoundError(str(error) or f"Sandbox {sandbox_id} not found") from error
    except modal_errors.AuthError as error:
        raise ModalCredentialsError(
            f"Modal refused the credentials ({error}); run `modal token new` or set "
            "MODAL_TOKEN_ID and MODAL_TOKEN_SECRET"
        ) from error
    except (modal_errors.ConnectionError, modal_errors.InternalError) as error:
        raise BackendUnavailableError(f"Modal could not be asked: {error}") from error
    except modal_errors.ResourceExhaustedError as error:
        # A rate limit or quota (gRPC RESOURCE_EXHAUSTED), or Sandbox.create finding no
        # capacity within its scheduling wait (it terminated the sandbox): a limit for now.
        raise limit_error(error) from error
    except modal_errors.TimeoutError as error:
        final = getattr(error, "final_exception", None)
        if final is None:
            raise  # a sandbox's or an exec's own timeout, not a request's
        # The SDK's retries ran out of time; throttled all along is a limit, else unreachable.
        if _exhausted(final):
            raise limit_error(final) from error
        raise BackendUnavailableError(f"Modal could not be asked in time: {error}") from error
    except modal_errors.ServiceError as error:
        raise BackendUnavailableError(f"Modal answered with a server error: {error}") from error
    except modal_errors.Error:
        raise  # a request Modal refused (InvalidError, ...): not transient, never hidden
    except grpclib.GRPCError as error:
        if error.status is grpclib.Status.RESOURCE_EXHAUSTED:
            raise limit_error(error) from error  # a path the SDK does not convert
        if error.status in _UNAVAILABLE_GRPC:
            raise BackendUnavailableError(f"Modal could not be asked: {error}") from error
        raise
    except (ConnectionError, TimeoutError, socket.gaierror, StreamTerminatedError) as error:
        # Refused or reset connections, socket timeouts, DNS; not FileNotFoundError and kin.
        raise BackendUnavailableError(f"cannot reach Modal: {error}") from error


@contextlib.contextmanager
def _refused_as_unsupported() -> Iterator[None]:
    """A sandbox request Modal refuses (``InvalidError``) → UnsupportedCapabilityError.

    The same request is refused again, so it must read as a refused spec (a ValueError, failed
    without retries), not as an error worth retrying. ``ConflictError`` (the sandbox ended
    before it was scheduled) is not a refusal of the request and passes through.
    """
    try:
        yield
    except modal_errors.ConflictError:
        raise
    except modal_errors.InvalidError as error:
        raise UnsupportedCapabilityError(
            f"Modal refused the sandbox request: {error}", capability="sandbox"
        ) from error


@contextlib.contextmanager
def _already_exists(request: SandboxRequest) -> Iterator[None]:
    """``AlreadyExistsError`` at create: a running sandbox of the app holds the name."""
    try:
        yield
    except modal_errors.AlreadyExistsError as error:
        raise SandboxExistsError(
            f"a running sandbox of app {request.app_name!r} is already named {request.name!r}"
        ) from error


class ModalSdkRuntime:
    """The real runtime. Credentials come from the SDK's usual config (``MODAL_TOKEN_ID`` …).

    Pass ``client`` to use a specific ``modal.Client`` instead of the one built from the
    environment. Apps and volumes are looked up once per runtime; images are resolved on
    every create so a re-pushed tag is picked up.
    """

    def __init__(self, *, client: modal.Client | None = None) -> None:
        self.client = client
        self._apps: dict[str, modal.App] = {}
        self._volumes: dict[str, modal.Volume] = {}
        version = getattr(modal, "__version__", "?")
        if not str(version).startswith(VERIFIED_SDK_VERSIONS):
            log.warning(
                "modal %s is not a version this runtime was verified with (%s); sandbox "
                "results fall back to return codes if the SDK's private layout changed",
                version,
                ", ".join(v + "x" for v in VERIFIED_SDK_VERSIONS),
            )

    async def _app(self, name: str) -> modal.App:
        app = self._apps.get(name)
        if app is None:
            with _modal_errors():
                app = await modal.App.lookup.aio(name, client=self.client, create_if_missing=True)
            self._apps[name] = app
        return app

    def _volume(self, name: str) -> modal.Volume:
        volume = self._volumes.get(name)
        if volume is None:
            volume = modal.Volume.from_name(name, create_if_missing=True, client=self.client)
            self._volumes[name] = volume
        return volume

    async def _sandbox(self, sandbox_id: str) -> modal.Sandbox:
        with _modal_errors(sandbox_id):
            return await modal.Sandbox.from_id.aio(sandbox_id, client=self.client)

    # -- sandboxes -------------------------------------------------------------------------

    async def create_sandbox(self, request: SandboxRequest) -> str:
        app = await self._app(request.app_name)
        volumes: dict[str | Any, Any] = {}
        if request.volume_name is not None:
            volumes[request.mount_root] = self._volume(request.volume_name)
        with _already_exists(request), _refused_as_unsupported(), _modal_errors():
            # Tags (and the name) go in with the create call: nothing after it can fail and
            # orphan the sandbox. The SDK itself terminates a sandbox that was created but
            # never scheduled, and retries the request under one idempotency key.
            sandbox = await modal.Sandbox.create.aio(
                *request.command,
                app=app,
                name=request.name,
                image=modal.Image.from_registry(request.image),
                env=dict(request.env) or None,
                tags=dict(request.tags) or None,
                timeout=request.timeout_s,
                cpu=request.cpu,
                memory=request.memory_mib,
                gpu=request.gpu,
                volumes=volumes,
                client=self.client,
            )
        return str(sandbox.object_id)

    async def sandbox_result(self, sandbox_id: str) -> SandboxResult:
        sandbox = await self._sandbox(sandbox_id)  # one zero-timeout SandboxWait
        found, result = _private_result(sandbox)
        if found:
            return result_from_proto(result)
        code = sandbox.returncode
        if code is None:
            return SandboxResult(ResultStatus.RUNNING)
        return SandboxResult(ResultStatus.SUCCESS if code == 0 else ResultStatus.FAILURE, code)

    async def list_running(
        self, app_name: str, tags: Mapping[str, str]
    ) -> AsyncGenerator[ListedSandbox, None]:
        """``Sandbox.list(app_id=…, tags=…)``: one ``SandboxList`` request per page.

        The SDK asks for running sandboxes only (``include_finished=False``) and pages with
        ``before_timestamp`` until a page comes back empty; closing this generator stops it.
        """
        app = await self._app(app_name)
        with _modal_errors():
            listing = modal.Sandbox.list.aio(
                app_id=app.app_id, tags=dict(tags) or None, client=self.client
            )
        try:
            while True:
                with _modal_errors():
                    try:
                        sandbox = await listing.__anext__()
                    except StopAsyncIteration:
                        return
                found, result = _private_result(sandbox)
                listed = result_from_proto(result) if found else SandboxResult(ResultStatus.RUNNING)
                yield ListedSandbox(str(sandbox.object_id), listed)
        finally:
            await listing.aclose()

    async def sandbox_by_name(self, app_name: str, name: str) -> str | None:
        try:
            with _modal_errors(name):
                sandbox = await modal.Sandbox.from_name.aio(app_name, name, client=self.client)
        except SandboxNotFoundError:
            return None
        return str(sandbox.object_id)

    async def sandbox_tags(self, sandbox_id: str) -> dict[str, str]:
        sandbox = await self._sandbox(sandbox_id)
        with _modal_errors(sandbox_id):
            return dict(await sandbox.get_tags.aio())

    async def terminate_sandbox(self, sandbox_id: str) -> None:
        sandbox = await self._sandbox(sandbox_id)
        with _modal_errors(sandbox_id):
            await sandbox.terminate.aio()

    async def output_tail(self, sandbox_id: str, lines: int) -> list[str]:
        sandbox = await self._sandbox(sandbox_id)
        messages: list[str] = []
        with _modal_errors(sandbox_id):
            async for entry in sandbox.logs.tail.aio(entries=lines):
                messages.extend(entry.message.splitlines())
        return messages[-lines:] if lines > 0 else []

    # -- volumes ---------------------------------------------------------------------------

    async def volume_exists(self, volume_name: str) -> bool:
        """Whether the volume exists, creating nothing (pre-flight); a missing or refused
        credential raises ModalCredentialsError."""
        volume = modal.Volume.from_name(volume_name, client=self.client)
        try:
            with _modal_errors():
                await volume.hydrate.aio()
        except modal_errors.NotFoundError:
            return False
        return True

    async def upload(self, volume_name: str, remote_path: str, source: Path | bytes) -> None:
        volume = self._volume(volume_name)
        is_dir = not isinstance(source, bytes) and await asyncio.to_thread(source.is_dir)
        with _modal_errors():
            async with volume.batch_upload.aio(force=True) as batch:
                if isinstance(source, bytes):
                    batch.put_file(io.BytesIO(source), remote_path)
                elif is_dir:
                    batch.put_directory(source, remote_path)
                else:
                    batch.put_file(source, remote_path)

    async def download(self, volume_name: str, remote_path: str, destination: Path) -> None:
        volume = self._volume(volume_name)
        handle = await asyncio.to_thread(destination.open, "wb")
        try:
            with _modal_errors():
                async for chunk in volume.read_file.aio(remote_path):
                    await asyncio.to_thread(handle.write, chunk)
        except (modal_errors.NotFoundError, FileNotFoundError) as error:
            raise FileNotFoundError(
                f"{remote_path!r} is not on Modal volume {volume_name!r}"
            ) from error
        finally:
            await asyncio.to_thread(handle.close)

    async def file_version(self, volume_name: str, remote_path: str) -> str | None:
        volume = self._volume(volume_name)
        try:
            with _modal_errors():
                entries = await volume.listdir.aio(remote_path)
        except (modal_errors.NotFoundError, FileNotFoundError):
            return None
        for entry in entries:
            if entry.path.lstrip("/") == remote_path and entry.type == FileEntryType.FILE:
                return f"size={entry.size} mtime={entry.mtime}"
        return None

    async def read_file(self, volume_name: str, remote_path: str) -> bytes | None:
        volume = self._volume(volume_name)
        chunks: list[bytes] = []
        try:
            with _modal_errors():
                async for chunk in volume.read_file.aio(remote_path):
                    chunks.append(chunk)
        except (modal_errors.NotFoundError, FileNotFoundError):
            return None
        return b"".join(chunks)

    async def remove(self, volume_name: str, remote_path: str) -> None:
        volume = self._volume(volume_name)
        try:
            with _modal_errors():
                await volume.remove_file.aio(remote_path)
        except (modal_errors.NotFoundError, FileNotFoundError):
            pass
