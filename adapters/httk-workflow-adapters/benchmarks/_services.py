"""Find the test sshd the way the root conftest does (scripts/services writes the env file)."""

from __future__ import annotations

import os
import shlex
from pathlib import Path


def service_env() -> dict[str, str]:
    values: dict[str, str] = {}
    default = "/tmp/altar-services"  # noqa: S108 - where scripts/services writes, by design
    env_file = Path(os.environ.get("ALTAR_SERVICES_DIR", default)) / "env"
    if env_file.is_file():
        for raw in env_file.read_text().splitlines():
            line = raw.strip().removeprefix("export ")
            if "=" in line and not line.startswith("#"):
                key, _, value = line.partition("=")
                values[key] = (shlex.split(value) or [""])[0]
    values.update({k: v for k, v in os.environ.items() if k.startswith("ALTAR_")})
    return values


def ssh_settings() -> tuple[str, str] | None:
    """``(host alias, wrapper dir)`` of the test sshd, or ``None`` when it is not running."""
    values = service_env()
    config = values.get("ALTAR_TEST_SSH_CONFIG", "")
    if not config or not Path(config).is_file():
        return None
    return values.get("ALTAR_TEST_SSH_HOST", "altar-test-ssh"), values.get("ALTAR_TEST_SSH_BIN", "")
