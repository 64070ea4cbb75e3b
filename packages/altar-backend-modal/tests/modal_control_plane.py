"""A fake Modal control plane: a grpclib server on 127.0.0.1 for the unmodified modal client.

It implements the RPCs a V1 sandbox's life needs (``MODAL_SANDBOX_V2=0``): hello and auth,
environment, app, image, volume and secret get-or-create, ``SandboxCreate`` (the command runs
as a local process; the image is not pulled), ``SandboxGetTaskId`` (optionally delayed, as a
sandbox waiting for a worker), ``SandboxWait`` (honours the request's timeout; ``NOT_FOUND`` for
an unknown id), ``SandboxTerminate``, ``SandboxTagsGet`` and ``AppFetchLogs``. With
``servicer.tokens`` set, any other credentials are answered ``UNAUTHENTICATED``; a volume
lookup that may not create (``from_name`` without ``create_if_missing``) of a missing volume
is ``NOT_FOUND``. A reaper turns an exit into SUCCESS/FAILURE with its exit code and a
sandbox past ``timeout_secs`` into TIMEOUT.

Volumes are VolumeFS v2: ``VolumePutFiles2`` asks for missing blocks, which the client PUTs to
a small HTTP block server (checked against their sha256), ``VolumeGetFile2`` hands out block
URLs, ``VolumeListFiles2`` and ``VolumeRemoveFile2``. Every other RPC answers
``UNIMPLEMENTED``, so a client that starts needing one fails loudly rather than hanging.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import secrets
import string
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from grpclib import GRPCError, Status
from grpclib.events import RecvRequest, listen
from grpclib.server import Server
from modal._utils.grpc_utils import custom_detail_codec
from modal_proto import api_grpc, api_pb2

_ALPHANUMERIC = string.ascii_letters + string.digits
_STATUS = api_pb2.GenericResult
BLOCK_SIZE = 8 * 1024 * 1024  # Modal's volume block size


def _id(prefix: str) -> str:
    return f"{prefix}-" + "".join(secrets.choice(_ALPHANUMERIC) for _ in range(22))


def _jwt() -> str:
    def part(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part({'exp': int(time.time()) + 3600})}."


@dataclass
class FakeSandbox:
    sandbox_id: str
    app_id: str
    definition: api_pb2.Sandbox
    tags: dict[str, str]
    started: float
    created_at: float = 0.0  # wall-clock creation time, what listings order and page by
    process: asyncio.subprocess.Process | None = None
    result: api_pb2.GenericResult | None = None
    task_id: str = field(default_factory=lambda: _id("ta"))
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    output: list[tuple[float, int, str]] = field(default_factory=list)  # (time, fd, line)
    tasks: list[asyncio.Future[None]] = field(default_factory=list)


@dataclass
class VolumeFile:
    size: int
    mtime: int
    blocks: list[str]  # sha256 hex of each BLOCK_SIZE block


def _unimplemented(name: str) -> Any:
    async def handler(self: Any, stream: Any) -> None:
        raise GRPCError(
            Status.UNIMPLEMENTED, f"{name} is not implemented by the fake control plane"
        )

    return handler


class FakeModalServicer(api_grpc.ModalClientBase):  # type: ignore[misc]
    def __init__(self) -> None:
        self.sandboxes: dict[str, FakeSandbox] = {}
        self.requests: list[tuple[str, Any]] = []
        self.rpcs: list[str] = []  # every RPC received, in order (method names)
        self.apps: dict[str, str] = {}
        self.unavailable = False  # answer sandbox RPCs with UNAVAILABLE, as a failing gateway
        self.schedule_delay_s = 0.0  # how long a new sandbox waits for a worker (no task id)
        self.refuse_create: str | None = None  # answer SandboxCreate with INVALID_ARGUMENT
        # answer the next SandboxCreates with RESOURCE_EXHAUSTED: (message, retry_after_secs)
        self.exhaust_create: list[tuple[str, float | None]] = []
        self.list_page_size = 100  # SandboxList entries per page (Modal does not document it)
        self.create_answer_delay_s = 0.0  # create the sandbox, then wait before answering
        self._last_created = 0.0
        self.volume_ids: dict[str, str] = {}
        self.volumes: dict[str, dict[str, VolumeFile]] = {}
        self.blocks: dict[str, bytes] = {}  # sha256 hex -> bytes, served over HTTP
        self.blob_url = ""  # set by ControlPlane once the block server listens
        #: The one (token id, secret) accepted; None accepts any. Others are answered
        #: UNAUTHENTICATED, as Modal answers a revoked or mistyped token.
        self.tokens: tuple[str, str] | None = None

    def _record(self, name: str, request: Any) -> None:
        self.requests.append((name, request))

    async def ClientHello(self, stream: Any) -> None:
        await stream.recv_message()
        await stream.send_message(api_pb2.ClientHelloResponse())

    async def AuthTokenGet(self, stream: Any) -> None:
        await stream.recv_message()
        await stream.send_message(api_pb2.AuthTokenGetResponse(token=_jwt()))

    async def EnvironmentGetOrCreate(self, stream: Any) -> None:
        await stream.recv_message()
        settings = api_pb2.EnvironmentSettings(image_builder_version="2025.06")
        metadata = api_pb2.EnvironmentMetadata(name="main", settings=settings)
        await stream.send_message(
            api_pb2.EnvironmentGetOrCreateResponse(environment_id=_id("en"), metadata=metadata)
        )

    async def AppGetOrCreate(self, stream: Any) -> None:
        request = await stream.recv_message()
        self._record("AppGetOrCreate", request)
        app_id = self.apps.setdefault(request.app_name, _id("ap"))
        await stream.send_message(api_pb2.AppGetOrCreateResponse(app_id=app_id))

    async def ImageGetOrCreate(self, stream: Any) -> None:
        request = await stream.recv_message()
        self._record("ImageGetOrCreate", request)
        result = api_pb2.GenericResult(status=_STATUS.GENERIC_STATUS_SUCCESS)
        await stream.send_message(
            api_pb2.ImageGetOrCreateResponse(image_id=_id("im"), result=result)
        )

    async def VolumeGetOrCreate(self, stream: Any) -> None:
        request = await stream.recv_message()
        self._record("VolumeGetOrCreate", request)
        if (
            request.object_creation_type == api_pb2.OBJECT_CREATION_TYPE_UNSPECIFIED
            and request.deployment_name not in self.volume_ids
        ):  # a lookup (from_name without create_if_missing) creates nothing
            raise GRPCError(
                Status.NOT_FOUND, f"Volume '{request.deployment_name}' not found in environment"
            )
        volume_id = self.volume_ids.setdefault(request.deployment_name, _id("vo"))
        self.volumes.setdefault(volume_id, {})
        version = api_pb2.VOLUME_FS_VERSION_V2
        metadata = api_pb2.VolumeMetadata(name=request.deployment_name, version=version)
        await stream.send_message(
            api_pb2.VolumeGetOrCreateResponse(
                volume_id=volume_id, version=version, metadata=metadata
            )
        )

    def _volume(self, volume_id: str) -> dict[str, VolumeFile]:
        if volume_id not in self.volumes:
            raise GRPCError(Status.NOT_FOUND, f"Volume {volume_id} not found")
        return self.volumes[volume_id]

    async def VolumePutFiles2(self, stream: Any) -> None:
        """Commit files whose blocks the server has; otherwise ask for the missing blocks."""
        request = await stream.recv_message()
        self._record("VolumePutFiles2", request)
        volume = self._volume(request.volume_id)
        missing = [
            api_pb2.VolumePutFiles2Response.MissingBlock(
                file_index=f,
                block_index=b,
                put_url=f"{self.blob_url}/block/{block.contents_sha256.hex()}",
            )
            for f, file in enumerate(request.files)
            for b, block in enumerate(file.blocks)
            if block.contents_sha256.hex() not in self.blocks
        ]
        if not missing:
            for file in request.files:
                path = file.path.lstrip("/")
                if request.disallow_overwrite_existing_files and path in volume:
                    raise GRPCError(Status.ALREADY_EXISTS, f"{path} already exists")
                hexes = [block.contents_sha256.hex() for block in file.blocks]
                volume[path] = VolumeFile(file.size, int(time.time()), hexes)
        await stream.send_message(api_pb2.VolumePutFiles2Response(missing_blocks=missing))

    def _file(self, volume_id: str, path: str) -> VolumeFile:
        file = self._volume(volume_id).get(path.lstrip("/"))
        if file is None:
            raise GRPCError(Status.NOT_FOUND, f"No such file: {path}")
        return file

    async def VolumeGetFile2(self, stream: Any) -> None:
        request = await stream.recv_message()
        self._record("VolumeGetFile2", request)
        file = self._file(request.volume_id, request.path)
        urls = [f"{self.blob_url}/block/{digest}" for digest in file.blocks]
        await stream.send_message(
            api_pb2.VolumeGetFile2Response(get_urls=urls, size=file.size, start=0, len=file.size)
        )

    async def VolumeListFiles2(self, stream: Any) -> None:
        request = await stream.recv_message()
        self._record("VolumeListFiles2", request)
        volume = self._volume(request.volume_id)
        path = request.path.strip("/")
        if path in volume:
            names = [path]
        else:
            prefix = f"{path}/" if path else ""
            names = sorted(
                name
                for name in volume
                if name.startswith(prefix) and (request.recursive or "/" not in name[len(prefix) :])
            )
            if not names:
                raise GRPCError(Status.NOT_FOUND, f"No such file or directory: {request.path}")
        entries = [
            api_pb2.FileEntry(
                path=name,
                type=api_pb2.FileEntry.FileType.FILE,
                mtime=volume[name].mtime,
                size=volume[name].size,
            )
            for name in names
        ]
        await stream.send_message(api_pb2.VolumeListFiles2Response(entries=entries))

    async def VolumeRemoveFile2(self, stream: Any) -> None:
        request = await stream.recv_message()
        self._record("VolumeRemoveFile2", request)
        self._file(request.volume_id, request.path)
        del self._volume(request.volume_id)[request.path.lstrip("/")]
        from google.protobuf import empty_pb2

        await stream.send_message(empty_pb2.Empty())

    def volume_file(self, volume_name: str, path: str) -> bytes | None:
        """The bytes of a file on a named volume, as a task would read them."""
        file = self.volumes.get(self.volume_ids.get(volume_name, ""), {}).get(path)
        if file is None:
            return None
        return b"".join(self.blocks[digest] for digest in file.blocks)[: file.size]

    def put_volume_file(self, volume_name: str, path: str, data: bytes) -> None:
        """What a task writing to its mounted volume leaves behind."""
        volume_id = self.volume_ids.setdefault(volume_name, _id("vo"))
        digests = []
        for start in range(0, max(len(data), 1), BLOCK_SIZE):
            block = data[start : start + BLOCK_SIZE]
            digest = hashlib.sha256(block).hexdigest()
            self.blocks[digest] = block
            digests.append(digest)
        self.volumes.setdefault(volume_id, {})[path] = VolumeFile(
            len(data), int(time.time()), digests
        )

    async def SecretGetOrCreate(self, stream: Any) -> None:
        request = await stream.recv_message()
        self._record("SecretGetOrCreate", request)
        await stream.send_message(api_pb2.SecretGetOrCreateResponse(secret_id=_id("st")))

    async def SandboxCreate(self, stream: Any) -> None:
        request = await stream.recv_message()
        self._record("SandboxCreate", request)
        if self.refuse_create is not None:
            raise GRPCError(Status.INVALID_ARGUMENT, self.refuse_create)
        if self.exhaust_create:
            message, retry_after = self.exhaust_create.pop(0)
            # A server-side limit; with a retry policy the SDK sleeps and tries again itself.
            details = (
                None
                if retry_after is None
                else [api_pb2.RPCRetryPolicy(retry_after_secs=retry_after)]
            )
            raise GRPCError(Status.RESOURCE_EXHAUSTED, message, details)
        name = request.definition.name
        if name and any(
            other.app_id == request.app_id
            and other.definition.name == name
            and other.result is None
            for other in self.sandboxes.values()
        ):
            raise GRPCError(Status.ALREADY_EXISTS, f"Sandbox with name '{name}' already exists")
        self._last_created = max(time.time(), self._last_created + 1e-6)
        sandbox = FakeSandbox(
            sandbox_id=_id("sb"),
            app_id=request.app_id,
            definition=request.definition,
            tags={tag.tag_name: tag.tag_value for tag in request.tags},
            started=time.monotonic(),
            created_at=self._last_created,
        )
        args = list(request.definition.entrypoint_args)
        sandbox.process = await asyncio.create_subprocess_exec(
            *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        self.sandboxes[sandbox.sandbox_id] = sandbox
        out, err = sandbox.process.stdout, sandbox.process.stderr
        sandbox.tasks = [
            asyncio.ensure_future(self._collect(sandbox, out, api_pb2.FILE_DESCRIPTOR_STDOUT)),
            asyncio.ensure_future(self._collect(sandbox, err, api_pb2.FILE_DESCRIPTOR_STDERR)),
        ]
        sandbox.tasks.append(asyncio.ensure_future(self._reap(sandbox, sandbox.tasks[:])))
        metadata = api_pb2.SandboxHandleMetadata(app_id=request.app_id)
        if self.create_answer_delay_s:
            await asyncio.sleep(self.create_answer_delay_s)  # the sandbox already runs
        await stream.send_message(
            api_pb2.SandboxCreateResponse(sandbox_id=sandbox.sandbox_id, metadata=metadata)
        )

    async def SandboxList(self, stream: Any) -> None:
        """Newest first, ``list_page_size`` a page, created before ``before_timestamp``."""
        request = await stream.recv_message()
        self._record("SandboxList", request)
        if self.unavailable:
            raise GRPCError(Status.UNAVAILABLE, "upstream connect error or disconnect")
        wanted = {tag.tag_name: tag.tag_value for tag in request.tags}
        matching = sorted(
            (
                sandbox
                for sandbox in self.sandboxes.values()
                if (not request.app_id or sandbox.app_id == request.app_id)
                and (request.include_finished or sandbox.result is None)
                and all(sandbox.tags.get(k) == v for k, v in wanted.items())
                and (not request.before_timestamp or sandbox.created_at < request.before_timestamp)
            ),
            key=lambda sandbox: sandbox.created_at,
            reverse=True,
        )[: self.list_page_size]
        infos = []
        for sandbox in matching:
            task_info = api_pb2.TaskInfo(id=sandbox.task_id)
            if sandbox.result is not None:
                task_info.result.CopyFrom(sandbox.result)
            infos.append(
                api_pb2.SandboxInfo(
                    id=sandbox.sandbox_id,
                    created_at=sandbox.created_at,
                    app_id=sandbox.app_id,
                    name=sandbox.definition.name,
                    task_info=task_info,
                    tags=[
                        api_pb2.SandboxTag(tag_name=k, tag_value=v) for k, v in sandbox.tags.items()
                    ],
                    metadata=api_pb2.SandboxHandleMetadata(app_id=sandbox.app_id),
                )
            )
        await stream.send_message(api_pb2.SandboxListResponse(sandboxes=infos))

    async def SandboxGetFromName(self, stream: Any) -> None:
        """A running sandbox of a named app by its name (finished ones are not found)."""
        request = await stream.recv_message()
        self._record("SandboxGetFromName", request)
        app_id = self.apps.get(request.app_name)
        for sandbox in self.sandboxes.values():
            if (
                sandbox.app_id == app_id
                and sandbox.definition.name == request.sandbox_name
                and sandbox.result is None
            ):
                metadata = api_pb2.SandboxHandleMetadata(app_id=sandbox.app_id)
                await stream.send_message(
                    api_pb2.SandboxGetFromNameResponse(
                        sandbox_id=sandbox.sandbox_id, metadata=metadata
                    )
                )
                return
        raise GRPCError(Status.NOT_FOUND, f"Sandbox with name '{request.sandbox_name}' not found")

    async def _collect(self, sandbox: FakeSandbox, pipe: Any, fd: int) -> None:
        async for raw in pipe:
            sandbox.output.append((time.time(), fd, raw.decode(errors="replace")))

    async def AppFetchLogs(self, stream: Any) -> None:
        """The most recent ``limit`` lines of one task's output, oldest first."""
        request = await stream.recv_message()
        self._record("AppFetchLogs", request)
        batches = []
        for sandbox in self.sandboxes.values():
            if sandbox.app_id != request.app_id or request.task_id not in ("", sandbox.task_id):
                continue
            lines = sandbox.output[-request.limit :] if request.limit else sandbox.output
            items = [
                api_pb2.TaskLogs(data=line, timestamp=at, file_descriptor=fd)
                for at, fd, line in lines
            ]
            batches.append(api_pb2.TaskLogsBatch(task_id=sandbox.task_id, items=items))
        await stream.send_message(api_pb2.AppFetchLogsResponse(batches=batches))

    async def _reap(self, sandbox: FakeSandbox, collectors: list[asyncio.Future[None]]) -> None:
        assert sandbox.process is not None
        timeout = sandbox.definition.timeout_secs or 300
        try:
            code = await asyncio.wait_for(sandbox.process.wait(), timeout)
            await asyncio.gather(*collectors)  # all output is in before the result is
        except TimeoutError:
            sandbox.process.kill()
            await sandbox.process.wait()
            self._finish(sandbox, _STATUS.GENERIC_STATUS_TIMEOUT, 0)
            return
        if code < 0:  # killed by a signal: terminated (or already marked)
            self._finish(sandbox, _STATUS.GENERIC_STATUS_TERMINATED, 0)
        else:
            status = _STATUS.GENERIC_STATUS_SUCCESS if code == 0 else _STATUS.GENERIC_STATUS_FAILURE
            self._finish(sandbox, status, code)

    def _finish(self, sandbox: FakeSandbox, status: int, code: int) -> None:
        if sandbox.result is None:
            sandbox.result = api_pb2.GenericResult(status=status, exitcode=code)
            sandbox.finished.set()

    def _sandbox(self, sandbox_id: str) -> FakeSandbox:
        if self.unavailable:
            raise GRPCError(Status.UNAVAILABLE, "upstream connect error or disconnect")
        sandbox = self.sandboxes.get(sandbox_id)
        if sandbox is None:
            raise GRPCError(Status.NOT_FOUND, f"Sandbox {sandbox_id} not found")
        return sandbox

    def end(self, sandbox_id: str, status: int, exception: str = "") -> None:
        """Modal ends the sandbox with ``status`` (a GenericStatus) and its message."""
        sandbox = self.sandboxes[sandbox_id]
        if sandbox.result is None:
            sandbox.result = api_pb2.GenericResult(status=status, exitcode=0, exception=exception)
            sandbox.finished.set()
        if sandbox.process is not None and sandbox.process.returncode is None:
            sandbox.process.kill()

    def oom_kill(self, sandbox_id: str) -> None:
        """What Modal reports when the kernel kills the command at its memory limit."""
        sandbox = self.sandboxes[sandbox_id]
        self._finish(sandbox, _STATUS.GENERIC_STATUS_KERNEL_OOM_KILL, 137)
        if sandbox.process is not None and sandbox.process.returncode is None:
            sandbox.process.kill()

    async def SandboxGetTaskId(self, stream: Any) -> None:
        request = await stream.recv_message()
        sandbox = self._sandbox(request.sandbox_id)
        if time.monotonic() - sandbox.started < self.schedule_delay_s:
            await stream.send_message(api_pb2.SandboxGetTaskIdResponse())
            return
        response = api_pb2.SandboxGetTaskIdResponse(task_id=sandbox.task_id)
        if sandbox.result is not None:
            response.task_result.CopyFrom(sandbox.result)
        await stream.send_message(response)

    async def SandboxWait(self, stream: Any) -> None:
        request = await stream.recv_message()
        self._record("SandboxWait", request)
        sandbox = self._sandbox(request.sandbox_id)
        if request.timeout > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(sandbox.finished.wait(), request.timeout)
        response = api_pb2.SandboxWaitResponse(
            metadata=api_pb2.SandboxHandleMetadata(app_id=sandbox.app_id)
        )
        if sandbox.result is not None:
            response.result.CopyFrom(sandbox.result)
        await stream.send_message(response)

    async def SandboxTerminate(self, stream: Any) -> None:
        request = await stream.recv_message()
        self._record("SandboxTerminate", request)
        sandbox = self._sandbox(request.sandbox_id)
        if sandbox.result is None:
            self._finish(sandbox, _STATUS.GENERIC_STATUS_TERMINATED, 0)
            if sandbox.process is not None and sandbox.process.returncode is None:
                sandbox.process.kill()
        await stream.send_message(api_pb2.SandboxTerminateResponse())

    async def SandboxTagsGet(self, stream: Any) -> None:
        request = await stream.recv_message()
        sandbox = self._sandbox(request.sandbox_id)
        tags = [api_pb2.SandboxTag(tag_name=k, tag_value=v) for k, v in sandbox.tags.items()]
        await stream.send_message(api_pb2.SandboxTagsGetResponse(tags=tags))

    async def AppClientDisconnect(self, stream: Any) -> None:
        from google.protobuf import empty_pb2

        await stream.recv_message()
        await stream.send_message(empty_pb2.Empty())


for _name in list(getattr(FakeModalServicer, "__abstractmethods__", ())):
    setattr(FakeModalServicer, _name, _unimplemented(_name))
FakeModalServicer.__abstractmethods__ = frozenset()


class ControlPlane:
    """Runs the fake servicer on 127.0.0.1 in a thread with its own event loop."""

    def __init__(self) -> None:
        self.servicer = FakeModalServicer()
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._server: Server | None = None
        self._http: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def __enter__(self) -> ControlPlane:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    async def _start(self) -> None:
        # the client's own details codec: RPCRetryPolicy details reach it as Modal sends them
        self._server = Server([self.servicer], status_details_codec=custom_detail_codec)
        listen(self._server, RecvRequest, self._count)
        await self._server.start("127.0.0.1", 0)
        sockets = self._server._server.sockets  # the bound ephemeral port
        self.port = sockets[0].getsockname()[1]
        app = web.Application()
        app.router.add_put("/block/{digest}", self._put_block)
        app.router.add_get("/block/{digest}", self._get_block)
        self._http = web.AppRunner(app)
        await self._http.setup()
        site = web.TCPSite(self._http, "127.0.0.1", 0)
        await site.start()
        http_port = self._http.addresses[0][1]
        self.servicer.blob_url = f"http://127.0.0.1:{http_port}"

    async def _count(self, event: RecvRequest) -> None:
        # Every RPC the client makes, by method name (e.g. "SandboxList").
        self.servicer.rpcs.append(event.method_name.rpartition("/")[2])
        tokens = self.servicer.tokens
        if tokens is not None:
            sent = (
                event.metadata.get("x-modal-token-id"),
                event.metadata.get("x-modal-token-secret"),
            )
            if sent != tokens:
                raise GRPCError(Status.UNAUTHENTICATED, "Invalid token")

    async def _put_block(self, request: web.Request) -> web.Response:
        digest = request.match_info["digest"]
        data = await request.read()
        if hashlib.sha256(data).hexdigest() != digest:
            return web.Response(status=400, text="block does not match its sha256")
        self.servicer.blocks[digest] = data
        return web.Response(body=b"stored:" + digest.encode())

    async def _get_block(self, request: web.Request) -> web.Response:
        data = self.servicer.blocks.get(request.match_info["digest"])
        if data is None:
            return web.Response(status=404, text="no such block")
        return web.Response(body=data)

    async def _stop(self) -> None:
        for sandbox in self.servicer.sandboxes.values():
            if sandbox.process is not None and sandbox.process.returncode is None:
                sandbox.process.kill()
                await sandbox.process.wait()
        if self._http is not None:
            await self._http.cleanup()
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def oom_kill(self, sandbox_id: str) -> None:
        async def kill() -> None:
            self.servicer.oom_kill(sandbox_id)

        asyncio.run_coroutine_threadsafe(kill(), self._loop).result(10)

    def end_by_provider(self, sandbox_id: str, ending: str) -> None:
        """Cause provider ending ``ending`` as Modal reports it: a preempted or lost worker is
        GENERIC_STATUS_INTERNAL_FAILURE, a host-memory eviction MEMORY_MANAGER_EVICTION."""
        status, exception = {
            "preempted": (_STATUS.GENERIC_STATUS_INTERNAL_FAILURE, "Worker preempted"),
            "node_lost": (_STATUS.GENERIC_STATUS_INTERNAL_FAILURE, ""),
            "evicted": (_STATUS.GENERIC_STATUS_MEMORY_MANAGER_EVICTION, ""),
        }[ending]

        async def end() -> None:
            self.servicer.end(sandbox_id, status, exception)

        asyncio.run_coroutine_threadsafe(end(), self._loop).result(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"
