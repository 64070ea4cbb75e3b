"""The submit program under a real ``sh``, with a stand-in ``sbatch`` that reports what it got."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest
from altar.backends.slurm import LocalLoginNode, commands
from altar.backends.slurm.commands import submit
from altar.execution import BackendUnavailableError, UnsupportedCapabilityError


def _sbatch(tmp_path: Path, body: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    program = bin_dir / "sbatch"
    program.write_text(f"#!/bin/sh\n{body}\n")
    program.chmod(program.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LocalLoginNode:
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    return LocalLoginNode()


def test_the_script_is_placed_and_sbatch_gets_a_clean_environment(
    tmp_path: Path, node: LocalLoginNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ALTAR_TEST_SECRET_TOKEN", "do-not-store")
    _sbatch(tmp_path, f'env > {tmp_path}/env; printf "%s\\n" "$@" > {tmp_path}/args; echo "42;c"')
    job_dir = tmp_path / "jobs" / "a b $(x)"
    script = "#!/bin/sh\n#SBATCH --job-name=x\necho 'hi' \"$HOME\"\n"
    assert submit(node, str(job_dir), script) == "42"
    assert (job_dir / "job.sbatch").read_text() == script
    assert (tmp_path / "args").read_text().splitlines() == ["--parsable", f"{job_dir}/job.sbatch"]
    env = dict(line.split("=", 1) for line in (tmp_path / "env").read_text().splitlines())
    assert "ALTAR_TEST_SECRET_TOKEN" not in env
    assert set(env) <= {"PATH", "HOME", "USER", "SLURM_CONF", "PWD", "SHLVL", "_"}


def test_sbatch_refusals_and_outages(tmp_path: Path, node: LocalLoginNode) -> None:
    _sbatch(
        tmp_path,
        'echo "sbatch: error: Batch job submission failed: Invalid generic '
        'resource (gres) specification" >&2; exit 1',
    )
    with pytest.raises(UnsupportedCapabilityError, match="never run on CPU"):
        submit(node, str(tmp_path / "j1"), "#!/bin/sh\n", gpu=True)
    assert not (tmp_path / "j1").exists()  # a refused job leaves no directory
    _sbatch(
        tmp_path,
        'echo "sbatch: error: Batch job submission failed: Unable to contact '
        'slurm controller (connect failure)" >&2; exit 1',
    )
    with pytest.raises(BackendUnavailableError):
        submit(node, str(tmp_path / "j2"), "#!/bin/sh\n")
    # after an outage the job may exist all the same, and it runs in this directory
    assert (tmp_path / "j2" / "job.sbatch").is_file()


@pytest.mark.parametrize("budget", [commands.NAMED_RECORDS_BUDGET, 0])
def test_the_records_of_many_jobs_are_read_in_one_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, budget: int
) -> None:
    # Named files while the names fit one command; past the budget, one find over the jobs
    # directory (which also passes over jobs nobody asked about).
    monkeypatch.setattr(commands, "NAMED_RECORDS_BUDGET", budget)
    jobs = tmp_path / "jobs dir"
    for token, files in {
        "a-1": {"exit-status": "altar-exit/1 status=3\n", "started": "altar-start/1 start=1\n"},
        "b-2": {"started": "altar-start/1 start=2\nsecond line\n"},
        "c-3": {"exit-status.tmp": "torn"},
        "other": {"exit-status": "altar-exit/1 status=0\n"},
    }.items():
        (jobs / token).mkdir(parents=True)
        for name, text in files.items():
            (jobs / token / name).write_text(text)
    calls: list[list[str]] = []

    class Recording(LocalLoginNode):
        def run(self, argv: Any) -> Any:
            calls.append(list(argv))
            return super().run(argv)

    found = commands.read_records(Recording(), str(jobs), ["a-1", "b-2", "c-3", "missing"])
    assert found == {
        "a-1": {"exit-status": "altar-exit/1 status=3", "started": "altar-start/1 start=1"},
        "b-2": {"started": "altar-start/1 start=2"},
    }
    assert len(calls) == 1
    assert commands.read_records(Recording(), str(tmp_path / "nowhere"), ["a-1"]) == {}
