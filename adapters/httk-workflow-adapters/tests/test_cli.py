from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from httk.workflow.adapters import queue_settings, resolve_remote
from httk.workflow.adapters.cli import main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_add_list_show_remove(env, capsys) -> None:
    code, out, _ = run(capsys, "remote", "add", "cluster", "--template", "local")
    bundle = env.project / ".httk-project" / "remotes" / "cluster"
    assert (code, out) == (0, f"{bundle}\n")
    assert (bundle / "remote.json").is_file()
    assert not (bundle / "computer.json").exists()
    code, out, _ = run(capsys, "remote", "list", "--json")
    assert json.loads(out) == [
        {
            "name": "cluster",
            "scope": "project",
            "path": str(bundle),
            "kind": "local",
            "valid": True,
            "problem": None,
        }
    ]
    code, out, _ = run(capsys, "remote", "list")
    assert out.split() == ["cluster", "project", "local", "valid", str(bundle)]
    code, out, _ = run(capsys, "remote", "show", "cluster", "--json")
    shown = json.loads(out)
    assert (shown["name"], shown["scope"], shown["valid"], shown["kind"]) == (
        "cluster",
        "project",
        True,
        "local",
    )
    code, _, err = run(capsys, "remote", "remove", "cluster")
    assert code == 2
    assert "requires --force" in err
    code, out, _ = run(capsys, "remote", "remove", "cluster", "--force", "--json")
    assert json.loads(out)["removed"] is True
    assert not bundle.exists()
    code, out, err = run(capsys, "remote", "show", "cluster")
    assert (code, out) == (2, "")
    assert err == "httk-workflow: unknown remote: cluster\n"


@pytest.mark.parametrize("name", ["..", "../..", ".", "cluster/..", "../remotes/cluster", "/ABS"])
def test_remove_and_show_never_leave_the_remotes_directory(env, capsys, name: str) -> None:
    run(capsys, "remote", "add", "cluster", "--template", "local")
    run(capsys, "remote", "add", "shared", "--template", "local", "--global")
    (env.project / "precious").write_text("keep me")
    victim = env.root / "victim"
    (victim / "remote.json").parent.mkdir()
    (victim / "remote.json").write_text("{}")
    name = name.replace("/ABS", str(victim))
    code, out, err = run(capsys, "remote", "remove", name, "--force")
    assert (code, out) == (2, "")
    assert err == "httk-workflow: invalid remote name\n"
    code, out, err = run(capsys, "remote", "show", name)
    assert (code, out, err) == (2, "", "httk-workflow: invalid remote name\n")
    assert (env.project / "precious").read_text() == "keep me"
    assert (victim / "remote.json").is_file()
    assert resolve_remote("cluster").bundle.is_dir()
    assert resolve_remote("shared").bundle.is_dir()


def test_adding_an_existing_remote_says_so(env, capsys) -> None:
    run(capsys, "remote", "add", "cluster", "--template", "local")
    bundle = env.project / ".httk-project" / "remotes" / "cluster"
    code, out, err = run(capsys, "remote", "add", "cluster", "--template", "ssh-slurm")
    assert (code, out) == (2, "")
    assert err == f"httk-workflow: remote 'cluster' already exists: {bundle}\n"


def test_global_add_and_non_interactive_template(env, capsys) -> None:
    code, out, _ = run(capsys, "remote", "add", "shared", "--template", "ssh-slurm", "--global")
    assert code == 0
    assert out.strip().endswith("config/remotes/shared")
    code, _, err = run(capsys, "remote", "add", "other", "--non-interactive")
    assert code == 2
    assert err == (
        "httk-workflow: missing required value 'adapter template' in non-interactive operation\n"
    )


def test_configure_splits_settings_and_never_shows_secrets(env, capsys) -> None:
    run(capsys, "remote", "add", "local", "--template", "local")
    code, out, err = run(
        capsys,
        "remote",
        "configure",
        "local",
        "--set",
        "password=hunter2",
        "--set",
        "token=abc",
        "--set",
        "workspace=/w",
        "--json",
    )
    assert code == 0
    assert json.loads(out)["configured"] is True
    assert "password, token" in err
    assert "credentials.json" in err
    assert "manifest" in err
    assert "hunter2" not in err + out
    bundle = resolve_remote("local").bundle
    assert json.loads((bundle / "remote.json").read_text())["queues"]["default"] == {
        "workspace": "/w"
    }
    credentials = bundle / "credentials.json"
    assert json.loads(credentials.read_text()) == {
        "default": {"password": "hunter2", "token": "abc"}
    }
    assert stat.S_IMODE(credentials.stat().st_mode) == 0o600
    assert stat.S_IMODE((bundle / "remote.json").stat().st_mode) == 0o644
    assert queue_settings(bundle, "default") == {
        "password": "hunter2",
        "token": "abc",
        "workspace": "/w",
    }
    code, out, _ = run(capsys, "remote", "show", "local")
    assert "  password=<credential>" in out
    assert "  workspace=/w" in out
    assert "hunter2" not in out
    code, out, _ = run(capsys, "remote", "show", "local", "--json")
    shown = json.loads(out)["queues"]["default"]
    assert shown["credential_keys"] == ["password", "token"]
    assert shown["settings_source"] == {
        "password": "credentials.json",
        "token": "credentials.json",
        "workspace": "remote.json",
    }
    assert "hunter2" not in out


def test_nothing_is_stored_when_configure_fails(env, capsys) -> None:
    run(capsys, "remote", "add", "local", "--template", "local")
    code, out, err = run(
        capsys, "remote", "configure", "local", "--set", "workers=0", "--set", "secret=s3"
    )
    assert code == 2
    assert out == ""
    assert err.startswith("httk-workflow: adapter configure failed (2): ")
    assert err.count("\n") == 1
    bundle = resolve_remote("local").bundle
    assert not (bundle / "credentials.json").exists()
    assert json.loads((bundle / "remote.json").read_text())["queues"]["default"] == {}
    code, _, err = run(capsys, "remote", "configure", "local", "--set", "novalue")
    assert code == 2
    assert "adapter setting must use KEY=VALUE: 'novalue'" in err


def test_install_never_persists(env, capsys) -> None:
    env.install("httk", "#!/bin/sh\necho httk 2.0.0\n")
    run(capsys, "remote", "add", "local", "--template", "local")
    code, out, _ = run(capsys, "remote", "install", "local", "--set", "token=x")
    assert code == 0
    assert "installed" in out
    assert not (resolve_remote("local").bundle / "credentials.json").exists()


def test_transfer_invoke_status_push_pull(env, capsys, tmp_path: Path) -> None:
    run(capsys, "remote", "add", "local", "--template", "local")
    code, out, _ = run(
        capsys,
        "transfer",
        "invoke",
        "local",
        "--",
        "python3",
        "-c",
        "import sys; print(sys.argv[1:]); sys.exit(3)",
        "$(id)",
    )
    assert (code, out) == (3, "['$(id)']\n")
    code, out, _ = run(capsys, "transfer", "invoke", "local", "--json", "--", "true")
    assert json.loads(out)["returncode"] == 0
    code, _, err = run(capsys, "transfer", "status", "local")
    assert code == 2
    assert "remote workspace is missing" in err
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a b").write_text("x")
    (tmp_path / "src" / "c").write_text("y")
    code, out, _ = run(
        capsys,
        "transfer",
        "push",
        "local",
        str(tmp_path / "src"),
        str(tmp_path / "dst"),
        "--file",
        "a b",
    )
    assert out == f"{tmp_path / 'dst'}\n"
    assert sorted(p.name for p in (tmp_path / "dst").iterdir()) == ["a b"]
    code, out, _ = run(
        capsys, "transfer", "pull", "local", str(tmp_path / "src"), str(tmp_path / "back"), "--json"
    )
    assert json.loads(out)["path"] == str(tmp_path / "back")


def test_start_manager_options(fake_cluster, capsys, set_queue) -> None:
    run(capsys, "remote", "add", "cluster", "--template", "ssh-slurm")
    bundle = resolve_remote("cluster").bundle
    set_queue(
        bundle,
        host="fake.example.test",
        workspace=str(fake_cluster.root / "remote/ws"),
        workers="4",
    )
    code, out, _ = run(capsys, "transfer", "start-manager", "cluster", "--count", "2", "--json")
    result = json.loads(out)
    assert code == 0
    assert result["count"] == 2
    assert len(result["job_ids"]) == 2
    assert "--workers 4" in Path(result["script"]).read_text()
    code, out, _ = run(capsys, "transfer", "start-manager", "cluster", "--workers", "1")
    assert code == 0
    assert out.startswith("submitted 1 manager job(s): 4203")
    assert len(fake_cluster.spooled()) == 3
    code, _, err = run(capsys, "transfer", "start-manager", "cluster", "--count", "0")
    assert code == 2
    assert "--count must be a positive integer" in err


def test_timeout_option_and_unknown_kind_error_is_one_line(env, capsys, make_bundle) -> None:
    remotes = env.project / ".httk-project" / "remotes"
    make_bundle(
        remotes,
        '#!/bin/sh\nexec python3 -m httk.workflow.adapter_runtime "$@"\n',
        name="remote",
        kind="torque",
        queues={"default": {"workspace": "/remote/runs"}},
    )
    code, out, err = run(capsys, "transfer", "status", "remote")
    assert code == 2
    assert out == ""
    assert "is not implemented" in err
    assert "Traceback" not in err
    assert err.count("\n") == 1
    make_bundle(remotes, "#!/bin/sh\nsleep 30\n", name="slow")
    code, _, err = run(capsys, "transfer", "invoke", "slow", "--adapter-timeout", "0.3", "--", "x")
    assert (code, err) == (2, "httk-workflow: adapter invoke exceeded 0.3 seconds\n")


MINIMAL = """#!python
import json, sys
request = json.load(open(sys.argv[1]))
values = {"push": {}, "start-manager": {"job_ids": ["17"]}, "configure": {"checked": [1, True]}}
print(json.dumps({"format": "httk-computer-result", "format_version": 1, "ok": True,
                  "operation": request["operation"], **values[request["operation"]]}))
"""


def test_sparse_results_of_a_custom_adapter_are_reported_not_tracebacks(
    env, capsys, make_bundle
) -> None:
    remotes = env.project / ".httk-project" / "remotes"
    make_bundle(remotes, MINIMAL, name="site", queues={"default": {"workspace": "/ws"}})
    code, out, err = run(capsys, "transfer", "push", "site", "a", "b")
    assert (code, out) == (2, "")
    assert err == "httk-workflow: adapter push reported no path\n"
    code, out, err = run(capsys, "transfer", "start-manager", "site")
    assert (code, out, err) == (0, "submitted 1 manager job(s): 17\n", "")
    code, out, err = run(capsys, "remote", "configure", "site")
    assert (code, out, err) == (0, "checked               1 True\n", "")


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP"])
def test_a_terminated_cli_takes_its_adapter_and_request_file_with_it(
    env, make_bundle, signame: str
) -> None:
    import os
    import signal
    import time

    remotes = env.project / ".httk-project" / "remotes"
    script = f'#!/bin/sh\ncp "$1" {env.root}/request-copy\necho "$1" > {env.root}/request-path\n'
    script += f"sleep 300 &\necho $! > {env.root}/pid\nwait\n"
    make_bundle(remotes, script, name="slow")
    store = {"HTTK_CONFIG_HOME": str(env.root / "config"), "TMPDIR": str(env.root)}
    cli = subprocess.Popen(
        [sys.executable, "-m", "httk.workflow.adapters", "transfer", "invoke", "slow", "--", "x"],
        env={**os.environ, **store},
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while not (env.root / "pid").is_file() or not (env.root / "pid").read_text().strip():
        assert time.monotonic() < deadline
        assert cli.poll() is None
        time.sleep(0.05)
    sleeper = int((env.root / "pid").read_text())
    request = Path((env.root / "request-path").read_text().strip())
    cli.send_signal(getattr(signal, signame))
    _, err = cli.communicate(timeout=30)
    assert cli.returncode == 128 + getattr(signal, signame)
    assert err == "httk-workflow: terminated\n"
    assert not request.exists()
    deadline = time.monotonic() + 5  # SIGKILLed, possibly not yet reaped by init
    while Path(f"/proc/{sleeper}").exists() and time.monotonic() < deadline:
        if "\nState:\tZ" in Path(f"/proc/{sleeper}/status").read_text():
            break
        time.sleep(0.05)
    else:
        assert not Path(f"/proc/{sleeper}").exists(), "the adapter's command outlived the CLI"


def test_bare_groups_print_help_and_bad_spellings_fail(capsys) -> None:
    assert main(["remote"]) == 0
    assert "list" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exited:
        main(["transfer", "status", "x", "--timeout", "5"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "unrecognized arguments: --timeout 5" in err
    with pytest.raises(SystemExit):
        main(["computer", "list"])


def test_module_form_runs_the_same_cli(env) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "httk.workflow.adapters", "remote", "list", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(completed.stdout) == []


def test_show_describes_an_invalid_bundle(env, capsys) -> None:
    run(capsys, "remote", "add", "broken", "--template", "local")
    bundle = resolve_remote("broken").bundle
    (bundle / "adapter").chmod(0o644)
    code, out, _ = run(capsys, "remote", "show", "broken", "--json")
    shown = json.loads(out)
    assert code == 0
    assert shown["valid"] is False
    assert "adapter executable is not runnable" in shown["problem"]
    code, out, _ = run(capsys, "remote", "show", "broken")
    assert "valid                 no: adapter executable is not runnable" in out


@pytest.mark.parametrize("binaries", [5, [1, "ssh"], "ssh", {"a": 1}])
def test_show_describes_a_bundle_with_malformed_members(env, capsys, binaries) -> None:
    run(capsys, "remote", "add", "odd", "--template", "local")
    bundle = resolve_remote("odd").bundle
    metadata = json.loads((bundle / "remote.json").read_text())
    metadata.update(required_binaries=binaries, kind=["x"])
    (bundle / "remote.json").write_text(json.dumps(metadata))
    code, out, err = run(capsys, "remote", "show", "odd", "--json")
    assert (code, err) == (0, "")
    shown = json.loads(out)
    assert shown["valid"] is False
    assert "required_binaries" in shown["problem"]
    code, out, err = run(capsys, "remote", "show", "odd")
    assert (code, err) == (0, "")
    assert "valid                 no: required_binaries" in out


def test_import_v1_from_the_cli(env, capsys, tmp_path: Path) -> None:
    legacy = tmp_path / "v1"
    legacy.mkdir()
    for name in ("command", "install", "push", "pull", "start-taskmgr"):
        (legacy / name).write_text("#!/bin/sh\n")
    (legacy / "config").write_text("REMOTE_HOST=login.example.org\nUSERNAME=me\n")
    code, out, _ = run(capsys, "remote", "import-v1", str(legacy), "--name", "old")
    assert code == 0
    assert json.loads(Path(out.strip(), "remote.json").read_text())["kind"] == "ssh-slurm"


def test_protocol_module_is_a_working_dispatcher(env, tmp_path: Path) -> None:
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"operation": "invoke", "argv": ["echo", "a;b"]}))
    completed = subprocess.run(
        [sys.executable, "-m", "httk.workflow.adapter_protocol", str(request)],
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(completed.stdout)
    assert (result["ok"], result["stdout"]) == (True, "a;b\n")


@pytest.mark.parametrize("template", ["local", "ssh-slurm"])
def test_remote_add_says_what_to_run_next(env, capsys, template: str) -> None:
    """Issue 23: stdout is still the bundle path; stderr names the next commands."""
    code, out, err = run(capsys, "remote", "add", "cluster", "--template", template)
    bundle = env.project / ".httk-project" / "remotes" / "cluster"
    assert (code, out) == (0, f"{bundle}\n")
    (line,) = err.splitlines()
    assert line.startswith("next: httk-workflow remote configure cluster --set ")
    assert ("--set host=HOST" in line) == (template == "ssh-slurm")
    assert (
        "httk-workflow remote install cluster (checks httk there and creates the workspace)" in line
    )
    assert "httk-workflow transfer send cluster JOB_ID..." in line
    code, out, err = run(capsys, "remote", "add", "json", "--template", template, "--json")
    assert (code, err) == (0, "")
    assert json.loads(out)["name"] == "json"


def test_remote_add_outside_a_project_says_how_to_make_one(
    env, capsys, tmp_path, monkeypatch
) -> None:
    elsewhere = tmp_path / "not a project"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    code, out, err = run(capsys, "remote", "add", "cluster", "--template", "local")
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        "httk-workflow: a project is required unless --global is used",
        "  make this directory a project with `httk project init`, or add the remote for every "
        "project with --global",
    ]
