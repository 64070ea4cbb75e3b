"""Release engineering: every distribution builds on its own and works installed alone.

Each test builds the sdist and the wheel exactly as the release workflow does
(``uv build --package X --no-sources``: the wheel is built from the sdist, so a file missing from
the sdist breaks it), installs the wheel into a fresh virtual environment with no workspace on
``sys.path``, and checks it from there.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DISTRIBUTIONS = {
    "altar-core": "packages/altar-core",
    "altar-backend-local": "packages/altar-backend-local",
    "altar-backend-k8s": "packages/altar-backend-k8s",
    "altar-backend-modal": "packages/altar-backend-modal",
    "altar-conformance": "conformance",
    "httk-workflow-adapters": "adapters/httk-workflow-adapters",
}
BACKENDS = {  # entry-point name -> distribution
    "local": "altar-backend-local",
    "kubernetes": "altar-backend-k8s",
    "modal": "altar-backend-modal",
    "in-process": "altar-conformance",
}
NAMESPACES = ("altar/__init__.py", "altar/backends/__init__.py", "httk/__init__.py")
NAMESPACES += ("httk/workflow/__init__.py",)

pytestmark = pytest.mark.slow


def _uv() -> str:
    uv = shutil.which("uv")
    if uv is None:
        pytest.fail("uv is not on PATH (pip install uv)", pytrace=False)
    return uv


def _run(*argv: str | Path, cwd: Path = ROOT) -> str:
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}
    env.pop("VIRTUAL_ENV", None)  # uv must not mistake the test venv for the target
    result = subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )
    if result.returncode != 0:
        pytest.fail(
            f"command failed ({result.returncode}): {' '.join(map(str, argv))}\n"
            f"stdout:\n{result.stdout[-4000:]}\nstderr:\n{result.stderr[-4000:]}",
            pytrace=False,
        )
    return result.stdout


def _version(dist: str) -> str:
    abouts = list((ROOT / DISTRIBUTIONS[dist] / "src").rglob("__about__.py"))
    assert len(abouts) == 1, f"{dist}: expected one __about__.py, found {abouts}"
    match = re.search(r"""__version__\s*=\s*["']([^"']+)["']""", abouts[0].read_text())
    assert match, f"{abouts[0]} has no __version__"
    return match.group(1)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory):
    """Build a distribution's sdist and wheel once per worker; returns the wheel path."""
    out = tmp_path_factory.mktemp("dist")
    cache: dict[str, Path] = {}

    def build(dist: str) -> Path:
        if dist not in cache:
            target = out / dist
            _run(_uv(), "build", "--package", dist, "--no-sources", "--out-dir", target)
            wheels = list(target.glob("*.whl"))
            sdists = list(target.glob("*.tar.gz"))
            assert len(wheels) == 1, f"{dist}: expected one wheel, got {wheels}"
            assert len(sdists) == 1, f"{dist}: expected one sdist, got {sdists}"
            cache[dist] = wheels[0]
        return cache[dist]

    return build


def _venv(tmp_path: Path, *wheels: Path) -> Path:
    """A fresh venv holding only ``wheels`` and what they declare; returns its python."""
    venv = tmp_path / "venv"
    python_version = f"{sys.version_info.major}.{sys.version_info.minor}"
    _run(_uv(), "venv", "--python", python_version, venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    _run(_uv(), "pip", "install", "--python", python, *wheels, cwd=tmp_path)
    return python


def _installed(python: Path) -> set[str]:
    out = _run(
        python,
        "-c",
        "import importlib.metadata as m, json;"
        "print(json.dumps(sorted({d.metadata['Name'].lower() for d in m.distributions()})))",
        cwd=python.parent,
    )
    return set(json.loads(out))


@pytest.mark.parametrize("dist", list(DISTRIBUTIONS))
def test_wheel_is_complete_and_versioned(dist: str, built) -> None:
    wheel = built(dist)
    version = _version(dist)
    assert wheel.name.startswith(f"{dist.replace('-', '_')}-{version}-"), wheel.name
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert any(n.endswith("py.typed") for n in names), f"{wheel.name} ships no py.typed"
    shared = [n for n in names if n in NAMESPACES]
    assert not shared, f"{wheel.name} ships namespace package files {shared}: remove them"
    assert not [n for n in names if "/tests/" in n or n.startswith("tests/")], "tests in wheel"
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA")))
    home = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["altar"]["home"]
    # what PyPI will show: the one home, which the release check holds to the workflow's repository
    assert f"Project-URL: Source, {home}\n" in metadata.decode(), metadata.decode()[:2000]


def test_altar_core_pulls_no_third_party_dependency(built, tmp_path: Path) -> None:
    python = _venv(tmp_path, built("altar-core"))
    assert _installed(python) == {"altar-core"}
    out = _run(python, "-c", "import altar.execution as m; print(m.__version__)", cwd=tmp_path)
    assert out.strip() == _version("altar-core")


def test_altar_core_wheel_ships_the_shell_verifier(built, tmp_path: Path) -> None:
    """verify_files.sh is package data: in the wheel, and read by the installed wheel."""
    wheel = built("altar-core")
    with zipfile.ZipFile(wheel) as archive:
        assert "altar/execution/digests/verify_files.sh" in archive.namelist(), (
            f"{wheel.name}: no verifier"
        )
    python = _venv(tmp_path, wheel)
    out = _run(
        python,
        "-c",
        "import sys; from altar.execution import verify_files_script as v; sys.stdout.write(v())",
        cwd=tmp_path,
    )
    source = ROOT / "packages/altar-core/src/altar/execution/digests/verify_files.sh"
    assert out == source.read_text(encoding="utf-8").replace("@TRUST@", "1", 1)


def test_httk_adapters_install_alone_with_executable_templates(built, tmp_path: Path) -> None:
    wheel = built("httk-workflow-adapters")
    with zipfile.ZipFile(wheel) as archive:
        adapters = {
            info.filename: (info.external_attr >> 16) & 0o777
            for info in archive.infolist()
            if info.filename.endswith("/adapter") and "/templates/" in info.filename
        }
    assert adapters, f"{wheel.name} ships no templates/*/adapter"
    not_executable = [name for name, mode in adapters.items() if not mode & stat.S_IXUSR]
    assert not not_executable, f"templates lost their exec bit in the wheel: {not_executable}"

    python = _venv(tmp_path, wheel)
    assert _installed(python) == {"httk-workflow-adapters"}
    site = _run(
        python, "-c", "import httk.workflow.adapters as m; print(m.__path__[0])", cwd=tmp_path
    ).strip()
    installed = [p for p in Path(site).rglob("adapter") if p.is_file()]
    assert len(installed) == len(adapters)
    assert all(os.access(p, os.X_OK) for p in installed), "installed templates are not executable"


@pytest.mark.parametrize("name", list(BACKENDS))
def test_backend_entry_point_loads_from_its_wheel(name: str, built, tmp_path: Path) -> None:
    dist = BACKENDS[name]
    python = _venv(tmp_path, built("altar-core"), built(dist))
    installed = _installed(python)
    siblings = set(DISTRIBUTIONS) - {"altar-core", dist}
    assert not installed & siblings, f"{dist} pulled in siblings {installed & siblings}"
    probe = (
        "import importlib.metadata as m, json\n"
        "from altar.execution import ExecutionBackend\n"
        "group = m.entry_points(group='altar.execution_backends')\n"
        f"eps = [e for e in group if e.name == {name!r}]\n"
        "assert len(eps) == 1, eps\n"
        "cls = eps[0].load()\n"
        "assert isinstance(cls, type) and issubclass(cls, ExecutionBackend), cls\n"
        "print(json.dumps({'name': cls.name, 'dist': eps[0].dist.name}))\n"
    )
    loaded = json.loads(_run(python, "-c", probe, cwd=tmp_path))
    assert loaded == {"name": name, "dist": dist}


def test_conformance_suite_runs_from_its_wheel_against_in_process(built, tmp_path: Path) -> None:
    """altar-conformance's own contract tests, run by the installed wheel only."""
    python = _venv(tmp_path, built("altar-core"), built("altar-conformance"))
    tests = ROOT / DISTRIBUTIONS["altar-conformance"] / "tests"
    # The contract suite itself and the package's public surface; the rest of the folder (the
    # suite-bites faults, the process fabric) runs from the checkout in the main test run (a -k
    # of "conformance" matched the folder's name and ran all of it twice, ~2 minutes).
    # -P: the checkout is not put on sys.path; the repository's pytest configuration applies
    result = subprocess.run(
        [
            str(python), "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider",
            str(tests / "test_reference_conformance.py"), str(tests / "test_contract_surface.py"),
        ],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, (
        f"pytest exited {result.returncode} (5 = no contract tests found)\n{result.stdout[-6000:]}"
        f"\n{result.stderr[-3000:]}"
    )
    assert re.search(r"\b\d+ passed\b", result.stdout), result.stdout[-2000:]
