"""The rendered ``verify-inputs`` init container, run for real in BusyBox under Docker.

The container gets exactly the command and mounts the manifest renders; a host directory
bind-mounted at the mount root stands in for the PVC.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from altar.backends.kubernetes import ManifestOptions, render_manifest
from altar.execution import ContainerTaskSpec, Transfer, has_verification_record

pytestmark = pytest.mark.docker

IMAGE = "busybox:local"


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def verifier(inputs: list[Transfer], *, trust: bool = True) -> dict[str, Any]:
    spec = ContainerTaskSpec(kind="k", image="img", command=["true"], inputs=inputs)
    options = ManifestOptions(pvc_name="data", trust_verification_records=trust)
    manifest = render_manifest(spec, options)
    [init] = manifest["spec"]["template"]["spec"]["initContainers"]
    assert init["name"] == "verify-inputs"
    return init


def run(init: dict[str, Any], pvc: Path) -> subprocess.CompletedProcess[str]:
    mounts = [f"--volume={pvc}:{m['mountPath']}" for m in init["volumeMounts"]]
    command = init["command"]
    return subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--network",
            "none",
            *mounts,
            "--entrypoint",
            command[0],
            IMAGE,
            *command[1:],
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def settle(*paths: Path) -> None:
    """Wait until the files' status-change second is over, so a record may be written."""
    newest = max(int(os.stat(p).st_ctime) for p in paths)
    while int(time.time()) <= newest:
        time.sleep(0.05)


@pytest.fixture
def pvc(tmp_path: Path, docker_host: str) -> Path:
    root = tmp_path / "pvc"
    (root / "models").mkdir(parents=True)
    return root


def test_matching_inputs_are_hashed_then_accepted_from_their_record(pvc: Path) -> None:
    weights = pvc / "models" / "w e i'ghts.bin"
    weights.write_bytes(b"weights")
    genome = pvc / "genome.fa"
    genome.write_bytes(b">chr1\nACGT\n")
    settle(weights, genome)
    init = verifier(
        [
            Transfer("gs://b/w", "models/w e i'ghts.bin", digest=digest(b"weights")),
            Transfer("gs://b/g", "genome.fa", digest=digest(b">chr1\nACGT\n")),
        ]
    )
    first = run(init, pvc)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == [
        "/mnt/volume/models/w e i'ghts.bin: OK",
        "/mnt/volume/genome.fa: OK",
    ]
    assert has_verification_record(weights, digest(b"weights"))  # Python accepts the record
    second = run(init, pvc)
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines() == [
        "/mnt/volume/models/w e i'ghts.bin: OK (verification record)",
        "/mnt/volume/genome.fa: OK (verification record)",
    ]


def test_mismatch_fails_the_container_and_names_the_file(pvc: Path) -> None:
    (pvc / "models" / "w.bin").write_bytes(b"actual bytes")
    init = verifier([Transfer("u", "models/w.bin", digest=digest(b"expected bytes"))])
    result = run(init, pvc)
    assert result.returncode == 1
    assert "/mnt/volume/models/w.bin: FAILED" in result.stdout
    assert not (pvc / "models" / "w.bin.sha256-verified").exists()


def test_directory_and_missing_file_are_rejected(pvc: Path) -> None:
    (pvc / "models" / "weights").mkdir()
    (pvc / "models" / "weights" / "part").write_bytes(b"part")
    init = verifier(
        [
            Transfer("u", "models/weights", digest=digest(b"part")),
            Transfer("u", "models/absent.bin", digest=digest(b"x")),
        ]
    )
    result = run(init, pvc)
    assert result.returncode == 1
    assert "/mnt/volume/models/weights: not a regular file" in result.stderr
    assert "/mnt/volume/models/absent.bin: not a regular file" in result.stderr


def test_trust_disabled_hashes_every_time_and_still_writes_records(pvc: Path) -> None:
    weights = pvc / "models" / "w.bin"
    weights.write_bytes(b"weights")
    settle(weights)
    transfer = Transfer("u", "models/w.bin", digest=digest(b"weights"))
    untrusting = verifier([transfer], trust=False)
    for _ in range(2):
        result = run(untrusting, pvc)
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == ["/mnt/volume/models/w.bin: OK"]
    assert has_verification_record(weights, digest(b"weights"))
    trusting = run(verifier([transfer], trust=True), pvc)
    assert trusting.stdout.splitlines() == ["/mnt/volume/models/w.bin: OK (verification record)"]


def test_a_forged_record_is_not_trusted_when_trust_is_disabled(pvc: Path) -> None:
    weights = pvc / "models" / "w.bin"
    weights.write_bytes(b"tampered")
    settle(weights)
    claimed = digest(b"weights")
    st = weights.stat()
    forged = (
        f"verified-file/1 {claimed} size={st.st_size} mtime={int(st.st_mtime)} "
        f"ctime={int(st.st_ctime)} inode={st.st_ino}\n"
    )
    (pvc / "models" / "w.bin.sha256-verified").write_text(forged)
    transfer = Transfer("u", "models/w.bin", digest=claimed)
    assert run(verifier([transfer], trust=True), pvc).returncode == 0  # trusted: accepted
    untrusting = run(verifier([transfer], trust=False), pvc)
    assert untrusting.returncode == 1
    assert "FAILED" in untrusting.stdout
