"""The package's shape: pure modules import without the modal SDK; old module names still work."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

_PROBE = """
import sys
import altar.backends.modal
from altar.backends.modal import backend, classify, fake, render, runtime, staging
from altar.backends.modal.fake import FakeModalRuntime
backend.ModalExecutionBackend(runtime=FakeModalRuntime())
loaded = sorted(m for m in sys.modules if m == "modal" or m.startswith(("modal.", "grpclib")))
print(",".join(loaded))
"""


def test_the_package_and_its_pure_modules_import_without_the_modal_sdk() -> None:
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True
    )
    assert probe.stdout.strip() == ""


def test_the_default_runtime_is_the_sdk_one() -> None:
    from altar.backends.modal import ModalExecutionBackend
    from altar.backends.modal.sdk_runtime import ModalSdkRuntime

    assert isinstance(ModalExecutionBackend().runtime, ModalSdkRuntime)


@pytest.mark.parametrize(
    ("old", "names"),
    [
        ("altar.backends.modal.mapping", ["sandbox_request", "status_from_result", "volume_path"]),
        ("altar.backends.modal.sdk", ["ModalSdkRuntime", "result_from_proto"]),
    ],
)
def test_old_module_names_keep_working_with_a_deprecation_warning(
    old: str, names: list[str]
) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match="deprecated"):
        module = importlib.import_module(old)
    for name in names:
        assert callable(getattr(module, name))


def test_a_missing_modal_sdk_is_one_line_with_the_install_hint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from altar.backends.modal import ModalExecutionBackend
    from altar.execution import BackendImportError

    monkeypatch.setitem(sys.modules, "modal", None)  # import modal → ImportError
    monkeypatch.delitem(sys.modules, "altar.backends.modal.sdk_runtime", raising=False)
    with pytest.raises(BackendImportError, match="pip install altar-backend-modal") as raised:
        ModalExecutionBackend()
    assert "\n" not in str(raised.value)


_BACKENDS_PROBE = """
import contextlib, importlib.abc, io, json, sys
from altar.execution.cli.command import main

class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in sys.argv[1:]:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Hide())
out = io.StringIO()
with contextlib.redirect_stdout(out):
    main(["backends", "--json"])
rows = {row["name"]: row for row in json.loads(out.getvalue())}
print(json.dumps({"row": rows["modal"], "imported": "modal" in sys.modules}))
"""


@pytest.mark.parametrize("hidden", [True, False])
def test_altar_backends_reports_a_missing_sdk_without_importing_it(hidden: bool) -> None:
    argv = [sys.executable, "-c", _BACKENDS_PROBE] + (["modal"] if hidden else [])
    probe = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
    assert probe["imported"] is False
    row = probe["row"]
    if not hidden:
        assert (row["healthy"], row["error"]) == (True, None)
        return
    assert row["healthy"] is False
    assert row["error"].endswith(
        "cannot be imported: module 'modal' is missing; pip install altar-backend-modal"
    )
