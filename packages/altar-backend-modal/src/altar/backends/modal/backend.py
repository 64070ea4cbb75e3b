"""``ModalExecutionBackend``: container tasks as Modal Sandboxes, inputs staged on a Volume."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import ClassVar, TypeVar

from altar.backends.modal.classify import status_from_result
from altar.backends.modal.render import (
    DEFAULT_POOL_ACCELERATORS,
    check_accelerators,
    sandbox_request,
    volume_path,
)
from altar.backends.modal.runtime import (
    ModalCredentialsError,
    ModalRuntime,
    SandboxExistsError,
    SandboxNotFoundError,
    SandboxResult,
)
from altar.backends.modal.staging import (
    local_path,
    record_matches,
    staging_record_line,
    staging_record_path,
)
from altar.execution import (
    CONTAINER_MOUNT_ROOT,
    LABEL_RUN,
    BackendImportError,
    BackendUnavailableError,
    ContainerTaskSpec,
    DigestVerification,
    ExecutionBackend,
    PathResolver,
    TaskFailure,
    TaskHandle,
    TaskState,
    TaskStatus,
    Transfer,
    TransferIntegrityError,
    gather_bounded,
    mint_handle,
    temp_path,
    verify_output_digest,
    verify_transfer_digest,
)
from altar.execution.atomic import fsync_directory
from altar.execution.digests.digest import input_label, require_digest_file

__all__ = ["DEFAULT_APP_NAME", "DEFAULT_VOLUME_NAME", "ModalExecutionBackend"]

log = logging.getLogger(__name__)

MODAL_APP_ENV = "ALTAR_MODAL_APP"
MODAL_VOLUME_ENV = "ALTAR_MODAL_VOLUME"
DEFAULT_APP_NAME = "altar-exec"
DEFAULT_VOLUME_NAME = "altar-data"
LOG_TAIL_LINES = 20

T = TypeVar("T")
R = TypeVar("R")


class ModalExecutionBackend(ExecutionBackend):
    """Runs each task as one Modal Sandbox; inputs and outputs live on one Modal Volume.

    Options (keyword-only):

    - ``app_name``: the Modal App sandboxes belong to (``$ALTAR_MODAL_APP``, else
      ``"altar-exec"``); created if missing.
    - ``volume_name``: the Volume mounted at ``/mnt/volume`` in every sandbox
      (``$ALTAR_MODAL_VOLUME``, else ``"altar-data"``); created if missing.
    - ``pool_accelerators``: Altar GPU pool → Modal GPU type (default ``{"gpu": "A10G"}``).
      A spec naming a pool that is not mapped is refused, never run on another device.
    - ``trust_verification_records``: skip re-uploading an input whose ``.sha256-staged``
      record matches its digest and current version (default True).
    - ``max_concurrency``: Modal calls in flight at once for poll, cancel and cleanup.
    - ``runtime``: a :class:`~altar.backends.modal.runtime.ModalRuntime`; default: the modal SDK.
    """

    name: ClassVar[str] = "modal"
    input_digest_verification: ClassVar[DigestVerification | None] = "staging"
    # Not True: a sandbox that already finished cannot be found by its key (Modal lists and
    # names running sandboxes only), so a resubmit after it would run the task again.
    adopts_submissions: ClassVar[bool] = False
    #: Imported on first use only; the registry checks they are installed (``altar backends``).
    requires: ClassVar[tuple[str, ...]] = ("modal",)
    LIST_FROM: ClassVar[int] = 8
    """A poll of at least this many sandboxes starts with one listing of the running ones."""

    def __init__(
        self,
        *,
        app_name: str | None = None,
        volume_name: str | None = None,
        pool_accelerators: Mapping[str, str] | None = None,
        trust_verification_records: bool = True,
        max_concurrency: int = 32,
        runtime: ModalRuntime | None = None,
    ) -> None:
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be at least 1, got {max_concurrency}")
        accelerators = dict(
            DEFAULT_POOL_ACCELERATORS if pool_accelerators is None else pool_accelerators
        )
        check_accelerators(accelerators)
        self.app_name = app_name or os.environ.get(MODAL_APP_ENV) or DEFAULT_APP_NAME
        self.volume_name = volume_name or os.environ.get(MODAL_VOLUME_ENV) or DEFAULT_VOLUME_NAME
        self.pool_accelerators = accelerators
        self.trust_verification_records = trust_verification_records
        self.max_concurrency = max_concurrency
        if runtime is None:
            runtime = _sdk_runtime()
        self.runtime = runtime

    def path_resolver(self) -> PathResolver:
        return PathResolver(CONTAINER_MOUNT_ROOT)

    async def _bounded(self, items: Iterable[T], call: Callable[[T], Awaitable[R]]) -> list[R]:
        """``call`` on every item, ``max_concurrency`` at once (altar-core's one error rule)."""
        return await gather_bounded((call(item) for item in items), self.max_concurrency)

    # -- tasks -----------------------------------------------------------------------------

    async def submit(self, spec: ContainerTaskSpec) -> TaskHandle:
        """Create one sandbox, or adopt the running one created earlier for the same key.

        A spec carrying an ``altar.submission`` key names its sandbox after it. If a sandbox of
        the app with that name is running (a resubmit after an in-doubt submit), its handle is
        returned and nothing is created or removed. Modal keeps names unique among running
        sandboxes, so a create racing another one for the same key fails and is answered with
        the sandbox that won. A finished sandbox cannot be found by name (see the docs).
        """
        request = sandbox_request(
            spec,
            app_name=self.app_name,
            volume_name=self.volume_name,
            accelerators=self.pool_accelerators,
        )
        if request.name is not None:
            running = await self.runtime.sandbox_by_name(self.app_name, request.name)
            if running is not None:
                log.info("adopting modal sandbox %s (%s)", running, request.name)
                return mint_handle(self.name, spec, running)
        outputs = [volume_path(t.logical_path) for t in spec.outputs]
        # A stale output from an earlier run must not be collected as this run's.
        await self._bounded(outputs, lambda path: self.runtime.remove(self.volume_name, path))
        # Tags and name go in with the create call, so no later step can fail and orphan it.
        try:
            sandbox_id = await self.runtime.create_sandbox(request)
        except SandboxExistsError as exists:  # only a named create collides
            running = await self.runtime.sandbox_by_name(self.app_name, str(request.name))
            if running is None:
                raise BackendUnavailableError(
                    f"modal sandbox {request.name} was running a moment ago and has finished; "
                    "its id cannot be read back, retry the submit"
                ) from exists
            sandbox_id = running
        return mint_handle(self.name, spec, sandbox_id)

    async def check_spec(self, spec: ContainerTaskSpec) -> None:
        """Refuse what :meth:`submit` would, with no Modal call: the ``Sandbox.create``
        request is mapped (GPU pools without an accelerator, resources Modal cannot give)
        and the outputs' volume paths are checked."""
        sandbox_request(
            spec,
            app_name=self.app_name,
            volume_name=self.volume_name,
            accelerators=self.pool_accelerators,
        )
        for transfer in spec.outputs:
            volume_path(transfer.logical_path)

    async def check_backend(self) -> list[tuple[str, str]]:
        """Read-only pre-flight: the credentials are there and Modal accepts them, and the
        volume exists (one lookup that creates nothing; a run would create it empty).

        Uses the runtime's optional ``volume_exists`` (the SDK runtime has it)."""
        exists = getattr(self.runtime, "volume_exists", None)
        if exists is None:
            return []
        try:
            found = await exists(self.volume_name)
        except ModalCredentialsError as error:
            return [("", str(error))]
        except BackendUnavailableError as error:
            return [("volume_name", f"not checked, Modal did not answer: {error}")]
        if found:
            return []
        name = self.volume_name
        return [
            (
                "volume_name",
                f"Modal volume {name!r} does not exist (a run would create it empty); create "
                f"it (modal volume create {name}) or set volume_name to the one with your data",
            )
        ]

    async def list_submissions(self, run: str) -> list[TaskHandle] | None:
        """A handle (with the sandbox's tags as labels) per running sandbox of ``run``.

        Finished sandboxes are not listed: ``Sandbox.list`` reports running ones only.
        """
        ids: list[str] = []
        listing = self.runtime.list_running(self.app_name, {LABEL_RUN: run})
        async with contextlib.aclosing(listing):
            async for entry in listing:
                ids.append(entry.sandbox_id)
        tags = await self._bounded(ids, self._tags_or_none)
        return [
            TaskHandle(self.name, sandbox_id, labels)
            for sandbox_id, labels in zip(ids, tags, strict=True)
            if labels is not None and labels.get(LABEL_RUN) == run
        ]

    async def _tags_or_none(self, sandbox_id: str) -> dict[str, str] | None:
        try:
            return await self.runtime.sandbox_tags(sandbox_id)
        except SandboxNotFoundError:
            return None

    async def poll(self, handles: list[TaskHandle]) -> list[TaskStatus]:
        """One listing of the app's running sandboxes, then one wait per sandbox it missed.

        ``Sandbox.list`` reports running sandboxes only, a page per request, so a poll of many
        running tasks costs a request or two; a sandbox the listing does not show (finished,
        or of another app) is asked about by id, ``max_concurrency`` at a time. Below
        ``LIST_FROM`` distinct sandboxes the listing is skipped: asking by id is as cheap.
        """
        ids = list(dict.fromkeys(handle.external_id for handle in handles))
        results: dict[str, SandboxResult | None] = {}
        if len(ids) >= self.LIST_FROM:
            results.update(await self._listed(set(ids), _shared_run_tag(handles)))
        rest = [sandbox_id for sandbox_id in ids if sandbox_id not in results]
        results.update(zip(rest, await self._bounded(rest, self._result_by_id), strict=True))
        return [_status(handle, results[handle.external_id]) for handle in handles]

    async def _listed(
        self, wanted: set[str], tags: Mapping[str, str]
    ) -> dict[str, SandboxResult | None]:
        """Results of the ``wanted`` sandboxes the listing shows; stops paging once all are seen."""
        seen: dict[str, SandboxResult | None] = {}
        async with contextlib.aclosing(self.runtime.list_running(self.app_name, tags)) as listing:
            async for entry in listing:
                if entry.sandbox_id in wanted:
                    seen[entry.sandbox_id] = entry.result
                    if len(seen) == len(wanted):
                        break
        return seen

    async def _result_by_id(self, sandbox_id: str) -> SandboxResult | None:
        """The sandbox's result, or None when Modal does not know the id."""
        try:
            return await self.runtime.sandbox_result(sandbox_id)
        except SandboxNotFoundError:
            return None

    async def cancel(self, handle: TaskHandle) -> None:
        await self._terminate_quietly(handle.external_id)

    async def cleanup(self, handles: list[TaskHandle]) -> None:
        """Terminate every sandbox still running for these handles (a running one costs money)."""
        await self._bounded(handles, lambda handle: self._terminate_quietly(handle.external_id))

    async def _terminate_quietly(self, sandbox_id: str) -> None:
        with contextlib.suppress(SandboxNotFoundError):
            await self.runtime.terminate_sandbox(sandbox_id)

    async def failure_detail(self, handle: TaskHandle) -> str | None:
        try:
            lines = await self.runtime.output_tail(handle.external_id, LOG_TAIL_LINES)
        except SandboxNotFoundError:
            return None
        except BackendUnavailableError as error:
            log.warning("cannot read the output of modal sandbox %s: %s", handle.external_id, error)
            return None
        return "\n".join(lines) if lines else None

    # -- staging ---------------------------------------------------------------------------

    async def stage_inputs(self, transfers: list[Transfer]) -> None:
        """Upload inputs to the volume, hashing each digest-bearing one on this host first.

        Raises TransferIntegrityError before anything of that input is uploaded when its bytes
        do not match. Inputs are staged one after another so a failure stops the rest.
        """
        for transfer in transfers:
            await self._stage_one(transfer)

    async def _stage_one(self, transfer: Transfer) -> None:
        remote = volume_path(transfer.logical_path)
        digest = transfer.digest
        if (
            digest is not None
            and self.trust_verification_records
            and await self._is_staged(remote, digest)
        ):
            return
        source = local_path(transfer.uri)
        if digest is not None:
            require_digest_file(transfer, source)
            before = await asyncio.to_thread(os.stat, source)
            await asyncio.to_thread(verify_transfer_digest, transfer, source)
        elif not source.exists():
            raise FileNotFoundError(f"{input_label(transfer)} does not exist on this machine")
        await self.runtime.upload(self.volume_name, remote, source)
        if digest is None:
            return
        after = await asyncio.to_thread(os.stat, source)
        if (before.st_size, before.st_mtime_ns, before.st_ino) != (
            after.st_size,
            after.st_mtime_ns,
            after.st_ino,
        ):
            await self.runtime.remove(self.volume_name, remote)
            raise TransferIntegrityError(
                f"{input_label(transfer)} changed while it was uploaded; the uploaded copy was "
                "removed, stage it again once it is stable"
            )
        version = await self.runtime.file_version(self.volume_name, remote)
        if version is not None:
            record = staging_record_line(digest, version) + "\n"
            await self.runtime.upload(
                self.volume_name, staging_record_path(remote), record.encode("ascii")
            )

    async def _is_staged(self, remote: str, digest: str) -> bool:
        version = await self.runtime.file_version(self.volume_name, remote)
        if version is None:
            return False
        raw = await self.runtime.read_file(self.volume_name, staging_record_path(remote))
        return record_matches(raw, digest, version)

    async def collect_outputs(self, transfers: list[Transfer]) -> None:
        """Download each output beside its destination, then rename it into place.

        An output that declares a digest is hashed before the rename: a mismatch raises
        TransferIntegrityError and leaves the destination as it was.
        """
        for transfer in transfers:
            destination = local_path(transfer.uri)
            destination.parent.mkdir(parents=True, exist_ok=True)
            tmp = temp_path(destination)  # the one name a resumed run knows to clean up
            try:
                await self.runtime.download(
                    self.volume_name, volume_path(transfer.logical_path), tmp
                )
                await asyncio.to_thread(verify_output_digest, transfer, tmp)
                await asyncio.to_thread(_settle, tmp, destination)
            finally:
                tmp.unlink(missing_ok=True)


def _shared_run_tag(handles: list[TaskHandle]) -> dict[str, str]:
    """``{"altar.run": run}`` when every handle belongs to one run (a narrower listing)."""
    runs = {handle.labels.get(LABEL_RUN) for handle in handles}
    if len(runs) == 1 and (run := runs.pop()) is not None:
        return {LABEL_RUN: run}
    return {}


def _status(handle: TaskHandle, result: SandboxResult | None) -> TaskStatus:
    if result is None:
        failure = TaskFailure("container_missing", f"modal sandbox {handle.external_id} not found")
        return TaskStatus(handle, TaskState.FAILED, failure)
    return status_from_result(handle, result)


def _settle(tmp: Path, destination: Path) -> None:
    """Make a downloaded file durable under its final name (fsync, rename, fsync the folder)."""
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, destination)
    fsync_directory(destination.parent)


def _sdk_runtime() -> ModalRuntime:
    """The real runtime; the modal SDK is imported here, not when this package is."""
    try:
        from altar.backends.modal.sdk_runtime import ModalSdkRuntime
    except ImportError as error:
        raise BackendImportError(
            f"backend 'modal' needs the modal SDK, which cannot be imported ({error}); "
            "pip install altar-backend-modal"
        ) from error
    return ModalSdkRuntime()
