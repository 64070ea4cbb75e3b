"""Shared set-up for the Slurm benchmarks: the services env file, a counting login node."""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Sequence
from pathlib import Path

from altar.backends.slurm import CommandResult, LocalLoginNode


def load_services_env(who: str) -> dict[str, str]:
    """Read /tmp/altar-services/env into os.environ (as the root conftest does)."""
    state = Path(os.environ.get("ALTAR_SERVICES_DIR", "/tmp/altar-services"))  # noqa: S108
    env_file = state / "env"
    if env_file.is_file():
        for raw in env_file.read_text().splitlines():
            line = raw.strip().removeprefix("export ")
            if line and not line.startswith("#") and "=" in line:
                key, _, value = line.partition("=")
                os.environ.setdefault(key, shlex.split(value)[0] if value else "")
    if shutil.which("sbatch") is None or os.environ.get("ALTAR_TEST_SLURM") != "1":
        raise SystemExit(f"{who}: needs the test Slurm (scripts/services up)")
    return dict(os.environ)


class CountingLoginNode(LocalLoginNode):
    """This machine's login node, counting the remote commands the backend runs."""

    def __init__(self) -> None:
        super().__init__()
        self.commands: list[str] = []

    def run(self, argv: Sequence[str]) -> CommandResult:
        self.commands.append(argv[3] if argv[0] == "timeout" else argv[0])
        return super().run(argv)
