"""A Modal stand-in that really runs sandboxes: one Docker container each, network off.

The volume is a directory on this machine bind-mounted at the sandbox's mount root, so a plan's
commands read and write exactly the paths they would on Modal. Sandbox bookkeeping, ids and
validation are :class:`FakeModalRuntime`'s; a container's exit becomes the sandbox's result.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from pathlib import Path

from altar.backends.modal.fake import FakeModalRuntime
from altar.backends.modal.runtime import SandboxRequest


class DockerModal(FakeModalRuntime):
    def __init__(self, volumes_root: Path) -> None:
        super().__init__()
        self.volumes_root = volumes_root
        self._runs: dict[str, asyncio.Task[None]] = {}

    def _dir(self, volume_name: str) -> Path:
        path = self.volumes_root / volume_name
        path.mkdir(parents=True, exist_ok=True)
        return path

    async def create_sandbox(self, request: SandboxRequest) -> str:
        sandbox_id = await super().create_sandbox(request)
        argv = ["docker", "run", "--rm", "--network", "none", "--name", f"altar-{sandbox_id}"]
        if request.volume_name is not None:
            argv += ["--volume", f"{self._dir(request.volume_name)}:{request.mount_root}"]
        for key, value in request.env.items():
            argv += ["--env", f"{key}={value}"]
        if request.memory_mib is not None:
            argv += ["--memory", f"{request.memory_mib[1]}m"]
        argv += [request.image, *request.command]
        self._runs[sandbox_id] = asyncio.ensure_future(self._run(sandbox_id, argv))
        return sandbox_id

    async def _run(self, sandbox_id: str, argv: list[str]) -> None:
        process = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
        assert process.stdout is not None
        async for line in process.stdout:
            self.write_output(sandbox_id, [line.decode(errors="replace").rstrip("\n")])
        code = await process.wait()
        if not self.sandboxes[sandbox_id].result.finished:
            self.finish(sandbox_id, code)

    async def terminate_sandbox(self, sandbox_id: str) -> None:
        await super().terminate_sandbox(sandbox_id)
        remove = await asyncio.create_subprocess_exec(
            "docker",
            "rm",
            "--force",
            f"altar-{sandbox_id}",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        await remove.wait()

    async def close(self) -> None:
        for sandbox_id in list(self._runs):
            await self.terminate_sandbox(sandbox_id)
        for run in self._runs.values():
            with contextlib.suppress(asyncio.CancelledError):
                await run

    # -- the volume is a directory ---------------------------------------------------------

    async def upload(self, volume_name: str, remote_path: str, source: Path | bytes) -> None:
        await self._call("upload")
        await asyncio.to_thread(_copy_in, source, self._dir(volume_name) / remote_path)
        self.uploads.append(remote_path)

    async def download(self, volume_name: str, remote_path: str, destination: Path) -> None:
        await self._call("download")
        shutil.copyfile(self._dir(volume_name) / remote_path, destination)

    async def file_version(self, volume_name: str, remote_path: str) -> str | None:
        await self._call("file_version")
        try:
            st = os.stat(self._dir(volume_name) / remote_path)
        except FileNotFoundError:
            return None
        return f"size={st.st_size} mtime={int(st.st_mtime)}"

    async def read_file(self, volume_name: str, remote_path: str) -> bytes | None:
        await self._call("read_file")
        try:
            return (self._dir(volume_name) / remote_path).read_bytes()
        except FileNotFoundError:
            return None

    async def remove(self, volume_name: str, remote_path: str) -> None:
        await self._call("remove")
        (self._dir(volume_name) / remote_path).unlink(missing_ok=True)


def _copy_in(source: Path | bytes, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(source, bytes):
        target.write_bytes(source)
    elif source.is_dir():
        shutil.copytree(source, target, dirs_exist_ok=True)
    else:
        shutil.copyfile(source, target)
