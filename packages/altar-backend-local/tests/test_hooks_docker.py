"""The CLI hooks against the real engine, and through ``altar run``/``status`` (issue 15)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from altar.backends.local import LocalDockerExecutionBackend
from altar.execution import (
    ContainerTaskSpec,
    ResourceRequest,
    TaskLogs,
    UnsupportedCapabilityError,
)
from altar.execution.state.journal import Journal

pytestmark = [pytest.mark.docker, pytest.mark.integration]

SESSION = uuid.uuid4().hex[:12]
IMAGE = os.environ.get("ALTAR_TEST_IMAGE", "busybox:latest")
ALTAR = Path(sys.executable).parent / "altar"


@pytest.fixture(scope="module")
def api(docker_host: str) -> Iterator[docker.APIClient]:
    client = docker.APIClient(base_url=docker_host, version="auto")
    yield client
    for key in ("altar.test", "altar-test"):
        for row in client.containers(all=True, filters={"label": [f"{key}={SESSION}"]}):
            client.remove_container(row["Id"], force=True)
    client.close()


def spec(command: list[str], **overrides: object) -> ContainerTaskSpec:
    values: dict[str, object] = {
        "kind": "test",
        "image": IMAGE,
        "command": command,
        "labels": {"altar.test": SESSION},
    }
    values.update(overrides)
    return ContainerTaskSpec(**values)  # type: ignore[arg-type]


@pytest.mark.asyncio
async def test_logs_times_and_checks_on_the_engine(tmp_path: Path, api: docker.APIClient) -> None:
    backend = LocalDockerExecutionBackend(data_root=tmp_path / "data", watchdog=False)
    try:
        handle = await backend.submit(
            spec(["sh", "-c", "for i in $(seq 60); do echo out $i; done; echo bad >&2; exit 2"])
        )
        status = (await backend.await_completion([handle], interval_s=0.2, timeout_s=120))[0]
        detail = api.inspect_container(handle.external_id)["State"]
        assert status.started_at is not None
        assert status.finished_at is not None
        from altar.backends.local.sdk_runtime import _parse_time

        assert status.started_at == pytest.approx(
            _parse_time(detail["StartedAt"]), abs=0.5
        )  # event and State stamps differ by ms
        assert status.finished_at == pytest.approx(
            _parse_time(detail["FinishedAt"]), abs=0.5
        )  # event and State stamps differ by ms
        expected = TaskLogs("".join(f"out {i}\n" for i in range(1, 61)), "bad\n")
        assert await backend.task_logs(handle) == expected
        await backend.cleanup([handle])
        assert not api.containers(all=True, filters={"id": handle.external_id})
        assert await backend.task_logs(handle) == expected

        assert await backend.image_present(IMAGE) is True
        assert await backend.image_present(f"altar-missing-{SESSION}:none") is None
        cpus = int(api.info()["NCPU"])
        with pytest.raises(UnsupportedCapabilityError, match="CPUs"):
            await backend.check_spec(spec(["true"], resources=ResourceRequest(cpu=cpus + 1)))
        with pytest.raises(UnsupportedCapabilityError):  # as submit does
            await backend.submit(spec(["true"], resources=ResourceRequest(cpu=cpus + 1)))
    finally:
        backend.close()


def test_status_after_a_resume_shows_the_providers_duration(
    tmp_path: Path, api: docker.APIClient
) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text(
        "[backend]\n"
        'type = "local"\n'
        f'options = {{ data_root = "{tmp_path / "data"}" }}\n'
        "[[tasks]]\n"
        'id = "nap"\n'
        'kind = "nap"\n'
        f'image = "{IMAGE}"\n'
        'command = ["sh", "-c", "echo hello; echo oops >&2; sleep 2"]\n'
        f'labels = {{ altar-test = "{SESSION}" }}\n'
    )
    run_dir = tmp_path / "run"
    child = subprocess.Popen(
        [ALTAR, "run", plan, "--run-dir", run_dir],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        container = None
        for _ in range(600):  # until the driver has seen it run
            rows = api.containers(all=True, filters={"label": [f"altar-test={SESSION}"]})
            journal = Journal.load(run_dir) if (run_dir / "journal.json").exists() else None
            if rows and journal is not None and journal.tasks["nap"].state == "running":
                container = rows[0]["Id"]
                break
            time.sleep(0.1)
        assert container is not None, "the task never ran"
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=60)
        assert child.returncode == 130, err
    finally:
        if child.poll() is None:
            child.kill()
    # The container finishes while no driver watches; the resume learns it well after.
    for _ in range(600):
        state = api.inspect_container(container)["State"]
        if state["Status"] == "exited":
            break
        time.sleep(0.1)
    from altar.backends.local.sdk_runtime import _parse_time

    engine_s = _parse_time(state["FinishedAt"]) - _parse_time(state["StartedAt"])  # type: ignore[operator]
    time.sleep(3)  # the driver's measure would now be at least this much longer
    resumed = subprocess.run(
        [ALTAR, "run", plan, "--run-dir", run_dir], capture_output=True, text=True, check=False
    )
    assert resumed.returncode == 0, resumed.stderr
    shown = subprocess.run(
        [ALTAR, "status", run_dir, "--json"], capture_output=True, text=True, check=False
    )
    assert shown.returncode == 0, shown.stderr
    (task,) = [t for t in json.loads(shown.stdout)["tasks"] if t["id"] == "nap"]
    # the engine's own stamps (State, or its start/die events: ms apart), not the driver's
    assert task["duration_s"] == pytest.approx(engine_s, abs=0.5)
    # the run's cleanup removed the container; its logs were kept for `altar logs`
    assert not api.containers(all=True, filters={"id": container})
    logs = subprocess.run(
        [ALTAR, "logs", run_dir, "nap"], capture_output=True, text=True, check=False
    )
    assert (logs.returncode, logs.stdout, logs.stderr) == (0, "hello\n", "oops\n")
