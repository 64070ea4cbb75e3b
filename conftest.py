"""Fixtures for tests that need a real provider, shared by every distribution's tests.

``scripts/services up`` starts the providers and writes ``$ALTAR_SERVICES_DIR/env``
(default ``/tmp/altar-services/env``); the fixtures below read that file (or the process
environment) to find them. When a provider is absent the test is skipped, unless
``ALTAR_REQUIRE_SERVICES=1`` (set by ``scripts/test`` and CI), where absence is a failure:
a real-provider test that did not run must never look like a pass.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path

import pytest


def _ignore_nothing_in_children() -> None:
    """Let the processes tests start receive SIGINT, SIGHUP and SIGQUIT.

    A test command started in the background (``cmd &`` in a script ignores SIGINT and SIGQUIT)
    or under ``nohup`` (SIGHUP) hands those dispositions down to every process it starts, and
    the tests that signal an ``altar run`` or an adapter then see nothing happen. A handled
    signal is reset to its default by ``exec``, so handling them here gives the children the
    defaults, while this process keeps ignoring hangups as it was asked to.
    """
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        if signal.getsignal(signum) is signal.SIG_IGN:
            handler = signal.default_int_handler if signum == signal.SIGINT else _ignored
            signal.signal(signum, handler)


def _ignored(signum: int, frame: object) -> None:
    """Still ignored here, but not in the children (see above)."""


_ignore_nothing_in_children()

# The default matches scripts/services; the directory holds sockets, not secrets.
SERVICES_DIR = Path(os.environ.get("ALTAR_SERVICES_DIR", "/tmp/altar-services"))  # noqa: S108


def _service_env() -> dict[str, str]:
    """Variables from the services env file, overridden by the process environment."""
    values: dict[str, str] = {}
    env_file = SERVICES_DIR / "env"
    if env_file.is_file():
        for raw in env_file.read_text().splitlines():
            line = raw.strip()
            if line.startswith("export "):
                line = line[len("export ") :]
            if "=" not in line or line.startswith("#"):
                continue
            key, _, value = line.partition("=")
            parts = shlex.split(value) if value else [""]
            values[key] = parts[0] if parts else ""
    for key, value in os.environ.items():
        if key.startswith(("ALTAR_", "DOCKER_HOST", "SLURM_")):
            values[key] = value
    return values


def _absent(what: str) -> None:
    message = f"{what} is not available; run `scripts/services up` (the README's test command does)"
    if os.environ.get("ALTAR_REQUIRE_SERVICES") == "1":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def service_env() -> dict[str, str]:
    """All variables describing the running test providers."""
    return _service_env()


@pytest.fixture(scope="session")
def docker_host(service_env: dict[str, str]) -> str:
    """``DOCKER_HOST`` of a reachable real Docker engine with the test images loaded."""
    host = service_env.get("DOCKER_HOST", "")
    socket = host.removeprefix("unix://")
    if not host or (host.startswith("unix://") and not Path(socket).exists()):
        _absent("a Docker engine (DOCKER_HOST)")
    os.environ["DOCKER_HOST"] = host
    return host


@dataclass(frozen=True)
class SshTarget:
    """The test sshd on 127.0.0.1: ``host`` is an alias defined in ``config``."""

    host: str
    config: str
    port: int
    user: str
    wrapper_dir: str  # holds an ``ssh`` that adds ``-F config``; prepend it to PATH


@pytest.fixture(scope="session")
def ssh_target(service_env: dict[str, str]) -> SshTarget:
    config = service_env.get("ALTAR_TEST_SSH_CONFIG", "")
    if not config or not Path(config).is_file():
        _absent("the test sshd (ALTAR_TEST_SSH_CONFIG)")
    return SshTarget(
        host=service_env.get("ALTAR_TEST_SSH_HOST", "altar-test-ssh"),
        config=config,
        port=int(service_env.get("ALTAR_TEST_SSH_PORT", "2222")),
        user=service_env.get("ALTAR_TEST_SSH_USER", "root"),
        wrapper_dir=service_env.get("ALTAR_TEST_SSH_BIN", ""),
    )


@pytest.fixture(scope="session")
def slurm_cluster(service_env: dict[str, str]) -> dict[str, str]:
    """A single-node Slurm with slurmdbd: ``partition`` and ``conf`` keys."""
    if service_env.get("ALTAR_TEST_SLURM") != "1" or shutil.which("sbatch") is None:
        _absent("a Slurm cluster with accounting (ALTAR_TEST_SLURM)")
    return {
        "partition": service_env.get("ALTAR_TEST_SLURM_PARTITION", "debug"),
        "conf": service_env.get("SLURM_CONF", "/etc/slurm/slurm.conf"),
    }


# --- Saved reference files (submitit style) ------------------------------------------------------
# Renderers (Job manifests, Docker create requests, Modal sandbox requests, sbatch scripts) are pure
# functions; their output is compared with a file saved beside the tests, so any change to what a
# provider receives shows up in review as a diff. `pytest --update-references` rewrites the files.


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-references",
        action="store_true",
        default=False,
        help="rewrite saved reference files (tests/references/...) instead of comparing with them",
    )


class ReferenceFiles:
    """Compare rendered text with a saved file, or rewrite it under ``--update-references``."""

    def __init__(self, update: bool) -> None:
        self.update = update

    def check(self, path: Path, text: str) -> None:
        if self.update:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            return
        if not path.is_file():
            pytest.fail(f"no reference file {path}; run pytest --update-references and review it")
        expected = path.read_text()
        assert text == expected, f"{path} differs; if intended, run pytest --update-references"


@pytest.fixture(scope="session")
def reference_files(pytestconfig: pytest.Config) -> ReferenceFiles:
    """Saved reference files for pure renderers (see ``--update-references``)."""
    return ReferenceFiles(bool(pytestconfig.getoption("--update-references")))


# --- Tests that disturb a shared service -------------------------------------------------------
# A test marked `serial` (it restarts slurmctld, say) would break the Slurm calls of tests running
# beside it, so an xdist worker never runs one: `scripts/test` runs them in a second pytest run of
# their own, after the parallel run. A plain `pytest` (no -n) runs them in order like any test.
#
# --- Slow modules first ---------------------------------------------------------------------------
# `--dist loadgroup` hands out the xdist groups first (largest first), then single tests in
# collection order, and a worker ends its share with whatever it was handed last: a two-minute
# test collected near the end (tests/ comes last) keeps one worker busy while the other has
# nothing left to do. So under xdist the modules holding a `slow` test come first (in their
# collection order, each module's tests still together, so module fixtures are set up once),
# and the end of the run is made of short tests that the two workers share out evenly.


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    serial = [item for item in items if item.get_closest_marker("serial")]
    if serial:
        config.hook.pytest_deselected(items=serial)
        items[:] = [item for item in items if not item.get_closest_marker("serial")]
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)  # stable: the order within stays


# --- xdist_group under pytest >= 9.2 -------------------------------------------------------------
# `--dist loadgroup` (scripts/test, noxfile) groups tests by a "@<group>" suffix that the worker's
# pytest-xdist (3.8) appends to each grouped item's id by writing `item._nodeid`. pytest 9.2 keeps
# the id in `item._id` (a structured NodeId) and no longer reads `_nodeid`, so the suffix is lost
# and every grouped test is scheduled on its own (pytest-dev/pytest-xdist#1386, unfixed in any
# release as of 2026-12). Copying xdist's id into `_id` restores the grouping. It does nothing
# where xdist's write took effect (pytest < 9.2), without `-n`, or once xdist stops writing
# `_nodeid`; delete it when a pytest-xdist release fixes #1386 (tests/test_xdist_grouping.py).


# Its own name (pluggy `specname`) so it stays apart from the `serial` hook above.
@pytest.hookimpl(wrapper=True, specname="pytest_collection_modifyitems")
def pytest_collection_modifyitems_xdist_groups(
    items: list[pytest.Item],
) -> Generator[None, None, None]:
    """After every plugin's hook (xdist's renames run there): give xdist's ids back to pytest."""
    yield
    for item in items:
        renamed = getattr(item, "_nodeid", None)
        if isinstance(renamed, str) and renamed != item.nodeid:
            # Imported only here: a private module, present in the pytest versions that need this.
            from _pytest.nodeid import NodeId

            item._id = NodeId.parse(renamed)
