"""Shared by the benchmarks here: find the Docker engine as the test services publish it."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path


def docker_host(program: str) -> str:
    """``DOCKER_HOST``, else the one ``scripts/services up`` wrote; exported for the docker CLI."""
    host = os.environ.get("DOCKER_HOST")
    services = os.environ.get("ALTAR_SERVICES_DIR") or Path(tempfile.gettempdir(), "altar-services")
    env_file = Path(services, "env")
    if not host and env_file.is_file():
        for line in env_file.read_text().splitlines():
            if line.startswith("export DOCKER_HOST="):
                host = line.split("=", 1)[1].strip().strip("'\"")
    if not host:
        sys.exit(f"{program}: set DOCKER_HOST (or run scripts/services up --only docker)")
    os.environ["DOCKER_HOST"] = host
    return host
