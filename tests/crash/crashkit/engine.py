"""A private Docker engine for the engine-kill scenario, started and stopped by scripts/services.

The shared engine (``/tmp/altar-services``) serves every other test; this one lives in its own
state directory (``ALTAR_SERVICES_DIR``), so killing it with SIGKILL touches nobody else.
``scripts/services up --only docker`` starts ``dockerd`` there and loads the BusyBox test image
offline; ``scripts/services down --only docker`` with the same directory stops it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

__all__ = ["PrivateEngine"]

ROOT = Path(__file__).resolve().parents[3]
SERVICES = ROOT / "scripts" / "services"


class PrivateEngine:
    """``dockerd`` in ``state_dir``: up, SIGKILL, up again, down."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.kills = 0

    @property
    def docker_host(self) -> str:
        return f"unix://{self.state_dir}/docker.sock"

    def _services(self, *args: str) -> None:
        env = {**os.environ, "ALTAR_SERVICES_DIR": str(self.state_dir)}
        env.pop("DOCKER_HOST", None)
        subprocess.run(
            [str(SERVICES), *args, "--only", "docker"],
            env=env,
            check=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=300,
        )

    def up(self) -> None:
        """Start it (idempotent: a live engine is reused); returns once it answers."""
        self._services("up")

    def down(self) -> list[int]:
        """Stop it, then end what a killed daemon left: returns the pids of leaked shims.

        A ``containerd-shim`` of a container that ran while ``dockerd`` was killed outlives
        the restarted daemon and ``scripts/services down`` alike (found by the engine-kill
        test); it is ended here, by pid, so the test leaves no process behind.
        """
        self._services("down")
        leaked = []
        marker = str(self.state_dir).encode()
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                cmdline = Path(entry.path, "cmdline").read_bytes()
            except OSError:
                continue
            if marker in cmdline:
                leaked.append(int(entry.name))
        for pid in leaked:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return leaked

    def remove(self) -> None:
        """Delete the state directory (call after :meth:`down`)."""
        shutil.rmtree(self.state_dir, ignore_errors=True)

    def pid(self) -> int | None:
        try:
            return int((self.state_dir / "dockerd.pid").read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def kill(self) -> int:
        """SIGKILL ``dockerd`` (only it) and wait until it and its ``containerd`` are gone.

        ``containerd`` dies with ``dockerd`` (a parent-death signal) while the containers' shims
        live on. A new ``dockerd`` that still finds the old ``containerd``'s pid in the process
        table (even as a zombie not yet reaped) waits for it and gives up after a minute, so
        the restart must wait for both to be reaped.
        """
        pid = self.pid()
        if pid is None:
            raise RuntimeError(f"no dockerd.pid in {self.state_dir}")
        containerd = self.state_dir / "docker-exec" / "containerd" / "containerd.pid"
        try:
            child: int | None = int(containerd.read_text().strip())
        except (FileNotFoundError, ValueError):
            child = None
        os.kill(pid, signal.SIGKILL)
        self.kills += 1
        for gone in (pid, child):
            deadline = time.monotonic() + 120
            while gone is not None and Path(f"/proc/{gone}").exists():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"process {gone} of the killed engine does not go away")
                time.sleep(0.02)
        return pid
