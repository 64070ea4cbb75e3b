"""The packaged ``adapter`` dispatcher: the isolated start run_adapter asks for, or the plain."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from httk.workflow.adapters import add_remote, run_adapter
from httk.workflow.adapters import run as run_module

TEMPLATES = Path(run_module.__file__).parent / "templates"
KINDS = ("local", "local-slurm", "ssh-slurm")
PROBE = """import json, sys
print(json.dumps({"format": "httk-computer-result", "format_version": 1, "operation": "invoke",
    "ok": True, "argv": sys.argv, "no_site": sys.flags.no_site, "isolated": sys.flags.isolated,
    "site_loaded": "site" in sys.modules}))
"""


def _fake_runtime(root: Path) -> Path:
    """An import root whose adapter_runtime reports how the interpreter was started."""
    package = root / "httk" / "workflow" / "adapter_runtime"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        f"def main():\n    exec({PROBE!r})\n    return 0\n"
        "def run_isolated():\n    raise SystemExit(main())\n"
    )
    (package / "__main__.py").write_text("from . import main\nmain()\n")
    return root


def _run_template(
    kind: str, environment: dict[str, str], cwd: Path, *arguments: str
) -> dict[str, object]:
    completed = subprocess.run(
        [str(TEMPLATES / kind / "adapter"), *arguments],
        env=environment,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    document: dict[str, object] = json.loads(completed.stdout)
    return document


@pytest.mark.parametrize("kind", KINDS)
def test_an_import_root_starts_the_runtime_isolated_from_there(kind: str, tmp_path: Path) -> None:
    root = _fake_runtime(tmp_path / "root with space")
    hostile = "$(touch pwned) 'a b'\n"
    environment = {
        "PATH": os.environ["PATH"],
        "HTTK_ADAPTER_PYTHON": sys.executable,
        "HTTK_ADAPTER_IMPORT_ROOT": str(root),
        # Ignored under -I: it must not decide what is imported.
        "PYTHONPATH": str(tmp_path / "elsewhere"),
    }
    result = _run_template(kind, environment, tmp_path, hostile, "second")
    assert (result["no_site"], result["isolated"]) == (1, 1)
    assert result["site_loaded"] is False
    assert result["argv"] == ["-c", hostile, "second"]
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("kind", KINDS)
def test_without_an_import_root_python3_on_path_runs_the_runtime(kind: str, tmp_path: Path) -> None:
    # HTTK_ADAPTER_PYTHON unset, as when httk-workflow itself runs a bundle: the plain
    # python3 on PATH imports the runtime the usual way (here through PYTHONPATH).
    root = _fake_runtime(tmp_path / "root")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    environment = {"PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHONPATH": str(root)}
    result = _run_template(kind, environment, tmp_path, "REQUEST.json")
    assert (result["no_site"], result["isolated"]) == (0, 0)
    assert result["argv"][1:] == ["REQUEST.json"]


def test_run_adapter_names_the_import_root_only_for_its_own_interpreter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("HTTK_ADAPTER_PYTHON", raising=False)
    monkeypatch.setenv("HTTK_ADAPTER_IMPORT_ROOT", "/stale")
    environment = run_module._child_environment()
    assert environment["HTTK_ADAPTER_PYTHON"] == sys.executable
    root = Path(environment["HTTK_ADAPTER_IMPORT_ROOT"])
    assert (root / "httk" / "workflow" / "adapter_runtime" / "__init__.py").is_file()
    # Another interpreter chosen by the user finds its own runtime.
    monkeypatch.setenv("HTTK_ADAPTER_PYTHON", "/opt/other/python3")
    environment = run_module._child_environment()
    assert environment["HTTK_ADAPTER_PYTHON"] == "/opt/other/python3"
    assert "HTTK_ADAPTER_IMPORT_ROOT" not in environment


def test_the_real_chain_runs_isolated_and_returns_one_result(env) -> None:
    bundle = add_remote("here", template="local", project=env.project)
    argv = [
        sys.executable,
        "-c",
        "import sys; print(sys.flags.isolated, sys.argv[1:])",
        "a b",
        "$(x)",
    ]
    result = run_adapter(bundle, "invoke", {"queue": "default", "argv": argv})
    # The command itself starts normally: the runtime's -I -S are not passed on.
    assert result["stdout"] == "0 ['a b', '$(x)']\n"
    assert result["returncode"] == 0


def test_an_adapter_that_closes_its_pipes_still_times_out(tmp_path: Path, make_bundle) -> None:
    script = f"#!/bin/sh\nexec >&- 2>&-\necho $$ > {tmp_path}/pid\nexec sleep 300\n"
    bundle = make_bundle(tmp_path, script, timeout_seconds=0.5)
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"^adapter invoke exceeded 0.5 seconds$"):
        run_adapter(bundle, "invoke", {})
    assert time.monotonic() - started < 10
    pid = int((tmp_path / "pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_the_isolated_runtime_reports_crashes_and_flushes_large_results(
    env, tmp_path: Path
) -> None:
    environment = {
        "PATH": os.environ["PATH"],
        "HTTK_ADAPTER_PYTHON": sys.executable,
        "HTTK_ADAPTER_IMPORT_ROOT": run_module._IMPORT_ROOT,
    }
    malformed = tmp_path / "request.json"
    malformed.write_text('{"operation": ')
    crashed = subprocess.run(
        [str(TEMPLATES / "local" / "adapter"), str(malformed)],
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )
    assert crashed.returncode == 2
    assert crashed.stderr.startswith("adapter dispatcher: ")
    assert crashed.stdout == ""
    bundle = add_remote("big", template="local", project=env.project)
    argv = [sys.executable, "-c", "import sys; sys.stdout.write('x' * 300000 + '\\n')"]
    result = run_adapter(bundle, "invoke", {"queue": "default", "argv": argv})
    assert result["stdout"] == "x" * 300000 + "\n"


def test_a_bundle_written_for_the_reference_release_still_works(env, make_bundle) -> None:
    # Its dispatcher ignores HTTK_ADAPTER_IMPORT_ROOT: the python3 on PATH runs the module.
    reference = '#!/bin/sh\nexec python3 -m httk.workflow.adapter_runtime "$@"\n'
    bundle = make_bundle(env.root, reference, name="v1", kind="local", timeout_seconds=60)
    argv = [sys.executable, "-c", "import sys; print(sys.flags.no_site, sys.argv[1:])", "a b"]
    result = run_adapter(bundle, "invoke", {"queue": "default", "argv": argv})
    assert result["stdout"] == "0 ['a b']\n"
    source = env.root / "source dir"
    source.mkdir()
    (source / "f.txt").write_text("payload")
    pushed = run_adapter(
        bundle, "push", {"source": str(source), "destination": str(env.root / "copy")}
    )
    assert Path(pushed["path"], "f.txt").read_text() == "payload"
