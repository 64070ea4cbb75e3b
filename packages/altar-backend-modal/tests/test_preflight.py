"""``check_backend`` (``altar check``) with the unmodified modal client against the fake
control plane: credentials present and accepted, the volume exists; nothing is created
(issue 23 item 2)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import modal
import pytest
from altar.backends.modal import ModalExecutionBackend
from altar.backends.modal.sdk_runtime import ModalSdkRuntime

from .modal_control_plane import ControlPlane

pytestmark = pytest.mark.skipif(
    not modal.__version__.startswith("1.6."),
    reason=f"the fake control plane speaks modal 1.6's wire protocol; modal {modal.__version__} "
    "is installed",
)

TOKENS = ("ak-altarfaketoken0000000", "as-altarfakesecret000000")


@pytest.fixture
def plane(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[ControlPlane]:
    with ControlPlane() as control:
        control.servicer.tokens = TOKENS
        monkeypatch.setenv("MODAL_SERVER_URL", control.url)
        monkeypatch.setenv("MODAL_SANDBOX_V2", "0")
        monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.modal.toml
        monkeypatch.delenv("MODAL_TOKEN_ID", raising=False)
        monkeypatch.delenv("MODAL_TOKEN_SECRET", raising=False)
        monkeypatch.delenv("MODAL_PROFILE", raising=False)
        yield control


def _backend(volume: str) -> ModalExecutionBackend:
    return ModalExecutionBackend(runtime=ModalSdkRuntime(), volume_name=volume)


async def _forget_env_client() -> None:
    """Close the process-wide client ``ModalSdkRuntime()`` made (it also forgets it)."""
    try:
        client = await modal.Client.from_env.aio()
    except modal.exception.AuthError:
        return  # no credentials: none was made
    await client.close.aio()


def _login(monkeypatch: pytest.MonkeyPatch, token_id: str, secret: str) -> None:
    monkeypatch.setenv("MODAL_TOKEN_ID", token_id)
    monkeypatch.setenv("MODAL_TOKEN_SECRET", secret)


@pytest.mark.asyncio
async def test_an_existing_volume_with_good_credentials_passes_and_creates_nothing(
    plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    _login(monkeypatch, *TOKENS)
    plane.servicer.volume_ids["altar-data"] = "vo-existing"
    plane.servicer.volumes["vo-existing"] = {}
    try:
        assert await _backend("altar-data").check_backend() == []
        problems = await _backend("typo-data").check_backend()
    finally:
        await _forget_env_client()
    assert problems == [
        (
            "volume_name",
            "Modal volume 'typo-data' does not exist (a run would create it empty); create it "
            "(modal volume create typo-data) or set volume_name to the one with your data",
        )
    ]
    assert sorted(plane.servicer.volume_ids) == ["altar-data"]  # the lookup created nothing
    assert "SandboxCreate" not in plane.servicer.rpcs


@pytest.mark.asyncio
async def test_missing_or_refused_credentials_are_one_problem(
    plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    ((option, text),) = await _backend("altar-data").check_backend()  # no token at all
    assert option == ""
    assert text.startswith("Modal refused the credentials (Token missing.")
    assert "run `modal token new` or set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET" in text
    _login(monkeypatch, TOKENS[0], "as-wrongsecret0000000000")
    try:
        ((option, text),) = await _backend("altar-data").check_backend()
    finally:
        await _forget_env_client()
    assert (option, text.split(";")[0]) == ("", "Modal refused the credentials (Invalid token)")
    assert not plane.servicer.volume_ids


def test_altar_check_prints_each_modal_problem_as_one_line(
    plane: ControlPlane, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _login(monkeypatch, *TOKENS)
    plan = tmp_path / "plan.toml"
    plan.write_text(
        '[backend]\ntype = "modal"\n\n[backend.options]\nvolume_name = "typo-data"\n\n'
        '[[tasks]]\nid = "t"\nkind = "k"\nimage = "busybox"\ncommand = ["true"]\n'
    )
    altar = shutil.which("altar", path=os.path.dirname(sys.executable)) or "altar"

    def check() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [altar, "check", str(plan)], capture_output=True, text=True, timeout=120, check=False
        )

    done = check()
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"altar: error: {plan}: backend.options.volume_name: Modal volume 'typo-data' does not "
        "exist (a run would create it empty); create it (modal volume create typo-data) or set "
        "volume_name to the one with your data"
    ]
    monkeypatch.delenv("MODAL_TOKEN_ID")
    done = check()
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"altar: error: {plan}: backend: Modal refused the credentials (")
