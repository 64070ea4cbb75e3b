"""Construction validation and the dict round trip of the contract's value types."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from dataclasses import fields, replace

import altar.execution
import pytest
from altar.execution import (
    CONTAINER_MOUNT_ROOT,
    Capacity,
    ContainerTaskSpec,
    PathResolver,
    ResourceRequest,
    TaskFailure,
    TaskHandle,
    TaskState,
    TaskStatus,
    Transfer,
    spec_from_dict,
    spec_to_dict,
)

DIGEST = "sha256:" + "ab" * 32


def make_spec(**changes):
    base = ContainerTaskSpec(kind="fold", image="busybox:latest", command=["true"])
    return replace(base, **changes)


# -- validation messages (0.3.0 wording where it had one) ----------------------------------


@pytest.mark.parametrize("count", [0, -1])
def test_resource_count_below_one(count):
    with pytest.raises(ValueError, match=rf"^resource count must be at least 1, got {count}$"):
        ResourceRequest(count=count)


@pytest.mark.parametrize("count", [1.5, True, "2"])
def test_resource_count_must_be_an_integer(count):
    with pytest.raises(TypeError, match="resource count must be an integer"):
        ResourceRequest(count=count)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("memory_gb", 0),
        ("memory_gb", -1.5),
        ("cpu", 0),
        ("memory_gb", float("inf")),  # TOML `inf`, JSON `Infinity`: no provider can grant it
        ("cpu", float("inf")),
        ("cpu", float("nan")),
    ],
)
def test_memory_and_cpu_positive(field, value):
    with pytest.raises(ValueError, match=rf"resources.{field} must be a positive number"):
        ResourceRequest(**{field: value})


def test_gpu_pool_name_non_empty():
    with pytest.raises(ValueError, match=r"resources\.gpu must be a non-empty pool name"):
        ResourceRequest(gpu="")
    assert ResourceRequest(gpu="a100", count=2).count == 2


@pytest.mark.parametrize(
    "digest",
    [
        "sha256:" + "AB" * 32,
        "sha256:" + "ab" * 31,
        "md5:" + "ab" * 32,
        " sha256:" + "ab" * 32,
        "sha256:" + "ab" * 32 + "\n",
        "sha256:$(rm -rf /)",
    ],
)
def test_malformed_digests_rejected(digest):
    with pytest.raises(ValueError, match=r"^transfer digest must be sha256:<64 lowercase hex>$"):
        Transfer("in.bin", "models/in.bin", digest=digest)


def test_transfer_paths_required():
    with pytest.raises(TypeError, match="uri must be a non-empty string"):
        Transfer("", "x")
    with pytest.raises(TypeError, match="logical_path must be a non-empty string"):
        Transfer("x", None)  # type: ignore[arg-type]


@pytest.mark.parametrize("timeout", [0, -5])
def test_timeout_positive(timeout):
    with pytest.raises(
        ValueError, match=rf"^timeout_s must be a positive number of seconds, got {timeout}$"
    ):
        make_spec(timeout_s=timeout)


@pytest.mark.parametrize("timeout", [1.5, True, "60"])
def test_timeout_whole_seconds(timeout):
    with pytest.raises(TypeError, match="timeout_s must be a whole number of seconds"):
        make_spec(timeout_s=timeout)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("labels", {"fold": 0}),
        ("labels", {1: "x"}),
        ("labels", ["a"]),
        ("env", {"N": 1}),
        ("env", {"N": None}),
    ],
)
def test_labels_and_env_map_str_to_str(field, value):
    with pytest.raises(TypeError, match=rf"^{field} must"):
        make_spec(**{field: value})


@pytest.mark.parametrize("env", [{"A=B": "x"}, {"": "x"}, {"A": "x\0y"}])
def test_env_names_that_cannot_reach_a_process(env):
    with pytest.raises(ValueError, match="env name"):
        make_spec(env=env)


def test_hostile_but_legal_values_are_kept_verbatim():
    hostile = "a b 'c' \"d\" $(rm -rf /) `x`\nline2 ../.."
    spec = make_spec(command=["sh", "-c", hostile], labels={"note": hostile}, env={"V": hostile})
    assert spec_from_dict(json.loads(json.dumps(spec_to_dict(spec)))) == spec


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"kind": ""}, "kind must be a non-empty string"),
        ({"image": None}, "image must be a non-empty string"),
        ({"command": "echo hi"}, "command must be a list of str"),
        ({"command": ["echo", 1]}, "command must be a list of str"),
        ({"inputs": ["x"]}, "inputs must hold Transfer objects"),
        ({"resources": {"count": 1}}, "resources must be a ResourceRequest"),
        ({"avoid_hosts": ["h"]}, "avoid_hosts must be a tuple of str"),
    ],
)
def test_spec_field_types(changes, match):
    with pytest.raises(TypeError, match=match):
        make_spec(**changes)


# -- round trip -------------------------------------------------------------------------


def full_spec() -> ContainerTaskSpec:
    return ContainerTaskSpec(
        kind="fold",
        image="registry.example/model@sha256:" + "0" * 64,
        command=["score", "--fold", "0", "/mnt/volume/jobs/J/out.tsv"],
        labels={"job_id": "J", "fold": "0"},
        inputs=[
            Transfer("file:///data/w.bin", "models/w.bin", locality_key="node-a", digest=DIGEST),
            Transfer("gs://bucket/v.vcf", "jobs/J/v.vcf"),
        ],
        outputs=[Transfer("/results/out.tsv", "jobs/J/out.tsv")],
        resources=ResourceRequest(gpu="a100", count=2, memory_gb=7.5, cpu=4.0),
        timeout_s=3600,
        avoid_hosts=("bad-node",),
        plugin_identity={"plugin": "chrombpnet", "version": "1"},
        env={"OMP_NUM_THREADS": "4"},
    )


def test_every_field_round_trips_through_json():
    spec = full_spec()
    data = json.loads(json.dumps(spec_to_dict(spec)))
    assert spec_from_dict(data) == spec
    # every dataclass field is set to a non-default value above, so all were exercised
    defaults = ContainerTaskSpec(kind="k", image="i", command=[])
    for f in fields(ContainerTaskSpec):
        if f.name not in ("kind", "image", "command"):
            assert getattr(spec, f.name) != getattr(defaults, f.name), f.name


def test_a_plain_spec_renders_the_0_3_0_keys_only():
    data = spec_to_dict(make_spec())
    assert list(data) == [
        "kind",
        "image",
        "command",
        "labels",
        "inputs",
        "outputs",
        "resources",
        "timeout_s",
        "plugin_identity",
    ]
    assert data["resources"] == {"gpu": None, "count": 1, "memory_gb": None}


def test_spec_from_dict_defaults_and_unknown_keys():
    spec = spec_from_dict({"kind": "k", "image": "i", "command": None, "future_field": 1})
    assert spec == ContainerTaskSpec(kind="k", image="i", command=[])
    with pytest.raises(ValueError, match="missing required field"):
        spec_from_dict({"kind": "k"})
    with pytest.raises(TypeError):
        spec_from_dict({"kind": "k", "image": "i", "command": [], "inputs": [{"url": "x"}]})


# -- the other value types ------------------------------------------------------------


def test_task_state_and_status_conventions():
    assert [s.value for s in TaskState] == ["pending", "running", "succeeded", "failed"]
    assert [s.is_terminal for s in TaskState] == [False, False, True, True]
    handle = TaskHandle("local", "abc", {"fold": "0"})
    failure = TaskFailure("exit_3", "exited 3", deterministic=True, exit_code=3)
    status = TaskStatus(handle, TaskState.FAILED, failure)
    assert status.deterministic_failure
    assert status.error == "exited 3"
    ok = TaskStatus(handle, TaskState.SUCCEEDED)
    assert not ok.deterministic_failure
    assert ok.error is None
    assert TaskFailure("timeout").deterministic is False


def test_capacity_free_for():
    capacity = Capacity({"cpu": 3, "gpu": 1})
    assert capacity.free_for(ResourceRequest()) == 3
    assert capacity.free_for(ResourceRequest(gpu="gpu")) == 1
    assert capacity.free_for(ResourceRequest(gpu="a100")) == 0
    assert Capacity().pools == {}


def test_path_resolver():
    assert PathResolver().resolve("gs://b/x") == "gs://b/x"
    resolver = PathResolver(CONTAINER_MOUNT_ROOT)
    assert resolver.resolve("jobs/J/x") == "/mnt/volume/jobs/J/x"
    assert resolver.resolve("/jobs/./J/x") == "/mnt/volume/jobs/J/x"
    with pytest.raises(ValueError, match="leaves the mount root"):
        resolver.resolve("../etc/passwd")


# -- public surface ---------------------------------------------------------------------


EXPECTED_EXPORTS = [
    "CONTAINER_MOUNT_ROOT",
    "EXECUTION_BACKEND_GROUP",
    "LABEL_ATTEMPT",
    "LABEL_RUN",
    "LABEL_SUBMISSION",
    "LABEL_TASK",
    "PROVIDER_ENDINGS",
    "RESERVED_LABEL_PREFIX",
    "VERIFICATION_RECORD_FORMAT",
    "VERIFICATION_RECORD_SUFFIX",
    "AltarError",
    "BackendCallError",
    "BackendImportError",
    "BackendUnavailableError",
    "BackendValidationError",
    "CancelIncompleteError",
    "Capacity",
    "ContainerTaskSpec",
    "DigestMismatchError",
    "DigestVerification",
    "DuplicateBackendError",
    "ExecutionBackend",
    "GpuPool",
    "JournalError",
    "LocalStager",
    "OutputCollectionError",
    "PathResolver",
    "PlanError",
    "ProviderLimitError",
    "RegistryError",
    "ResourceRequest",
    "RunEvent",
    "RunResult",
    "RunStoppedError",
    "StageAction",
    "StagingError",
    "TaskFailure",
    "TaskHandle",
    "TaskLogs",
    "TaskResult",
    "TaskState",
    "TaskStatus",
    "Transfer",
    "TransferIntegrityError",
    "UnsupportedCapabilityError",
    "__version__",
    "atomic_write",
    "collect_output",
    "copy_and_verify",
    "gather_bounded",
    "has_verification_record",
    "is_sha256_digest",
    "local_file",
    "local_path",
    "mint_handle",
    "remove_stale_temporaries",
    "sha256_file",
    "spec_from_dict",
    "spec_to_dict",
    "submission_key",
    "submission_labels",
    "temp_path",
    "verify_file_digest",
    "verify_files",
    "verify_files_script",
    "verify_output_digest",
    "verify_transfer_digest",
]


def test_exported_members_are_pinned():
    public = {
        name
        for name in dir(altar.execution)  # the lazy members too, loaded or not
        if not name.startswith("_")
        and not isinstance(getattr(altar.execution, name), types.ModuleType)
    }
    assert altar.execution.__all__ == EXPECTED_EXPORTS
    assert public == set(EXPECTED_EXPORTS) - {"__version__"}


def _fresh_python(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    return result.stdout.strip()


def test_every_export_imports_by_name_in_a_fresh_process():
    """``from altar.execution import X`` gives the defining module's object, lazy member or not."""
    code = (
        "import importlib, altar.execution as m\n"
        "for name in m.__all__:\n"
        "    exec(f'from altar.execution import {name} as value')\n"
        "    home = getattr(value, '__module__', None)\n"
        "    if home and home.startswith('altar.execution.') and not isinstance(value, str):\n"
        "        assert getattr(importlib.import_module(home), name) is value, name\n"
        "print(len(m.__all__))\n"
    )
    assert _fresh_python(code) == str(len(EXPECTED_EXPORTS))
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchThing'"):
        altar.execution.NoSuchThing  # noqa: B018


# Modules `import altar.execution` must not load: each costs 3-60 ms of start-up (asyncio
# alone ~25 ms), paid by `altar backends` and every backend's import (issue 24).
HEAVY = (
    "asyncio",
    "concurrent.futures",
    "hashlib",
    "json",
    "queue",
    "threading",
    "tomllib",
    "uuid",
    "importlib.metadata",
)


def test_importing_the_contract_loads_no_heavy_module():
    code = (
        "import sys\n"
        "import altar.execution\n"
        f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    assert _fresh_python(code) == ""


def test_importing_the_contract_imports_only_the_standard_library():
    code = (
        "import sys\n"
        "before = set(sys.modules)\n"
        "import altar.execution, altar.execution.registry, altar.execution.plans.plan\n"
        "import altar.execution.state.journal, altar.execution.run.runner\n"
        "import altar.execution.run.compare\n"
        "import altar.execution.cli.command, altar.execution.run.progress\n"
        "new = {m.split('.')[0] for m in set(sys.modules) - before}\n"
        "print('\\n'.join(sorted(new - set(sys.stdlib_module_names) - {'altar'})))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""
