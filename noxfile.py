"""Every way to check, test, build, benchmark and demo the workspace.

Each session gets its own virtual environment (uv backend) filled from ``uv.lock`` with
``uv sync --locked --package <dist>``, so a distribution that imports something it does not
declare fails here even though the shared development venv would hide it.

    nox -l                                 list sessions
    nox -s lint typecheck                  static checks
    nox -s "tests-3.12(altar-core)"        one distribution's unit tests on one Python
    nox -s "conformance(kubernetes)"       one backend through altar-conformance
    nox -s "integration(slurm)"            real-provider tests (starts scripts/services)
    nox -s docs bench demo released_core
    nox -s bench -- scale --full           one benchmark, with its own arguments
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from pathlib import Path

import nox

ROOT = Path(__file__).parent
PYTHONS = ["3.11", "3.12", "3.13"]
DEFAULT_PYTHON = "3.11"

# distribution name -> folder
DISTRIBUTIONS = {
    "altar-core": "packages/altar-core",
    "altar-backend-local": "packages/altar-backend-local",
    "altar-backend-k8s": "packages/altar-backend-k8s",
    "altar-backend-modal": "packages/altar-backend-modal",
    "altar-backend-slurm": "packages/altar-backend-slurm",
    "altar-conformance": "conformance",
    "httk-workflow-adapters": "adapters/httk-workflow-adapters",
}
# backend entry-point name -> distribution that provides it
BACKENDS = {
    "local": "altar-backend-local",
    "kubernetes": "altar-backend-k8s",
    "modal": "altar-backend-modal",
    "slurm": "altar-backend-slurm",
    "in-process": "altar-conformance",
}
PROVIDERS = ["docker", "slurm", "ssh"]
# workspace distributions (not on PyPI) a distribution's wheel needs beside altar-core
WORKSPACE_DEPENDENCIES = {"altar-backend-slurm": ["httk-workflow-adapters"]}
# markers of tests that need a real provider; unit sessions leave them to integration sessions
PROVIDER_MARKERS = "docker or slurm or ssh or integration or kubernetes_live"

nox.options.default_venv_backend = "uv"
nox.options.error_on_missing_interpreters = True
nox.options.sessions = ["lint", "typecheck", "tests", "conformance", "docs"]
os.environ.setdefault("UV_PYTHON_DOWNLOADS", "never")


def _expose_pyenv_interpreters() -> None:
    """Put pyenv's 3.11/3.12/3.13 ``bin`` directories on PATH so nox and uv find them."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    dirs = []
    for minor in PYTHONS:
        for candidate in sorted((root / "versions").glob(f"{minor}.*/bin"), reverse=True):
            dirs.append(str(candidate))
            break
    if dirs:
        os.environ["PATH"] = os.pathsep.join([*dirs, os.environ.get("PATH", "")])


_expose_pyenv_interpreters()


def _sync(session: nox.Session, *args: str) -> None:
    """Install from the lock into this session's venv (``uv sync`` targets it)."""
    env = {"UV_PROJECT_ENVIRONMENT": session.virtualenv.location}
    python = session.python if isinstance(session.python, str) else DEFAULT_PYTHON
    session.run_install("uv", "sync", "--locked", "--python", python, *args, env=env, external=True)


def _add_conformance(session: nox.Session) -> None:
    """Backends prove themselves with altar-conformance: add it (from the lock) to the venv.

    ``uv sync`` takes one ``--package`` at a time; ``--inexact`` keeps what is installed.
    """
    _sync(session, "--inexact", "--package", "altar-conformance", "--group", "dev")


def _services_env(session: nox.Session, only: str) -> dict[str, str]:
    """Start the real providers (scripts/services) and return the variables it wrote."""
    session.run(str(ROOT / "scripts" / "services"), "up", "--only", only, external=True)
    state = Path(os.environ.get("ALTAR_SERVICES_DIR", "/tmp/altar-services"))
    env: dict[str, str] = {"ALTAR_SERVICES_DIR": str(state)}
    for raw in (state / "env").read_text().splitlines():
        line = raw.strip().removeprefix("export ")
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            env[key] = shlex.split(value)[0] if value else ""
    return env


def _pytest(session: nox.Session, *args: str, env: dict[str, str] | None = None) -> None:
    workers = os.environ.get("ALTAR_TEST_WORKERS", "2")
    session.run(
        "pytest", "-n", workers, "--dist", "loadgroup", *args, *session.posargs, env=env or {}
    )


@nox.session(python=DEFAULT_PYTHON)
def lint(session: nox.Session) -> None:
    """ruff lint and format check, and the GitHub workflow checkers (zizmor, actionlint)."""
    _sync(session, "--only-group", "dev")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    # runs the zizmor and actionlint this venv got from the lock
    session.run(str(ROOT / "scripts" / "lint-workflows"), external=True)


@nox.session(python=DEFAULT_PYTHON)
def typecheck(session: nox.Session) -> None:
    """mypy --strict over every distribution's src/ (root configuration)."""
    _sync(session, "--all-packages", "--group", "dev")
    session.run("mypy")


@nox.session(python=PYTHONS, tags=["tests"])
@nox.parametrize("dist", [nox.param(d, id=d, tags=[d]) for d in DISTRIBUTIONS])
def tests(session: nox.Session, dist: str) -> None:
    """One distribution's tests, installed alone, without real-provider tests."""
    _sync(session, "--package", dist, "--group", "dev")
    if dist in BACKENDS.values():
        _add_conformance(session)
    _pytest(session, f"{DISTRIBUTIONS[dist]}/tests", "-m", f"not ({PROVIDER_MARKERS})")


@nox.session(python=DEFAULT_PYTHON, tags=["conformance"])
@nox.parametrize("backend", list(BACKENDS), ids=list(BACKENDS))
def conformance(session: nox.Session, backend: str) -> None:
    """A backend against its fake provider through altar-conformance.

    Selects the backend's test classes named ``*Contract*`` and the modules
    ``tests/test_conformance*.py`` / ``tests/test_*_conformance.py``.
    """
    dist = BACKENDS[backend]
    _sync(session, "--package", dist, "--group", "dev")
    _add_conformance(session)
    _pytest(
        session,
        f"{DISTRIBUTIONS[dist]}/tests",
        "-k",
        "Contract or test_conformance or _conformance",
        "-m",
        f"not ({PROVIDER_MARKERS})",
    )


@nox.session(python=DEFAULT_PYTHON, tags=["integration"])
@nox.parametrize("provider", PROVIDERS, ids=PROVIDERS)
def integration(session: nox.Session, provider: str) -> None:
    """Tests marked with a real provider, against the providers scripts/services starts."""
    _sync(session, "--all-packages", "--group", "dev")
    # Slurm tests reach the cluster through sshd too (ssh-slurm), and the slurm backend's jobs
    # run Docker and Podman containers, so start all of them.
    env = _services_env(session, "docker,podman,slurm,ssh" if provider == "slurm" else provider)
    env["ALTAR_REQUIRE_SERVICES"] = "1"
    folders = [*DISTRIBUTIONS.values(), "."]  # ".": the repository-wide tests/ (services checks)
    dirs = [f"{folder}/tests" for folder in folders if (ROOT / folder / "tests").is_dir()]
    _pytest(session, *dirs, "-m", provider, env=env)
    # tests marked `serial` (a slurmctld restart) are left out of the parallel run: alone now
    session.run(
        "pytest",
        "-n",
        "0",
        "-m",
        f"{provider} and serial",
        *dirs,
        *session.posargs,
        env=env,
        success_codes=[0, 5],
    )


@nox.session(python=DEFAULT_PYTHON)
def crash_engine(session: nox.Session) -> None:
    """The engine-kill crash scenario over 5 seeds in a row (issue 22's measure; ~1 min each):
    every seed must end with every task succeeded, nothing run twice, no retry charged.
    ``ALTAR_CRASH_SEED=<n>`` starts from seed n; posargs go to pytest."""
    _sync(session, "--all-packages", "--group", "dev")
    env = _services_env(session, "docker")
    env.update(ALTAR_REQUIRE_SERVICES="1", ALTAR_CRASH_ROUNDS="5")
    session.run(
        "pytest",
        "-n",
        "0",
        "-x",
        "tests/crash/test_crash_consistency.py",
        "-k",
        "engine_killed_during_submits",
        *session.posargs,
        env=env,
    )


@nox.session(python=DEFAULT_PYTHON)
def docs(session: nox.Session) -> None:
    """Build the Sphinx site with warnings as errors."""
    _sync(session, "--all-packages", "--group", "dev")
    out = ROOT / "docs" / "_build" / "html"
    session.run(
        "sphinx-build", "-W", "--keep-going", "-E", "-b", "html", "docs", str(out), *session.posargs
    )


@nox.session(python=DEFAULT_PYTHON)
def bench(session: nox.Session) -> None:
    """Run every benchmark script; each prints its own table of medians, ratios and targets.

    ``nox -s bench -- scale --full`` runs one script (``bench_scale.py``, named with or without
    its ``bench_`` prefix) and passes it the arguments after its name; other arguments go to
    every script.
    """
    _sync(session, "--all-packages", "--group", "dev")
    scripts = sorted(
        {*ROOT.glob("*/benchmarks/bench_*.py"), *ROOT.glob("*/*/benchmarks/bench_*.py")}
    )
    if not scripts:
        session.error("no benchmarks found (*/benchmarks/bench_*.py)")
    args = list(session.posargs)
    if args and not args[0].startswith("-"):
        wanted = args.pop(0).removesuffix(".py").removeprefix("bench_")
        scripts = [script for script in scripts if script.stem == f"bench_{wanted}"]
        if not scripts:
            session.error(f"no benchmark named bench_{wanted}.py")
    for script in scripts:
        session.log(f"benchmark: {script.relative_to(ROOT)}")
        session.run("python", str(script), *args)


@nox.session(python=DEFAULT_PYTHON)
def demo(session: nox.Session) -> None:
    """Run the demo plan on the local Docker backend."""
    _sync(session, "--all-packages")
    env = _services_env(session, "docker")
    session.run("altar", "run", "examples/demo/plan.toml", *session.posargs, env=env)


# --- released core ---------------------------------------------------------------------------

_FLOOR = re.compile(r"""["']altar-core\s*>=\s*([0-9][0-9A-Za-z.]*)""")


def _core_floor(dist: str) -> str:
    text = (ROOT / DISTRIBUTIONS[dist] / "pyproject.toml").read_text()
    match = _FLOOR.search(text)
    if match is None:
        raise ValueError(f"{dist} declares no 'altar-core>=X' floor in its pyproject.toml")
    return match.group(1)


def _core_version() -> str:
    about = ROOT / "packages/altar-core/src/altar/execution/__about__.py"
    match = re.search(r"""__version__\s*=\s*["']([^"']+)["']""", about.read_text())
    if match is None:
        raise ValueError(f"no __version__ in {about}")
    return match.group(1)


@nox.session(python=DEFAULT_PYTHON, tags=["released_core"])
@nox.parametrize("backend", list(BACKENDS), ids=list(BACKENDS))
def released_core(session: nox.Session, backend: str) -> None:
    """A backend's wheel against the lowest altar-core it declares, in a fresh venv.

    The floor comes from the backend's ``altar-core>=X`` requirement. altar-core X is built from
    the git tag ``altar-core-vX`` (or from the working tree when that is version X), never from the
    workspace, so the declared bound is what gets tested.
    """
    from packaging.version import Version

    dist = BACKENDS[backend]
    floor = _core_floor(dist)
    wheels = Path(session.create_tmp()) / "wheels"
    shutil.rmtree(wheels, ignore_errors=True)
    wheels.mkdir(parents=True)

    tag = f"altar-core-v{floor}"
    tagged = session.run("git", "tag", "--list", tag, external=True, silent=True)
    if isinstance(tagged, str) and tagged.strip():
        source = Path(session.create_tmp()) / "core-at-floor"
        shutil.rmtree(source, ignore_errors=True)
        session.run("git", "worktree", "add", "--detach", str(source), tag, external=True)
        try:
            session.run(
                "uv",
                "build",
                "--wheel",
                "--out-dir",
                str(wheels),
                "--no-sources",
                str(source / DISTRIBUTIONS["altar-core"]),
                external=True,
            )
        finally:
            session.run("git", "worktree", "remove", "--force", str(source), external=True)
    elif Version(_core_version()) == Version(floor):
        session.run(
            "uv",
            "build",
            "--wheel",
            "--package",
            "altar-core",
            "--no-sources",
            "--out-dir",
            str(wheels),
            external=True,
        )
    else:
        session.error(
            f"{dist} declares altar-core>={floor}, but there is no tag {tag} and the workspace has "
            f"altar-core {_core_version()}: tag that release or raise the floor"
        )
    packages = [dist] if dist == "altar-conformance" else [dist, "altar-conformance"]
    packages += WORKSPACE_DEPENDENCIES.get(dist, [])
    for package in packages:
        session.run(
            "uv",
            "build",
            "--wheel",
            "--package",
            package,
            "--no-sources",
            "--out-dir",
            str(wheels),
            external=True,
        )

    # test tools at their locked versions, then the wheels with the core pinned to its floor
    requirements = Path(session.create_tmp()) / "dev-requirements.txt"
    session.run(
        "uv",
        "export",
        "--locked",
        "--only-group",
        "dev",
        "--no-hashes",
        "--no-emit-project",
        "--output-file",
        str(requirements),
        external=True,
        silent=True,
    )
    session.install("-r", str(requirements))
    session.install(
        "--resolution",
        "lowest-direct",
        "--find-links",
        str(wheels),
        *[str(w) for w in sorted(wheels.glob("*.whl"))],
        f"altar-core=={floor}",
    )
    session.run("python", "-c", "import altar.execution as m; print('altar-core', m.__version__)")
    _pytest(session, f"{DISTRIBUTIONS[dist]}/tests", "-m", f"not ({PROVIDER_MARKERS})")
