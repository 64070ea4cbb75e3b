"""Backend and login-node options, checked at construction."""

from __future__ import annotations

from pathlib import Path

import pytest
from altar.backends.slurm import SlurmExecutionBackend
from altar.backends.slurm.fake import FakeLoginNode
from altar.backends.slurm.sdk_runtime import SshLoginNode


def test_ssh_login_node_adds_config_and_identity(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text("Host x\n")
    identity = tmp_path / "id"
    identity.write_text("")
    node = SshLoginNode(
        "login",
        user="me",
        port=2222,
        ssh_config=str(config),
        identity_file=str(identity),
        multiplex_s=0,
    )
    transport = node._target.transport()
    assert transport[:5] == ["ssh", "-F", str(config), "-i", str(identity)]
    assert "2222" in transport
    assert node.destination == "me@login"


def test_options_are_checked(tmp_path: Path, node: FakeLoginNode) -> None:
    with pytest.raises(ValueError, match="container_runtime"):
        SlurmExecutionBackend(runtime=node, container_runtime="lxc")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not allowed"):
        SlurmExecutionBackend(runtime=node, extra_directives={"--output": "x"})
    with pytest.raises(ValueError, match="data_root"):
        SlurmExecutionBackend(ssh_host="login", data_root=None)


def test_valueless_directives_and_any_gpu_type_are_writable_in_toml(
    tmp_path: Path, node: FakeLoginNode
) -> None:
    import tomllib

    from altar.execution import ContainerTaskSpec, ResourceRequest

    options = tomllib.loads(
        'extra_directives = { "--exclusive" = true, "--hint" = false, "--constraint" = "avx2" }\n'
        'gpu_types = { gpu = true, a100 = "a100" }\n'
    )
    backend = SlurmExecutionBackend(runtime=node, data_root=str(tmp_path), **options)
    spec = ContainerTaskSpec(
        kind="k", image="busybox", command=["true"], resources=ResourceRequest(gpu="gpu", count=2)
    )
    script = backend.render(spec, "token").splitlines()
    assert "#SBATCH --exclusive" in script
    assert "#SBATCH --constraint=avx2" in script
    assert not any(line.startswith("#SBATCH --hint") for line in script)
    assert "#SBATCH --gres=gpu:2" in script
    a100 = backend.render(
        ContainerTaskSpec(
            kind="k", image="i", command=[], resources=ResourceRequest(gpu="a100", count=1)
        ),
        "token",
    )
    assert "#SBATCH --gres=gpu:a100:1" in a100.splitlines()
    with pytest.raises(ValueError, match=r"gpu_types\.gpu"):
        SlurmExecutionBackend(runtime=node, data_root=str(tmp_path), gpu_types={"gpu": 3})  # type: ignore[dict-item]
