"""Pure rendering: the sbatch script and each container runtime's argv, against saved files."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
from altar.backends.slurm.fake import logical_lines, read_script
from altar.backends.slurm.render import (
    JobLayout,
    SlurmPlacement,
    batch_script,
    comment_for,
    job_name,
    parse_comment,
    runtime_command,
    spec_hash,
)
from altar.execution import ContainerTaskSpec, ResourceRequest, Transfer, UnsupportedCapabilityError

REFERENCES = Path(__file__).parent / "references"
LAYOUT = JobLayout("/shared/altar data", "/shared/altar data/.altar-slurm/jobs/tok")
KEY = "0123456789abcdef0123456789abcdef"
HOSTILE = ["sh", "-c", 'printf "%s\\n" "$@"', "x", "two  spaces", "$(id) `id` ${HOME}", "", "a\nb"]


def _spec(**changes: Any) -> ContainerTaskSpec:
    fields: dict[str, Any] = {
        "kind": "fold",
        "image": "ghcr.io/lab/model:1.2",
        "command": list(HOSTILE),
        "labels": {"altar.run": "run 1", "altar.submission": KEY, "fold": "0 & 1"},
        "env": {"PLAIN": "1", "TRICKY": "$(id) 'q' \"d\"\nnext"},
        "resources": ResourceRequest(cpu=1.5, memory_gb=2),
        "timeout_s": 5400,
        "inputs": [
            Transfer("/data/w.bin", "models/w.bin", digest="sha256:" + "a" * 64),
            Transfer("/data/plain.txt", "in/plain.txt"),
        ],
    }
    fields.update(changes)
    return ContainerTaskSpec(**fields)


PLACEMENT = SlurmPlacement(
    partition="gpu-long",
    account="lab #1",
    qos="normal",
    extra_directives=(("--constraint", "avx2&ib"), ("--exclusive", None)),
    gpu_types={"gpu": None, "a100": "a100"},
)


@pytest.mark.parametrize("runtime", ["apptainer", "podman", "docker"])
def test_runtime_argv_matches_reference(runtime: Any, reference_files: Any) -> None:
    command = runtime_command(
        _spec(), runtime=runtime, layout=LAYOUT, runtime_options=["--root", "/var/x y"]
    )
    text = "\n".join(command.argv) + "\n--- expansions\n"
    text += "".join(f"{i}: {e}\n" for i, e in sorted(command.expansions.items()))
    text += "--- env\n" + "".join(f"{k}={v!r}\n" for k, v in command.env.items())
    reference_files.check(REFERENCES / f"argv-{runtime}.txt", text)


@pytest.mark.parametrize("runtime", ["apptainer", "podman", "docker"])
def test_batch_script_matches_reference(runtime: Any, reference_files: Any) -> None:
    gpu = None if runtime == "podman" else "a100"
    spec = _spec(resources=ResourceRequest(gpu=gpu, count=2, cpu=1.5, memory_gb=2))
    command = runtime_command(
        spec, runtime=runtime, layout=LAYOUT, runtime_env={"CONTAINERS_CONF": "/etc/c x.conf"}
    )
    script = batch_script(
        spec, layout=LAYOUT, placement=PLACEMENT, command=command, runtime=runtime
    )
    reference_files.check(REFERENCES / f"job-{runtime}.sbatch", script)


def test_the_script_carries_argv_and_env_exactly_as_a_shell_reads_them() -> None:
    spec = _spec()
    command = runtime_command(spec, runtime="docker", layout=LAYOUT, container_user="")
    read = read_script(
        batch_script(
            spec, layout=LAYOUT, placement=SlurmPlacement(), command=command, runtime="docker"
        )
    )
    assert read.argv[-len(HOSTILE) :] == HOSTILE
    assert read.argv[-len(HOSTILE) - 1] == spec.image
    assert read.env == spec.env
    assert read.directives["--comment"] == comment_for(spec, spec_hash(spec))
    assert "--account" not in read.directives
    assert read.directives["--export"] == "ALL"  # under the submitter's `env -i`
    assert "--no-requeue" in read.directives


def test_directive_values_survive_sbatch_quoting() -> None:
    spec = _spec()
    command = runtime_command(spec, runtime="apptainer", layout=LAYOUT)
    read = read_script(
        batch_script(spec, layout=LAYOUT, placement=PLACEMENT, command=command, runtime="apptainer")
    )
    assert read.directives["--account"] == "lab #1"
    assert read.directives["--chdir"] == LAYOUT.job_dir
    assert read.directives["--constraint"] == "avx2&ib"
    assert read.directives["--mem"] == "2048M"
    assert read.directives["--cpus-per-task"] == "2"
    assert read.directives["--time"] == "0-01:30:00"


def test_names_comments_and_keys() -> None:
    spec = _spec()
    digest = spec_hash(spec)
    assert job_name(spec, digest) == f"altar-{KEY}"
    unkeyed = _spec(labels={"a": "b"})
    assert job_name(unkeyed, spec_hash(unkeyed)) == f"altar-spec-{spec_hash(unkeyed)[:32]}"
    comment = comment_for(spec, digest)
    assert not any(ch in comment for ch in " #'\"\\\n")
    assert parse_comment(comment) == (digest, spec.labels)
    assert parse_comment("someone else's comment") is None


@pytest.mark.parametrize(
    "changes",
    [
        {"resources": ResourceRequest(gpu="tpu")},
        {"command": ["echo", "a\r\nb"]},
        {"env": {"X": "a\rb"}},
        {"image": "--privileged"},
        {"inputs": [Transfer("/x", "../escape", digest="sha256:" + "b" * 64)]},
    ],
)
def test_what_cannot_be_represented_is_refused(changes: dict[str, Any]) -> None:
    spec = _spec(**changes)

    def render() -> str:
        command = runtime_command(spec, runtime="docker", layout=LAYOUT)
        return batch_script(
            spec, layout=LAYOUT, placement=PLACEMENT, command=command, runtime="docker"
        )

    with pytest.raises(UnsupportedCapabilityError):
        render()


def test_runtime_env_reaches_the_runtime_never_the_container() -> None:
    spec = _spec()
    command = runtime_command(
        spec, runtime="podman", layout=LAYOUT, runtime_env={"CONTAINERS_CONF": "/c.conf"}
    )
    assert command.env["CONTAINERS_CONF"] == "/c.conf"
    forwarded = [command.argv[i + 1] for i, w in enumerate(command.argv) if w == "--env"]
    assert forwarded == list(spec.env)
    with pytest.raises(UnsupportedCapabilityError, match="runtime_env"):
        runtime_command(spec, runtime="podman", layout=LAYOUT, runtime_env={"PLAIN": "x"})


def test_podman_refuses_gpus_and_apptainer_passes_nv() -> None:
    spec = _spec(resources=ResourceRequest(gpu="gpu"))
    with pytest.raises(UnsupportedCapabilityError, match="GPU"):
        runtime_command(spec, runtime="podman", layout=LAYOUT)
    assert "--nv" in runtime_command(spec, runtime="apptainer", layout=LAYOUT).argv


def test_extra_directives_are_allow_listed() -> None:
    with pytest.raises(ValueError, match="not allowed"):
        SlurmPlacement(extra_directives=(("--time", "1"),))
    with pytest.raises(ValueError, match="backslash"):
        SlurmPlacement(partition="a\\b")


def test_the_verify_step_checks_host_paths_under_the_data_root() -> None:
    spec = _spec()
    command = runtime_command(spec, runtime="docker", layout=LAYOUT)
    script = batch_script(
        spec, layout=LAYOUT, placement=PLACEMENT, command=command, runtime="docker"
    )
    line = next(text for text in logical_lines(script) if text.startswith("if ! sh -c"))
    words = shlex.split(line.removeprefix("if ! ").removesuffix("; then").replace(" >&2", ""))
    assert words[3:] == ["altar-verify-inputs", f"{'a' * 64}  /shared/altar data/models/w.bin"]
