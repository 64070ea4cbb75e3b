"""The package's rooms: old module names still work, and the SDK is imported only when needed."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

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
    sys.modules.pop(f"altar.backends.local.{old}", None)
    with pytest.warns(DeprecationWarning, match=f"altar.backends.local.{old} is deprecated"):
        old_module = importlib.import_module(f"altar.backends.local.{old}")
    new_module = importlib.import_module(f"altar.backends.local.{new}")
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


SRC = Path(package.__file__).parent


def _package_imports(path: Path) -> set[str]:
    """The modules of this package that ``path`` imports (at any depth in the file)."""
    imported = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
    return {m for m in imported if m.startswith("altar.backends.local")}


def test_render_and_classify_take_only_values_from_the_seam() -> None:
    """The pure rooms import nothing of this package but :mod:`.runtime` (as in k8s and Modal)."""
    assert _package_imports(SRC / "runtime.py") == set()
    assert _package_imports(SRC / "render.py") == {"altar.backends.local.runtime"}
    assert _package_imports(SRC / "classify.py") == {"altar.backends.local.runtime"}


def test_no_module_over_500_lines() -> None:
    for path in SRC.rglob("*.py"):
        assert len(path.read_text().splitlines()) <= 500, path
