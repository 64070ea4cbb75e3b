"""The maintained runtime's local and local-slurm kinds, driven through run_adapter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from httk.workflow.adapters import ADAPTER_OPERATIONS, add_remote, run_adapter

HOSTILE = [
    "a b",
    "$HOME",
    "`id`",
    "'single'",
    '"double"',
    "semi;colon",
    "star*",
    "new\nline",
    "back\\slash",
    "$(touch SENTINEL)",
    "value; touch SENTINEL",
    "",
]
PRINT_ARGV = ["python3", "-c", "import json, sys; print(json.dumps(sys.argv[1:]))"]


@pytest.fixture
def local(env, set_queue) -> Path:
    bundle = add_remote("local", template="local")
    set_queue(bundle, workspace=str(env.root / "ws"))
    return bundle


def test_invoke_passes_hostile_argv_unchanged(env, local: Path) -> None:
    result = run_adapter(local, "invoke", {"queue": "default", "argv": [*PRINT_ARGV, *HOSTILE]})
    assert result["ok"] is True
    assert result["returncode"] == 0
    assert json.loads(result["stdout"]) == HOSTILE
    assert not list(env.root.rglob("SENTINEL"))


def test_nonzero_returncode_is_still_ok(local: Path) -> None:
    result = run_adapter(local, "invoke", {"queue": "default", "argv": ["false"]})
    assert (result["ok"], result["returncode"]) == (True, 1)


def test_cwd_for_invoke_only(env, local: Path) -> None:
    spaced = env.root / "a directory"
    spaced.mkdir()
    invoked = run_adapter(
        local, "invoke", {"queue": "default", "argv": ["pwd"], "cwd": str(spaced)}
    )
    assert invoked["stdout"].strip() == str(spaced)
    status = run_adapter(local, "status", {"queue": "default", "argv": ["pwd"], "cwd": str(spaced)})
    assert status["stdout"].strip() != str(spaced)


def test_missing_program_is_a_crash(local: Path) -> None:
    with pytest.raises(RuntimeError, match=r"adapter invoke failed \(2\): adapter invoke: "):
        run_adapter(local, "invoke", {"queue": "default", "argv": ["no-such-program-xyz"]})
    with pytest.raises(RuntimeError, match="invoke argv must be a nonempty string array"):
        run_adapter(local, "invoke", {"queue": "default", "argv": []})


def test_httk_command_rewrites_a_leading_httk(env, local: Path, set_queue) -> None:
    set_queue(local, httk_command=f"{sys.executable} -c 'import sys; print(sys.argv[1:])'")
    result = run_adapter(local, "invoke", {"queue": "default", "argv": ["httk", "x y"]})
    assert result["stdout"].strip() == "['x y']"


def _tree(root: Path) -> Path:
    files = root / "files"
    files.mkdir(parents=True)
    (files / "runner").write_text("#!/bin/sh\n")
    (files / "runner").chmod(0o750)
    (files / "data with spaces.txt").write_text("payload")
    (root / "link").symlink_to("files/runner")
    manifest = root / ".httk-transfer" / "manifest.json"
    manifest.parent.mkdir()
    manifest.write_text('{"id": 1}')
    return root


def test_local_push_copies_and_is_idempotent_only_for_the_same_manifest(env, local: Path) -> None:
    source = _tree(env.root / "src")
    destination = env.root / "deep" / "dest"
    request = {"queue": "default", "source": str(source), "destination": str(destination)}
    assert run_adapter(local, "push", request)["path"] == str(destination)
    assert (destination / "files" / "data with spaces.txt").read_text() == "payload"
    assert (destination / "files" / "runner").stat().st_mode & 0o777 == 0o750
    assert os.readlink(destination / "link") == "files/runner"
    assert run_adapter(local, "pull", request)["path"] == str(destination)
    (source / ".httk-transfer" / "manifest.json").write_text('{"id": 2}')
    with pytest.raises(RuntimeError, match=r"failed \(2\): adapter push: .*dest"):
        run_adapter(local, "push", request)


def test_local_files_batch_and_relative_destination(env, local: Path) -> None:
    source = _tree(env.root / "src")
    request = {
        "queue": "default",
        "source": str(source),
        "destination": "out",
        "files": ["files/data with spaces.txt"],
    }
    result = run_adapter(local, "push", request)
    assert result["path"] == str((env.project / "out").resolve())
    assert sorted(p.name for p in (env.project / "out").rglob("*")) == [
        "data with spaces.txt",
        "files",
    ]
    for bad in (["../secret"], ["/etc/passwd"], ["a/../../b"]):
        with pytest.raises(RuntimeError, match="not workspace relative"):
            run_adapter(local, "push", {**request, "files": bad})
    with pytest.raises(RuntimeError, match="transfer requires nonempty source and destination"):
        run_adapter(local, "push", {"queue": "default", "source": "", "destination": "x"})


def test_local_single_file_and_missing_source(env, local: Path) -> None:
    (env.root / "one").write_text("1")
    run_adapter(
        local, "push", {"source": str(env.root / "one"), "destination": str(env.root / "a/b")}
    )
    assert (env.root / "a" / "b").read_text() == "1"
    with pytest.raises(RuntimeError, match="adapter pull: "):
        run_adapter(local, "pull", {"source": str(env.root / "none"), "destination": "x"})


def test_local_files_batch_with_a_symlink_can_be_repeated(env, local: Path) -> None:
    source = _tree(env.root / "src")
    (source / "files" / "alias").symlink_to("runner")
    files = ["files/runner", "files/alias"]
    request = {"source": str(source), "destination": str(env.root / "out"), "files": files}
    for _ in range(2):  # repeating a transfer is how an interrupted one is resumed
        assert run_adapter(local, "push", request)["ok"] is True
    assert os.readlink(env.root / "out" / "files" / "alias") == "runner"
    assert (env.root / "out" / "files" / "runner").read_text() == "#!/bin/sh\n"


def test_an_interrupted_file_copy_keeps_the_previous_file(env, monkeypatch) -> None:
    import shutil

    from httk.workflow.adapter_runtime.transfer import copy_local

    source, destination = env.root / "new", env.root / "dest" / "data"
    source.write_text("new contents, " * 1000)
    destination.parent.mkdir()
    destination.write_text("previous")
    (destination.parent / "f").write_text("previous f")
    (env.root / "tree").mkdir()
    (env.root / "tree" / "f").write_text("new f, " * 1000)

    def interrupted(src, dst, *, follow_symlinks=True):  # type: ignore[no-untyped-def]
        with open(dst, "w") as handle:  # half the bytes, then the copy dies
            handle.write(Path(src).read_text()[:100])
        raise OSError("No space left on device")

    monkeypatch.setattr(shutil, "copyfile", interrupted)
    with pytest.raises(OSError, match="No space left"):
        copy_local(source, destination)
    with pytest.raises(OSError, match="No space left"):
        copy_local(env.root / "tree", destination.parent, ["f"])
    assert destination.read_text() == "previous"
    assert (destination.parent / "f").read_text() == "previous f"
    assert sorted(p.name for p in destination.parent.iterdir()) == ["data", "f"]


def test_configure_and_install_local(env, local: Path, set_queue) -> None:
    configured = run_adapter(local, "configure", {"queue": "default", "settings": {}})
    assert configured["configured"] is True
    assert "connectivity" not in configured
    with pytest.raises(RuntimeError, match="workers must be a positive integer: '0'"):
        run_adapter(local, "configure", {"queue": "default", "settings": {"workers": "0"}})
    with pytest.raises(RuntimeError, match="httk-workflow is not available on the target"):
        run_adapter(local, "install", {"queue": "default"})
    fake = env.install("httk", "#!/bin/sh\n[ \"$1\" = --version ] && echo 'httk 2.0.0'\nexit 0\n")
    installed = run_adapter(local, "install", {"queue": "default"})
    assert installed["installed"] is True
    assert installed["bootstrapped"] is False
    assert installed["httk_command"] == ["httk"]
    assert installed["httk_version"] == "httk 2.0.0"
    assert installed["workspace_created"] is True
    assert (env.root / "ws").is_dir()
    assert run_adapter(local, "install", {"queue": "default"})["workspace_created"] is False
    fake.unlink()


def test_pip_bootstrap_is_opt_in(env, local: Path, set_queue) -> None:
    log = env.root / "pip.log"
    real = sys.executable
    (env.bin / "python3").unlink()
    env.install(
        "python3",
        f'#!/bin/sh\nif [ "$1" = -m ] && [ "$2" = pip ]; then\n'
        f'  {real} -c "import json,sys; print(json.dumps(sys.argv[1:]))" "$@" >> {log}\n'
        "  exit 1\nfi\n"
        f'exec {real} "$@"\n',
    )
    with pytest.raises(RuntimeError, match="pipx install httk-workflow"):
        run_adapter(local, "install", {"queue": "default"})
    assert not log.exists()
    set_queue(local, bootstrap="pip")
    with pytest.raises(RuntimeError, match="pipx install httk-workflow"):
        run_adapter(local, "install", {"queue": "default"})
    first = json.loads(log.read_text().splitlines()[0])
    assert first == ["-m", "pip", "install", "--user", "httk-workflow"]


def test_local_start_manager_starts_detached_processes(env, local: Path, set_queue) -> None:
    marker = env.root / "started"
    set_queue(local, workers="3")
    argv = [
        "python3",
        "-c",
        f"import sys; open(r'{marker}-' + sys.argv[-1], 'w').write(' '.join(sys.argv[1:]))",
    ]
    argv.append("x")
    result = run_adapter(local, "start-manager", {"queue": "default", "argv": argv, "count": 2})
    assert result["count"] == 2
    assert len(result["pids"]) == 2
    assert result["pid"] == result["pids"][0]
    # Both detached processes truncate and write the same file: it may be briefly empty.
    written, expected = Path(f"{marker}-3"), "x --workers 3"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not (
        written.exists() and written.read_text() == expected
    ):
        time.sleep(0.05)
    assert written.read_text() == expected
    for bad in (0, True, "2"):
        with pytest.raises(RuntimeError, match="count must be a positive integer"):
            run_adapter(local, "start-manager", {"queue": "default", "argv": argv, "count": bad})


def test_local_slurm_start_manager(fake_cluster, set_queue) -> None:
    bundle = add_remote("batch", template="local-slurm")
    workspace = fake_cluster.root / "ws"
    set_queue(bundle, workspace=str(workspace), partition="devel", workers="2")
    result = run_adapter(
        bundle,
        "start-manager",
        {
            "queue": "default",
            "argv": ["httk", "workflow", "manager", "run", str(workspace)],
            "count": 2,
        },
    )
    assert result["job_ids"] == ["4201", "4202"]
    script = Path(result["script"])
    assert script.parent == workspace / ".httk-workflow" / "batch"
    text = script.read_text()
    assert "#SBATCH --partition=devel\n" in text
    assert f"exec httk workflow manager run {workspace} --workers 2\n" in text
    assert [entry["argv"] for entry in fake_cluster.spooled()] == [[str(script)]] * 2
    assert not fake_cluster.ssh_log.exists()


def test_unknown_kind_is_refused_for_every_operation(env, make_bundle) -> None:
    adapter = '#!/bin/sh\nexec python3 -m httk.workflow.adapter_runtime "$@"\n'
    bundle = make_bundle(env.root, adapter, kind="torque")
    destination = env.root / "never"
    for operation in ADAPTER_OPERATIONS:
        request: dict[str, object] = {}
        if operation in {"push", "pull"}:
            request = {"source": str(env.root), "destination": str(destination)}
        elif operation in {"invoke", "start-manager", "status"}:
            request = {"argv": ["true"]}
        with pytest.raises(RuntimeError, match="'torque' is not implemented") as caught:
            run_adapter(bundle, operation, request)
        assert "local, local-slurm, ssh-slurm" in str(caught.value)
    assert not destination.exists()


@pytest.mark.parametrize(
    ("arguments", "stdin_text", "message"),
    [
        ([], "", "adapter dispatcher expects one REQUEST.json path"),
        (["/nonexistent.json"], "", "adapter dispatcher: "),
        (["REQ"], "[]", "adapter request must carry a nonempty string operation"),
    ],
)
def test_dispatcher_crashes_on_a_malformed_call(
    tmp_path: Path, arguments, stdin_text, message
) -> None:
    request = tmp_path / "req.json"
    request.write_text(stdin_text)
    argv = [str(request) if a == "REQ" else a for a in arguments]
    completed = subprocess.run(
        [sys.executable, "-m", "httk.workflow.adapter_runtime", *argv],
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode == 2
    assert completed.stderr.startswith(message)
    assert completed.stdout == ""
