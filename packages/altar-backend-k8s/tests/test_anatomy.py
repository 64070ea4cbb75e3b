"""The package's shape: old import paths still work, the client loads lazily, errors have bases."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from altar.backends import kubernetes as k8s
from altar.backends.kubernetes import K8sApiError, K8sJobExistsError
from altar.execution import AltarError

SRC = Path(k8s.__file__).parent
#: Old module names kept for one release; ``runtime`` is the seam itself and re-exports errors.
SHIMS = ("client", "manifest", "jobs", "testing.fake_apiserver")


@pytest.mark.parametrize(
    ("old", "new", "names"),
    [
        ("client", "sdk_runtime", ["ClientRuntime"]),
        ("manifest", "render", ["render_manifest", "ManifestOptions", "manifest_digest"]),
        ("manifest", "values", ["MAIN_CONTAINER", "VERIFY_INPUTS_CONTAINER"]),
        ("jobs", "classify", ["classify_failure", "job_state"]),
        ("jobs", "wire", ["job_info_from_object", "pod_info_from_object"]),
        ("jobs", "values", ["K8sJobInfo", "K8sPodInfo", "ContainerExit", "JobCondition"]),
        ("runtime", "values", ["K8sJobExistsError", "K8sApiError", "K8sConfigError"]),
        ("runtime", "values", ["PropagationPolicy"]),
        ("testing.fake_apiserver", "testing.apiserver", ["FakeApiServer", "parse_selector"]),
    ],
)
def test_old_module_names_reexport_the_same_objects(old: str, new: str, names: list[str]) -> None:
    name = f"altar.backends.kubernetes.{old}"
    if old in SHIMS:  # a deprecated name warns each time it is first imported
        sys.modules.pop(name, None)
        with pytest.warns(DeprecationWarning, match=f"{name} is deprecated"):
            before = importlib.import_module(name)
    else:
        before = importlib.import_module(name)
    after = importlib.import_module(f"altar.backends.kubernetes.{new}")
    for name in names:
        assert getattr(before, name) is getattr(after, name), name


def test_the_client_is_imported_only_when_used() -> None:
    code = (
        "import sys\n"
        "import altar.backends.kubernetes, altar.backends.kubernetes.render\n"
        "import altar.backends.kubernetes.fake, altar.backends.kubernetes.sdk_runtime\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('kubernetes', 'yaml')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def _package_imports(path: Path) -> set[str]:
    imported = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
    return {m for m in imported if m.startswith("altar.backends.kubernetes")}


def test_the_leaf_and_the_seam_import_nothing_downstream() -> None:
    assert _package_imports(SRC / "values.py") == set()
    assert _package_imports(SRC / "runtime.py") == {"altar.backends.kubernetes.values"}
    assert _package_imports(SRC / "classify.py") == {"altar.backends.kubernetes.values"}


def test_the_pure_decisions_take_only_leaves() -> None:
    """The renderer and the adoption decision share names through the leaves, not each other."""
    leaves = {"altar.backends.kubernetes.values", "altar.backends.kubernetes.naming"}
    assert _package_imports(SRC / "render.py") == leaves
    assert _package_imports(SRC / "adoption.py") == leaves


def test_no_module_over_500_lines() -> None:
    for path in SRC.rglob("*.py"):
        assert len(path.read_text().splitlines()) <= 500, path


def test_a_job_that_exists_is_an_api_refusal_and_still_its_own_type() -> None:
    error = K8sJobExistsError("j", namespace="ns", detail="held", being_deleted=True)
    assert isinstance(error, K8sApiError)
    assert isinstance(error, RuntimeError)  # the runner reports it as submit_failed, as before
    assert not isinstance(error, ValueError)  # ... never as submit_rejected
    assert (error.status, error.reason) == (409, "AlreadyExists")
    assert (error.name, error.namespace, error.being_deleted) == ("j", "ns", True)
    assert not isinstance(error, AltarError)
    with pytest.raises(K8sJobExistsError):
        raise error


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
print(json.dumps({"row": rows["kubernetes"], "imported": "kubernetes" in sys.modules}))
"""


@pytest.mark.parametrize("hidden", [True, False])
def test_altar_backends_reports_a_missing_sdk_without_importing_it(hidden: bool) -> None:
    argv = [sys.executable, "-c", _BACKENDS_PROBE] + (["kubernetes"] if hidden else [])
    probe = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
    assert probe["imported"] is False
    row = probe["row"]
    if not hidden:
        assert (row["healthy"], row["error"]) == (True, None)
        return
    assert row["healthy"] is False
    assert row["error"].endswith(
        "cannot be imported: module 'kubernetes' is missing; pip install altar-backend-k8s"
    )


def test_a_missing_kubernetes_client_is_one_line_with_the_install_hint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Found out at construction, as the Modal backend does, not as a bare ModuleNotFoundError
    # from a worker thread on the first submit or poll.
    from altar.backends.kubernetes import KubernetesExecutionBackend
    from altar.execution import BackendImportError

    monkeypatch.setitem(sys.modules, "kubernetes", None)  # import kubernetes → ImportError
    with pytest.raises(BackendImportError, match="pip install altar-backend-k8s") as raised:
        KubernetesExecutionBackend()
    assert "\n" not in str(raised.value)
    assert "'kubernetes'" in str(raised.value)
