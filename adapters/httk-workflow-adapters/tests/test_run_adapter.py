from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest
from httk.workflow.adapters import run_adapter, store_credentials

ECHO = """#!python
import json, sys
request = json.load(open(sys.argv[1]))
print(json.dumps({"format": "httk-computer-result", "format_version": 1,
                  "operation": request["operation"], "ok": True, "request": request,
                  "request_path": sys.argv[1], "argc": len(sys.argv),
                  "raw": open(sys.argv[1]).read(), "stdin": sys.stdin.read()}))
"""


def test_envelope_queue_settings_and_request_file(tmp_path: Path, make_bundle) -> None:
    bundle = make_bundle(tmp_path, ECHO, queues={"default": {"host": "h", "password": "x"}})
    store_credentials(bundle, "default", {"password": "hunter2"})
    result = run_adapter(bundle, "invoke", {"queue": "default", "argv": ["value;touch S"]})
    request = result["request"]
    assert request == {
        "format": "httk-computer-request",
        "format_version": 1,
        "operation": "invoke",
        "adapter_dir": str(bundle.resolve()),
        "queue": "default",
        "queue_settings": {"host": "h", "password": "hunter2"},
        "argv": ["value;touch S"],
    }
    assert result["argc"] == 2
    assert result["stdin"] == ""
    assert result["raw"] == json.dumps(request, sort_keys=True, separators=(",", ":")) + "\n"
    assert not Path(result["request_path"]).exists()
    assert not list(tmp_path.rglob("S"))


def test_queue_settings_only_for_a_string_queue(tmp_path: Path, make_bundle) -> None:
    bundle = make_bundle(tmp_path, ECHO)
    assert "queue_settings" not in run_adapter(bundle, "status", {"argv": ["x"]})["request"]
    overridden = run_adapter(bundle, "status", {"adapter_dir": "/elsewhere"})["request"]
    assert overridden["adapter_dir"] == "/elsewhere"


def test_unknown_operation_is_refused_before_the_bundle_is_read(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown adapter operation: daemon"):
        run_adapter(tmp_path / "does-not-exist", "daemon", {})


@pytest.mark.parametrize(
    ("stdout", "error", "message"),
    [
        ("", ValueError, "did not emit exactly one JSON result"),
        ('{"a": 1} {"b": 2}', ValueError, "did not emit exactly one JSON result"),
        ("banner\\n{}", ValueError, "did not emit exactly one JSON result"),
        ("[1]", ValueError, "result must be a JSON object"),
        (
            '{"format": "httk-computer-result", "format_version": 2, "operation": "invoke"}',
            ValueError,
            "returned an unsupported result",
        ),
        (
            '{"format": "other", "format_version": 1, "operation": "invoke"}',
            ValueError,
            "returned an unsupported result",
        ),
        (
            '{"format": "httk-computer-result", "format_version": 1, '
            '"operation": "push", "ok": true}',
            ValueError,
            "operation disagrees with request: invoke",
        ),
        (
            '{"format": "httk-computer-result", "format_version": 1, "operation": "invoke", '
            '"ok": false, "error": "cannot reach me@login: Permission denied"}',
            RuntimeError,
            "cannot reach me@login: Permission denied",
        ),
        (
            '{"format": "httk-computer-result", "format_version": 1, "operation": "invoke"}',
            RuntimeError,
            "adapter invoke reported failure",
        ),
    ],
)
def test_result_checks(tmp_path: Path, make_bundle, stdout: str, error, message: str) -> None:
    script = (
        f"#!/bin/sh\nprintf '%s' '{stdout}'\n"
        if "\\n" not in stdout
        else (f"#!/bin/sh\nprintf '{stdout}'\n")
    )
    bundle = make_bundle(tmp_path, script)
    with pytest.raises(error, match=message):
        run_adapter(bundle, "invoke", {"argv": ["true"]})


def test_crash_reports_exit_status_and_stderr(tmp_path: Path, make_bundle) -> None:
    bundle = make_bundle(tmp_path, "#!/bin/sh\necho 'adapter invoke: boom' >&2\nexit 2\n")
    with pytest.raises(RuntimeError, match=r"^adapter invoke failed \(2\): adapter invoke: boom$"):
        run_adapter(bundle, "invoke", {})


def test_diagnostics_are_the_raw_stderr(tmp_path: Path, make_bundle) -> None:
    script = (
        "#!/bin/sh\necho '  warning: slow  ' >&2\n"
        'echo \'{"format":"httk-computer-result","format_version":1,'
        '"operation":"push","ok":true}\'\n'
    )
    result = run_adapter(make_bundle(tmp_path, script), "push", {})
    assert result["diagnostics"] == "  warning: slow  \n"
    quiet = make_bundle(
        tmp_path,
        '#!/bin/sh\necho \'{"format":"httk-computer-result","format_version":1,'
        '"operation":"push","ok":true}\'\n',
        name="quiet",
    )
    assert "diagnostics" not in run_adapter(quiet, "push", {})


def _alive(pid: int) -> bool:
    """Running, as opposed to gone or a zombie waiting for a reaper."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


def test_timeout_kills_the_whole_process_group_and_removes_the_request(
    tmp_path: Path, make_bundle
) -> None:
    pids = tmp_path / "pids"
    script = f"""#!/bin/sh
cp "$1" {tmp_path}/seen-request
sleep 300 &
echo $! > {pids}
echo $$ >> {pids}
wait
"""
    bundle = make_bundle(tmp_path, script, timeout_seconds=0.5)
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"^adapter invoke exceeded 0.5 seconds$"):
        run_adapter(bundle, "invoke", {"argv": ["x"]})
    assert time.monotonic() - started < 10
    with pytest.raises(TimeoutError, match="exceeded 1 seconds"):
        run_adapter(bundle, "invoke", {"argv": ["x"]}, timeout=1)
    # SIGKILL was sent to the whole group before run_adapter returned; a killed process may
    # still be tearing down (its pipes already closed) for a moment on a loaded machine.
    deadline = time.monotonic() + 5
    survivors = [int(pid) for pid in pids.read_text().split()]
    while survivors and time.monotonic() < deadline:
        survivors = [pid for pid in survivors if _alive(pid)]
        time.sleep(0.05)
    assert survivors == []
    leftover = [
        p
        for p in Path(os.environ.get("TMPDIR", "/tmp")).glob("httk-adapter-*.json")
        if p.read_bytes() == (tmp_path / "seen-request").read_bytes()
    ]
    assert leftover == []


def test_a_timeout_beyond_what_poll_takes_still_runs(tmp_path: Path, make_bundle) -> None:
    # "Practically no limit" is a valid bundle: timeout_seconds only has to be positive.
    bundle = make_bundle(tmp_path, ECHO, timeout_seconds=1e10)
    assert run_adapter(bundle, "invoke", {"argv": ["x"]})["ok"] is True
    for limit in (3e9, float("inf")):
        assert run_adapter(bundle, "invoke", {"argv": ["x"]}, timeout=limit)["ok"] is True


def test_credentials_file_is_private_and_atomic(tmp_path: Path, make_bundle) -> None:
    bundle = make_bundle(tmp_path, ECHO)
    path = store_credentials(bundle, "default", {"token": "abc"})
    store_credentials(bundle, "default", {"password": "hunter2"})
    store_credentials(bundle, "other", {"token": "zzz"})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text()) == {
        "default": {"password": "hunter2", "token": "abc"},
        "other": {"token": "zzz"},
    }
    # No temp file left behind; the one dot file is the .gitignore naming the secrets.
    assert [p.name for p in bundle.iterdir() if p.name.startswith(".")] == [".gitignore"]
    assert "credentials.json" in (bundle / ".gitignore").read_text().splitlines()


_STORE_MANY = """
import sys
from httk.workflow.adapters import store_credentials
from httk.workflow.adapters.settings import store_queue_settings
bundle, worker = sys.argv[1], sys.argv[2]
for i in range(15):
    store_credentials(bundle, "default", {f"secret_{worker}_{i}": "x"})
    store_queue_settings(bundle, "default", {"workspace": f"/w/{worker}/{i}"})
"""


def test_concurrent_configures_lose_no_setting(tmp_path: Path, make_bundle) -> None:
    """Two `remote configure` runs at once each read, merge and replace the settings files."""
    import subprocess
    import sys

    bundle = make_bundle(tmp_path, ECHO, queues={"default": {"host": "h"}})
    workers = [
        subprocess.Popen([sys.executable, "-c", _STORE_MANY, str(bundle), str(w)]) for w in range(6)
    ]
    assert [process.wait(60) for process in workers] == [0] * 6
    secrets = json.loads((Path(bundle) / "credentials.json").read_text())["default"]
    assert len(secrets) == 6 * 15
    metadata = json.loads((Path(bundle) / "remote.json").read_text())
    assert metadata["queues"]["default"]["host"] == "h"
    assert stat.S_IMODE((Path(bundle) / "credentials.json").stat().st_mode) == 0o600
