from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from httk.workflow import adapter_protocol, adapter_runtime
from httk.workflow import adapters as api
from httk.workflow.adapter_runtime import operations


def test_wire_names_keep_the_historical_spelling() -> None:
    assert api.ADAPTER_FORMAT == "httk-computer-adapter"
    assert api.REQUEST_FORMAT == "httk-computer-request"
    assert api.RESULT_FORMAT == adapter_runtime.RESULT_FORMAT == "httk-computer-result"
    assert api.ADAPTER_OPERATIONS == (
        "configure",
        "install",
        "invoke",
        "push",
        "pull",
        "start-manager",
        "status",
    )
    assert api.ADAPTER_EXECUTABLE == "adapter"
    assert api.METADATA_FILE == "remote.json"
    assert api.CREDENTIALS_FILE == "credentials.json"
    upstream = {
        "account",
        "bootstrap",
        "check_connectivity",
        "cpus_per_task",
        "host",
        "httk_command",
        "legacy_settings",
        "nodes",
        "partition",
        "port",
        "reservation",
        "time_limit",
        "username",
        "workers",
        "workspace",
    }
    assert upstream < api.PERSISTABLE_QUEUE_SETTINGS
    assert api.PERSISTABLE_QUEUE_SETTINGS - upstream == {"ssh_multiplex", "ssh_agent"}


def test_protocol_module_names_the_runtime_objects() -> None:
    assert adapter_protocol.main is adapter_runtime.main
    assert adapter_protocol.BATCH_DIRECTIVES is adapter_runtime.BATCH_DIRECTIVES
    assert adapter_protocol.SUPPORTED_KINDS == ("local", "local-slurm", "ssh-slurm")
    assert adapter_runtime.BATCH_DIRECTORY == ".httk-workflow/batch"
    assert "No shell" in (adapter_protocol.__doc__ or "")
    assert operations.BATCH_DIRECTIVES is adapter_runtime.BATCH_DIRECTIVES


def _valid(tmp_path: Path, make_bundle, **members: object) -> Path:
    return make_bundle(tmp_path, "#!/bin/sh\nexit 0\n", **members)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"format": "httk-remote-adapter"}, "must use httk-computer-adapter format version 1"),
        ({"format_version": 2}, "must use httk-computer-adapter format version 1"),
        ({"adapter_version": 2}, "unsupported remote adapter version: 2"),
        ({"adapter_version": None}, "unsupported remote adapter version: None"),
        ({"queues": {}}, "must configure at least one queue"),
        ({"queues": []}, "must configure at least one queue"),
        ({"queues": {"a": "b"}}, "queues must map names to objects"),
        ({"timeout_seconds": 0}, "timeout_seconds must be positive"),
        ({"timeout_seconds": True}, "timeout_seconds must be positive"),
        ({"timeout_seconds": "5"}, "timeout_seconds must be positive"),
        ({"required_binaries": "ssh"}, "required_binaries must be an array"),
        ({"required_binaries": [""]}, "entries must be nonempty strings"),
        (
            {"required_binaries": ["no-such-binary-xyz"]},
            "required adapter binary is unavailable: no-such-binary-xyz",
        ),
    ],
)
def test_validation_messages(tmp_path: Path, make_bundle, change, message) -> None:
    bundle = _valid(tmp_path, make_bundle, **change)
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        api.validate_adapter_bundle(bundle)


def test_validation_checks_the_adapter_executable(tmp_path: Path, make_bundle) -> None:
    bundle = _valid(tmp_path, make_bundle)
    assert api.validate_adapter_bundle(bundle)["format"] == "httk-computer-adapter"
    (bundle / "adapter").chmod(0o644)
    with pytest.raises(ValueError, match="adapter executable is not runnable"):
        api.validate_adapter_bundle(bundle)
    (bundle / "adapter").unlink()
    with pytest.raises(ValueError, match="adapter executable is not runnable"):
        api.validate_adapter_bundle(bundle)


def test_validation_reads_any_json_formatting_and_refuses_non_objects(
    tmp_path: Path, make_bundle
) -> None:
    bundle = _valid(tmp_path, make_bundle)
    document = json.loads((bundle / "remote.json").read_text())
    (bundle / "remote.json").write_text(json.dumps(document, indent=7))
    api.validate_adapter_bundle(bundle)
    (bundle / "remote.json").write_text("[]")
    with pytest.raises(ValueError, match="adapter JSON must be an object"):
        api.validate_adapter_bundle(bundle)
    (bundle / "remote.json").write_text("{")
    with pytest.raises(ValueError, match="cannot read adapter JSON"):
        api.validate_adapter_bundle(bundle)


def test_split_remote() -> None:
    assert api.split_remote("a") == ("a", None)
    assert api.split_remote("a:b:c") == ("a", "b:c")
    with pytest.raises(ValueError, match="remote name cannot be empty"):
        api.split_remote(":q")
    with pytest.raises(ValueError, match="queue name cannot be empty"):
        api.split_remote("a:")


def test_templates_and_add_remote(env) -> None:
    for template in ("local", "ssh-slurm"):
        bundle = api.add_remote(f"r-{template}", template=template)
        assert bundle == env.project / ".httk-project" / "remotes" / f"r-{template}"
        # .gitignore keeps credentials.json out of the project's repository.
        assert sorted(p.name for p in bundle.iterdir()) == [".gitignore", "adapter", "remote.json"]
        assert stat.S_IMODE((bundle / "adapter").stat().st_mode) == 0o755
        assert api.read_metadata(bundle)["kind"] == template
    assert (
        api.read_metadata(env.project / ".httk-project/remotes/r-ssh-slurm")["timeout_seconds"]
        == 300
    )
    with pytest.raises(FileExistsError):
        api.add_remote("r-local", template="local")
    for bad in ("", "a/b", ".", ".."):
        with pytest.raises(ValueError, match="invalid remote name"):
            api.add_remote(bad, template="local")
    with pytest.raises(ValueError, match="unknown maintained remote template: pbs"):
        api.add_remote("x", template="pbs")


def test_add_remote_needs_a_project_unless_global(env, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with pytest.raises(ValueError, match="a project is required unless --global is used"):
        api.add_remote("x", template="local", project=elsewhere)
    bundle = api.add_remote("x", template="local", global_scope=True, project=elsewhere)
    assert bundle == Path(os.environ["HTTK_CONFIG_HOME"]).resolve() / "remotes" / "x"


def test_local_slurm_cannot_be_added_without_sbatch(env, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(env.bin))
    with pytest.raises(ValueError, match="required adapter binary is unavailable: sbatch"):
        api.add_remote("batch", template="local-slurm")
    assert not (env.project / ".httk-project/remotes/batch").exists()


def test_project_scope_shadows_global(env, set_queue) -> None:
    glob = api.add_remote("shared", template="local", global_scope=True)
    only_global = api.add_remote("elsewhere", template="local", global_scope=True)
    local = api.add_remote("shared", template="local")
    target = api.resolve_remote("shared")
    assert target == api.RemoteTarget("shared", "default", local, True)
    assert api.resolve_remote("elsewhere").project_local is False
    rows = api.list_remotes()
    assert rows == [
        {"name": "elsewhere", "scope": "global", "path": str(only_global)},
        {"name": "shared", "scope": "project", "path": str(local)},
    ]
    assert glob.is_dir()


def test_resolve_queue_choice(env, set_queue) -> None:
    bundle = api.add_remote("c", template="local")
    set_queue(bundle, "large", nodes="16")
    assert api.resolve_remote("c:large").queue == "large"
    with pytest.raises(ValueError, match="remote 'c' does not configure queue 'small'"):
        api.resolve_remote("c:small")
    (env.project / ".httk-project/project.json").write_text('{"default_queue": "large"}')
    assert api.resolve_remote("c").queue == "large"
    with pytest.raises(ValueError, match="unknown remote: nowhere"):
        api.resolve_remote("nowhere")


def test_resolve_validates_every_time(env) -> None:
    bundle = api.add_remote("c", template="local")
    (bundle / "adapter").chmod(0o600)
    with pytest.raises(ValueError, match="not runnable"):
        api.resolve_remote("c")


def test_import_v1_maps_without_running_anything(env, tmp_path: Path) -> None:
    legacy = tmp_path / "v1"
    legacy.mkdir()
    for name in ("command", "install", "push", "pull", "start-taskmgr"):
        (legacy / name).write_text("#!/bin/sh\ntouch should-not-run\n")
    (legacy / "config").write_text(
        '# v1\nLOCAL_HTTK_DIR="~/Httk-runs"\nVASP_COMMAND="value; touch should-not-run"\n'
    )
    (legacy / "config.big").write_text("TASKMGR_WORKERS=8\n")
    bundle = api.import_v1_remote(legacy, name="old")
    metadata = api.read_metadata(bundle)
    assert metadata["kind"] == "local"
    assert metadata["legacy_import"]["legacy_executables_copied"] is False
    assert metadata["queues"]["default"]["legacy_settings"]["VASP_COMMAND"] == (
        "value; touch should-not-run"
    )
    assert metadata["queues"]["default"]["workspace"] == "~/Httk-runs/Runs/default"
    assert metadata["queues"]["big"]["legacy_settings"]["TASKMGR_WORKERS"] == "8"
    assert not (bundle / "command").exists()
    assert not list(tmp_path.rglob("should-not-run"))
    (legacy / "config").write_text("X=$(id) ; rm -rf /\n")
    with pytest.raises(ValueError, match="not a simple assignment"):
        api.import_v1_remote(legacy, name="old2")
    (legacy / "config").write_text("X='unterminated\n")
    with pytest.raises(ValueError, match="unsafe legacy adapter configuration"):
        api.import_v1_remote(legacy, name="old3")
    (legacy / "config").write_text("REMOTE_HOST=login\nREMOTE_HTTK_DIR=/r\nUSERNAME=me\n")
    ssh = api.import_v1_remote(legacy, name="old4")
    row = api.read_metadata(ssh)["queues"]["default"]
    assert (row["host"], row["username"], row["workspace"]) == ("login", "me", "/r/Runs/default")
    (legacy / "pull").unlink()
    with pytest.raises(ValueError, match="recognized executable set"):
        api.import_v1_remote(legacy, name="old5")
