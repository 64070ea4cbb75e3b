"""An in-memory Modal for tests and benchmarks: a faithful :class:`ModalRuntime`.

It behaves the way the modal SDK and Modal's control plane do, as far as the backend can see:
sandbox ids are ``sb-`` + 22 alphanumerics; an unknown id is ``NOT_FOUND``; a sandbox runs until
it exits, overruns its timeout (status TIMEOUT), is OOM-killed or evicted, or is terminated
(status TERMINATED; terminating a finished sandbox changes nothing); a request is refused where
``Sandbox.create`` or Modal's server would refuse it (a limit below its request, a timeout over
24 hours, a malformed ``TYPE:COUNT``, a name a running sandbox of the app already holds). Volume
files carry a version built from size and whole-second mtime, as the SDK runtime reports it.

**Requests.** Every seam call costs the gRPC requests the SDK runtime makes for it (checked
against the unmodified client in ``tests/test_wire.py``), each recorded in :attr:`rpcs` by its
method name and each taking ``latency_s``, one after another as the SDK awaits them:
``sandbox_result`` is one ``SandboxWait``; ``list_running`` one ``SandboxList`` per page of
``list_page_size`` (the SDK pages with ``before_timestamp`` until a page comes back empty, and
lists running sandboxes only); ``terminate_sandbox`` a ``SandboxWait`` and a
``SandboxTerminate``; ``create_sandbox`` image, secret and create requests plus a
``SandboxGetTaskId``, and the app, environment and volume look-ups the first time.
``sandbox_by_name`` is one ``SandboxGetFromName``. The names are those of V1 sandboxes
(``MODAL_SANDBOX_V2=0``, the wire tests' setting); with the SDK's default ``sandbox_v2`` the list
request is ``SandboxListV2`` (same count) and a name look-up tries the V2 lookup first, so it
costs 2 requests when the V2 lookup misses. Modal does not document its page size; 100 is this
fake's assumption.

Tests script outcomes with :meth:`FakeModalRuntime.finish`, :meth:`expire`, :meth:`oom_kill`,
:meth:`evict`, :meth:`preempt`, :meth:`lose_worker` (or :meth:`end_by_provider`, one call per
provider ending) and :meth:`write_output`; ``unreachable = True`` makes every call fail as a dead
network would; :meth:`exhaust_creates` answers the next creates with RESOURCE_EXHAUSTED (a
rate limit, quota or no capacity: ProviderLimitError, as the SDK runtime raises it);
``drop_create_answers = n`` makes the next ``n`` creates reach Modal (the sandbox is created
and runs) while the answer is lost, as when the connection drops. A create
cancelled while it waits for scheduling terminates its sandbox, as the SDK's does.
"""

from __future__ import annotations

import asyncio
import secrets
import string
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from altar.backends.modal.runtime import (
    ListedSandbox,
    ResultStatus,
    SandboxExistsError,
    SandboxNotFoundError,
    SandboxRequest,
    SandboxResult,
)
from altar.execution import BackendUnavailableError, ProviderLimitError

__all__ = ["FakeModalRuntime", "FakeSandbox", "new_sandbox_id"]

_ALPHANUMERIC = string.ascii_letters + string.digits
_MAX_TIMEOUT_S = 86400
_UNREACHABLE = "cannot reach Modal at api.modal.com:443 (connection refused); retry later"


def new_sandbox_id() -> str:
    """A V1 sandbox id as Modal mints them: ``sb-`` followed by 22 alphanumerics."""
    return "sb-" + "".join(secrets.choice(_ALPHANUMERIC) for _ in range(22))


class FakeInvalidError(ValueError):
    """What ``modal.exception.InvalidError`` would be for a request Modal refuses."""


@dataclass
class FakeSandbox:
    request: SandboxRequest
    created_at: float
    result: SandboxResult = field(default_factory=lambda: SandboxResult(ResultStatus.RUNNING))
    output: list[str] = field(default_factory=list)


@dataclass
class _VolumeFile:
    data: bytes
    mtime: int


class FakeModalRuntime:
    """Sandboxes and volumes held in memory, scripted by tests."""

    def __init__(
        self,
        *,
        latency_s: float = 0.0,
        clock: Callable[[], float] = time.time,
        list_page_size: int = 100,
    ) -> None:
        self.latency_s = latency_s
        self.clock = clock
        self.list_page_size = list_page_size
        self.unreachable = False
        self.drop_create_answers = 0
        self._exhausted: list[ProviderLimitError] = []  # answers for the next creates
        self.sandboxes: dict[str, FakeSandbox] = {}
        self.volumes: dict[str, dict[str, _VolumeFile]] = {}
        self.uploads: list[str] = []
        self.calls: list[str] = []  # seam methods, in call order
        self.rpcs: list[str] = []  # the gRPC requests the SDK would have sent, in order
        self._apps: set[str] = set()
        self._volume_ids: set[str] = set()
        self._environment = False
        self._last_created = 0.0

    async def _call(self, name: str, *rpcs: str) -> None:
        """One seam call, costing ``rpcs`` (each ``latency_s``, one after another)."""
        self.calls.append(name)
        for rpc in rpcs:
            await self._rpc(rpc)

    async def _rpc(self, rpc: str) -> None:
        if self.unreachable:
            raise BackendUnavailableError(_UNREACHABLE)
        self.rpcs.append(rpc)
        if self.latency_s:
            await asyncio.sleep(self.latency_s)

    async def _app(self, app_name: str) -> None:
        if app_name not in self._apps:
            await self._rpc("AppGetOrCreate")
            self._apps.add(app_name)

    def _sandbox(self, sandbox_id: str) -> FakeSandbox:
        try:
            sandbox = self.sandboxes[sandbox_id]
        except KeyError:
            raise SandboxNotFoundError(f"Sandbox {sandbox_id} not found") from None
        if not sandbox.result.finished and self.clock() - sandbox.created_at >= (
            sandbox.request.timeout_s
        ):
            sandbox.result = SandboxResult(ResultStatus.TIMEOUT, exit_code=0)
        return sandbox

    def _running(self, app_name: str) -> list[tuple[str, FakeSandbox]]:
        return [
            (sandbox_id, sandbox)
            for sandbox_id in list(self.sandboxes)
            if (sandbox := self._sandbox(sandbox_id)).request.app_name == app_name
            and not sandbox.result.finished
        ]

    # -- sandboxes -------------------------------------------------------------------------

    async def create_sandbox(self, request: SandboxRequest) -> str:
        self.calls.append("create_sandbox")
        await self._app(request.app_name)
        if request.env:
            await self._rpc("SecretGetOrCreate")
        if request.volume_name is not None and request.volume_name not in self._volume_ids:
            await self._rpc("VolumeGetOrCreate")
            self._volume_ids.add(request.volume_name)
        if not self._environment:
            await self._rpc("EnvironmentGetOrCreate")
            self._environment = True
        await self._rpc("ImageGetOrCreate")
        _validate(request)
        await self._rpc("SandboxCreate")
        if self._exhausted:
            raise self._exhausted.pop(0)  # refused: nothing was created
        if request.name is not None and any(
            sandbox.request.name == request.name for _, sandbox in self._running(request.app_name)
        ):
            raise SandboxExistsError(
                f"a running sandbox of app {request.app_name!r} is already named {request.name!r}"
            )
        sandbox_id = new_sandbox_id()
        # Modal orders listings by creation time; keep the fake's times distinct as a real
        # clock's are, even under a frozen test clock.
        created_at = max(self.clock(), self._last_created + 1e-6)
        self._last_created = created_at
        self.sandboxes[sandbox_id] = FakeSandbox(request=request, created_at=created_at)
        if self.drop_create_answers > 0:
            self.drop_create_answers -= 1
            raise BackendUnavailableError(
                "cannot reach Modal: connection lost while waiting for the answer"
            )
        try:
            await self._rpc("SandboxGetTaskId")
        except BaseException:
            # As the SDK does: a create that fails or is cancelled while waiting for scheduling
            # terminates its sandbox, since no caller will ever hold its id.
            if not self.unreachable:
                self.sandboxes[sandbox_id].result = SandboxResult(ResultStatus.TERMINATED, 0)
            raise
        return sandbox_id

    async def sandbox_result(self, sandbox_id: str) -> SandboxResult:
        await self._call("sandbox_result", "SandboxWait")
        return self._sandbox(sandbox_id).result

    async def list_running(
        self, app_name: str, tags: Mapping[str, str]
    ) -> AsyncGenerator[ListedSandbox, None]:
        self.calls.append("list_running")
        await self._app(app_name)
        before: float | None = None
        while True:
            await self._rpc("SandboxList")
            page = sorted(
                (
                    (sandbox.created_at, sandbox_id)
                    for sandbox_id, sandbox in self._running(app_name)
                    if all(sandbox.request.tags.get(k) == v for k, v in tags.items())
                    and (before is None or sandbox.created_at < before)
                ),
                reverse=True,
            )[: self.list_page_size]
            if not page:
                return
            for _created_at, sandbox_id in page:
                yield ListedSandbox(sandbox_id, self.sandboxes[sandbox_id].result)
            before = page[-1][0]

    async def sandbox_by_name(self, app_name: str, name: str) -> str | None:
        self.calls.append("sandbox_by_name")
        await self._rpc("SandboxGetFromName")
        for sandbox_id, sandbox in self._running(app_name):
            if sandbox.request.name == name:
                return sandbox_id
        return None

    async def sandbox_tags(self, sandbox_id: str) -> dict[str, str]:
        await self._call("sandbox_tags", "SandboxWait")
        sandbox = self._sandbox(sandbox_id)
        await self._rpc("SandboxTagsGet")
        return dict(sandbox.request.tags)

    async def terminate_sandbox(self, sandbox_id: str) -> None:
        await self._call("terminate_sandbox", "SandboxWait")
        sandbox = self._sandbox(sandbox_id)
        await self._rpc("SandboxTerminate")
        if not sandbox.result.finished:
            sandbox.result = SandboxResult(ResultStatus.TERMINATED, exit_code=0)

    async def output_tail(self, sandbox_id: str, lines: int) -> list[str]:
        await self._call("output_tail", "SandboxWait")
        sandbox = self._sandbox(sandbox_id)
        await self._rpc("SandboxGetTaskId")
        await self._rpc("AppFetchLogs")
        return list(sandbox.output[-lines:]) if lines > 0 else []

    # -- scripting -------------------------------------------------------------------------

    def _end(self, sandbox_id: str, result: SandboxResult) -> None:
        sandbox = self._sandbox(sandbox_id)
        if sandbox.result.finished:
            raise RuntimeError(f"sandbox {sandbox_id} already finished: {sandbox.result}")
        sandbox.result = result

    def finish(self, sandbox_id: str, exit_code: int) -> None:
        """The command exits: SUCCESS for 0, FAILURE otherwise."""
        status = ResultStatus.SUCCESS if exit_code == 0 else ResultStatus.FAILURE
        self._end(sandbox_id, SandboxResult(status, exit_code=exit_code))

    def expire(self, sandbox_id: str) -> None:
        """Modal stops the sandbox at its deadline."""
        self._end(sandbox_id, SandboxResult(ResultStatus.TIMEOUT, exit_code=0))

    def oom_kill(self, sandbox_id: str) -> None:
        """The kernel kills the command for exceeding its memory limit."""
        self._end(
            sandbox_id,
            SandboxResult(ResultStatus.KERNEL_OOM_KILL, exit_code=137, message="Out of memory"),
        )

    def evict(self, sandbox_id: str) -> None:
        """Modal's memory manager evicts the sandbox under host memory pressure."""
        self._end(sandbox_id, SandboxResult(ResultStatus.MEMORY_MANAGER_EVICTION, exit_code=0))

    def preempt(self, sandbox_id: str) -> None:
        """Modal preempts the worker under the sandbox (a GPU, region or cloud sandbox)."""
        self._end(
            sandbox_id,
            SandboxResult(ResultStatus.INTERNAL_FAILURE, exit_code=0, message="Worker preempted"),
        )

    def lose_worker(self, sandbox_id: str) -> None:
        """The worker running the sandbox is lost (Modal reports an internal failure)."""
        self._end(sandbox_id, SandboxResult(ResultStatus.INTERNAL_FAILURE, exit_code=0))

    def end_by_provider(self, sandbox_id: str, ending: str) -> None:
        """Cause provider ending ``ending`` (``evicted``, ``preempted``, ``node_lost``): the
        one scripting call a conformance hook needs."""
        causes = {"evicted": self.evict, "preempted": self.preempt, "node_lost": self.lose_worker}
        if ending not in causes:
            raise ValueError(f"the fake cannot cause {ending!r}; it causes {sorted(causes)}")
        causes[ending](sandbox_id)

    def exhaust_creates(
        self, times: int = 1, *, retry_after_s: float | None = None, capacity: bool = False
    ) -> None:
        """Answer the next ``times`` creates with RESOURCE_EXHAUSTED: a rate limit (with the
        server's ``retry_after_s``) or, with ``capacity``, no capacity for the sandbox."""
        for _ in range(times):
            if capacity:
                error = ProviderLimitError(
                    "Modal has no capacity for this sandbox now: Insufficient capacity to "
                    "create sandbox.; retry later",
                    limit="Modal capacity",
                    retry_after_s=retry_after_s,
                )
            else:
                error = ProviderLimitError(
                    "Modal refuses more requests for now (RESOURCE_EXHAUSTED: rate limit "
                    "exceeded); retry later",
                    limit="Modal rate limit or quota (RESOURCE_EXHAUSTED)",
                    retry_after_s=retry_after_s,
                )
            self._exhausted.append(error)

    def write_output(self, sandbox_id: str, lines: list[str]) -> None:
        self._sandbox(sandbox_id).output.extend(lines)

    def running(self) -> list[str]:
        return [i for i, s in self.sandboxes.items() if not s.result.finished]

    # -- volumes ---------------------------------------------------------------------------

    def _volume_rpcs(self, volume_name: str) -> tuple[str, ...]:
        """A volume is looked up once per runtime, on first use."""
        if volume_name in self._volume_ids:
            return ()
        self._volume_ids.add(volume_name)
        return ("VolumeGetOrCreate",)

    def _volume(self, name: str) -> dict[str, _VolumeFile]:
        return self.volumes.setdefault(name, {})

    async def upload(self, volume_name: str, remote_path: str, source: Path | bytes) -> None:
        await self._call("upload", *self._volume_rpcs(volume_name), "VolumePutFiles2")
        volume = self._volume(volume_name)
        if isinstance(source, bytes):
            files = {remote_path: source}
        else:
            files = await asyncio.to_thread(_read_tree, source, remote_path)
        for path, data in files.items():
            volume[path] = _VolumeFile(data, int(self.clock()))
            self.uploads.append(path)

    async def download(self, volume_name: str, remote_path: str, destination: Path) -> None:
        await self._call("download", *self._volume_rpcs(volume_name), "VolumeGetFile2")
        entry = self._volume(volume_name).get(remote_path)
        if entry is None:
            raise FileNotFoundError(f"{remote_path!r} is not on volume {volume_name!r}")
        await asyncio.to_thread(destination.write_bytes, entry.data)

    async def file_version(self, volume_name: str, remote_path: str) -> str | None:
        await self._call("file_version", *self._volume_rpcs(volume_name), "VolumeListFiles2")
        entry = self._volume(volume_name).get(remote_path)
        return None if entry is None else f"size={len(entry.data)} mtime={entry.mtime}"

    async def read_file(self, volume_name: str, remote_path: str) -> bytes | None:
        await self._call("read_file", *self._volume_rpcs(volume_name), "VolumeGetFile2")
        entry = self._volume(volume_name).get(remote_path)
        return None if entry is None else entry.data

    async def remove(self, volume_name: str, remote_path: str) -> None:
        await self._call("remove", *self._volume_rpcs(volume_name), "VolumeRemoveFile2")
        self._volume(volume_name).pop(remote_path, None)

    def put(self, volume_name: str, remote_path: str, data: bytes) -> None:
        """What a task writing a file to the mounted volume leaves behind."""
        self._volume(volume_name)[remote_path] = _VolumeFile(data, int(self.clock()))


def _read_tree(source: Path, remote_path: str) -> dict[str, bytes]:
    if not source.is_dir():
        return {remote_path: source.read_bytes()}
    return {
        f"{remote_path}/{path.relative_to(source).as_posix()}": path.read_bytes()
        for path in sorted(source.rglob("*"))
        if path.is_file()
    }


def _validate(request: SandboxRequest) -> None:
    if not 1 <= request.timeout_s <= _MAX_TIMEOUT_S:
        raise FakeInvalidError(f"timeout must be between 1 and {_MAX_TIMEOUT_S} seconds")
    if request.cpu is not None and request.cpu[1] < request.cpu[0]:
        raise FakeInvalidError("Cannot specify a CPU limit lower than request")
    if request.memory_mib is not None and request.memory_mib[1] < request.memory_mib[0]:
        raise FakeInvalidError("Cannot specify a memory limit lower than request")
    if request.gpu is not None:
        gpu_type, _, count = request.gpu.partition(":")
        if not gpu_type or (count and (not count.isdigit() or int(count) < 1)):
            raise FakeInvalidError(f"Invalid GPU config: {request.gpu!r}")
