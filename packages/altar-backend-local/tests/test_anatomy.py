"""The package's rooms: old module names still work, and the SDK is imported only when needed."""

from __future__ import annotations

import subprocess
import sys

import altar.backends.local as package
import pytest


@pytest.mark.parametrize(
    ("old", "new", "names"),
    [
        ("mapping", "render", ["render_request", "host_path", "timeout_from_labels"]),
        ("states", "classify", ["deadline", "terminal_failure", "Outcome"]),
        ("docker_runtime", "sdk_runtime", ["DockerSdkRuntime", "describe_engine"]),
    ],
)
def test_old_module_names_reexport_the_new_ones(old: str, new: str, names: list[str]) -> None:
    old_module = __import__(f"altar.backends.local.{old}", fromlist=names)
    new_module = __import__(f"altar.backends.local.{new}", fromlist=names)
    for name in names:
        assert getattr(old_module, name) is getattr(new_module, name)
    assert set(old_module.__all__) <= set(new_module.__all__)


def test_the_package_still_exports_the_sdk_runtime() -> None:
    from altar.backends.local.sdk_runtime import DockerSdkRuntime

    assert package.DockerSdkRuntime is DockerSdkRuntime
    with pytest.raises(AttributeError):
        _ = package.NoSuchName  # type: ignore[attr-defined]


def test_package_render_classify_and_fake_import_without_the_docker_sdk() -> None:
    """``docker`` blocked: the package, the pure modules, the fake and a faked backend work;
    only the real runtime needs the SDK."""
    script = """
import sys
sys.modules["docker"] = None  # any import of the SDK fails
import asyncio
import altar.backends.local as local
from altar.backends.local.render import render_request
from altar.backends.local.classify import terminal_failure
from altar.backends.local.fake import FakeDockerRuntime
from altar.execution import ContainerTaskSpec
backend = local.LocalDockerExecutionBackend(data_root="/tmp/x", runtime=FakeDockerRuntime())
assert "docker" not in [m for m in sys.modules if sys.modules[m] is not None]
try:
    local.LocalDockerExecutionBackend(data_root="/tmp/x")
except ImportError:
    print("sdk needed only for the real runtime")
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "sdk needed only for the real runtime"
