"""Registry tests over synthetic distributions placed on sys.path (submitit's PluginCreator)."""

from __future__ import annotations

import importlib
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
from altar.execution import (
    BackendImportError,
    BackendValidationError,
    ContainerTaskSpec,
    DuplicateBackendError,
    ExecutionBackend,
    PlanError,
    RegistryError,
    TaskHandle,
    TaskStatus,
)
from altar.execution import registry as registry_module
from altar.execution.registry import BackendRegistry, create_backend

BACKEND_SOURCE = """
from altar.execution import ExecutionBackend, TaskHandle, TaskState, TaskStatus

class {cls}(ExecutionBackend):
    name = {name!r}
    input_digest_verification = "staging"

    def __init__(self, *, slots: int = 1, root: str = "/tmp") -> None:
        if slots < 1:
            raise ValueError(f"slots must be at least 1, got {{slots}}")
        self.slots = slots

    async def submit(self, spec):
        return TaskHandle(self.name, "1", dict(spec.labels))

    async def poll(self, handles):
        return [TaskStatus(h, TaskState.RUNNING) for h in handles]
"""


class PluginCreator:
    """Writes ``<module>/__init__.py`` and ``<dist>-<ver>.dist-info`` into a sys.path entry."""

    def __init__(self, root: Path, group: str) -> None:
        self.root = root
        self.group = group
        root.mkdir(parents=True, exist_ok=True)

    def add(
        self,
        dist: str,
        entries: dict[str, str],
        *,
        module: str | None = None,
        source: str = "",
    ) -> str:
        module = module or f"altar_test_{dist.replace('-', '_')}_{uuid.uuid4().hex[:8]}"
        package = self.root / module
        package.mkdir()
        (package / "__init__.py").write_text(source)
        info = self.root / f"{dist.replace('-', '_')}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
        lines = [f"[{self.group}]"] + [
            f"{name} = {value.replace('MODULE', module)}" for name, value in entries.items()
        ]
        (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
        importlib.invalidate_caches()
        return module


@pytest.fixture
def group() -> str:
    return f"altar.test_backends_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def plugins(tmp_path, monkeypatch, group):
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    return PluginCreator(tmp_path / "site", group)


def backend_source(name: str, cls: str = "Backend") -> str:
    return textwrap.dedent(BACKEND_SOURCE.format(cls=cls, name=name))


def test_names_are_listed_without_importing(plugins, group):
    module = plugins.add("alpha-dist", {"alpha": "MODULE:Backend"}, source="raise RuntimeError")
    plugins.add("beta-dist", {"beta": "MODULE:Backend"}, source=backend_source("beta"))
    registry = BackendRegistry(group)
    assert registry.names() == ["alpha", "beta"]
    assert module not in sys.modules
    [alpha, beta] = registry.entries()
    assert (alpha.distribution, alpha.version) == ("alpha-dist", "1.0")
    assert beta.value.endswith(":Backend")


def test_get_loads_lazily_validates_and_caches(plugins, group):
    module = plugins.add("beta-dist", {"beta": "MODULE:Backend"}, source=backend_source("beta"))
    registry = BackendRegistry(group)
    cls = registry.get("beta")
    assert issubclass(cls, ExecutionBackend)
    assert cls.name == "beta"
    assert module in sys.modules
    assert registry.get("beta") is cls


def test_two_distributions_claiming_one_name_are_named(plugins, group):
    plugins.add("first-dist", {"shared": "MODULE:Backend"}, source=backend_source("shared"))
    plugins.add("second-dist", {"shared": "MODULE:Backend"}, source=backend_source("shared"))
    with pytest.raises(DuplicateBackendError) as caught:
        BackendRegistry(group).get("shared")
    message = str(caught.value)
    assert "first-dist 1.0" in message
    assert "second-dist 1.0" in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("kubernetes", "pip install altar-backend-k8s"),
        ("local", "pip install altar-backend-local"),
        ("modal", "pip install altar-backend-modal"),
        ("exotic", "pip install --force-reinstall exotic-dist"),
    ],
)
def test_missing_dependency_says_what_to_install(plugins, group, name, hint):
    missing = f"not_installed_{uuid.uuid4().hex[:6]}"
    plugins.add("exotic-dist", {name: "MODULE:Backend"}, source=f"import {missing}\n")
    with pytest.raises(BackendImportError) as caught:
        BackendRegistry(group).get(name)
    message = str(caught.value)
    assert hint in message
    assert repr(missing) in message
    assert "\n" not in message
    assert isinstance(caught.value, ImportError)


def test_a_broken_module_is_reported_not_raised_raw(plugins, group):
    plugins.add("bad-dist", {"bad": "MODULE:Backend"}, source="raise RuntimeError('boom\\nagain')")
    with pytest.raises(BackendImportError, match="RuntimeError: boom again"):
        BackendRegistry(group).get("bad")


def test_unknown_name_lists_available_and_hints_known_ones(plugins, group):
    plugins.add("beta-dist", {"beta": "MODULE:Backend"}, source=backend_source("beta"))
    registry = BackendRegistry(group)
    with pytest.raises(RegistryError, match=r"'nope' is installed \(available: beta\)$"):
        registry.get("nope")
    with pytest.raises(RegistryError, match="to add it: pip install altar-backend-k8s"):
        registry.get("kubernetes")


@pytest.mark.parametrize(
    ("source", "match"),
    [
        ("Backend = 42\n", "not a subclass of altar.execution.ExecutionBackend"),
        (backend_source("other"), "has name 'other' but is registered as 'gamma'"),
        (
            "from altar.execution import ExecutionBackend\n"
            "class Backend(ExecutionBackend):\n    name = 'gamma'\n",
            "does not implement poll, submit",
        ),
    ],
)
def test_entry_points_naming_invalid_classes_are_refused(plugins, group, source, match):
    plugins.add("gamma-dist", {"gamma": "MODULE:Backend"}, source=source)
    with pytest.raises(BackendValidationError, match=match):
        BackendRegistry(group).get("gamma")


def test_discover_isolates_failures(plugins, group):
    plugins.add("good-dist", {"good": "MODULE:Backend"}, source=backend_source("good"))
    plugins.add("bad-dist", {"bad": "MODULE:Backend"}, source="import not_there_at_all_xyz\n")
    report = BackendRegistry(group).discover()
    assert list(report.healthy) == ["good"]
    assert list(report.failures) == ["bad"]
    assert "not_there_at_all_xyz" in str(report.failures["bad"])


class InCode(ExecutionBackend):
    name = "in-code"
    input_digest_verification = "staging"

    async def submit(self, spec: ContainerTaskSpec) -> TaskHandle:
        raise NotImplementedError

    async def poll(self, handles: list[TaskHandle]) -> list[TaskStatus]:
        raise NotImplementedError


def test_programmatic_registration(plugins, group):
    plugins.add("beta-dist", {"in-code": "MODULE:Backend"}, source=backend_source("in-code"))
    registry = BackendRegistry(group)
    with pytest.raises(RegistryError, match=r"already provided by beta-dist 1\.0"):
        registry.register("in-code", InCode)
    registry.register("in-code", InCode, replace=True)
    assert registry.get("in-code") is InCode
    with pytest.raises(RegistryError, match="already registered in code"):
        registry.register("in-code", InCode)
    with pytest.raises(BackendValidationError, match="registered as 'other'"):
        registry.register("other", InCode)
    registry.unregister("in-code")
    assert registry.get("in-code") is not InCode


def test_module_level_functions_use_the_real_group(monkeypatch):
    registry = BackendRegistry()
    monkeypatch.setattr(registry_module, "default_registry", registry)
    registry_module.register("in-code", InCode)
    assert "in-code" in registry_module.backend_names()
    assert registry_module.get_backend_class("in-code") is InCode
    assert registry_module.discover().healthy["in-code"] is InCode


def test_create_backend_names_the_bad_option(plugins, group):
    plugins.add("beta-dist", {"beta": "MODULE:Backend"}, source=backend_source("beta"))
    registry = BackendRegistry(group)
    backend = create_backend("beta", {"slots": 3}, registry=registry)
    assert backend.slots == 3  # type: ignore[attr-defined]
    with pytest.raises(PlanError) as caught:
        create_backend("beta", {"slot": 3}, source="plan.toml: backend.options", registry=registry)
    assert str(caught.value) == (
        "plan.toml: backend.options.slot: backend 'beta' has no option 'slot' "
        "(its options: slots, root)"
    )
    with pytest.raises(PlanError, match="rejected its options: slots must be at least 1, got 0"):
        create_backend("beta", {"slots": 0}, registry=registry)


def test_create_backend_turns_other_constructor_errors_into_one_line():
    from altar.execution import AltarError

    class Exploding(InCode):
        name = "exploding"

        def __init__(self) -> None:
            raise RuntimeError("cannot reach the daemon\nat /var/run/docker.sock")

    registry = BackendRegistry("altar.test_no_entry_points")
    registry.register("exploding", Exploding)
    with pytest.raises(AltarError) as caught:
        create_backend("exploding", {}, registry=registry)
    assert str(caught.value) == (
        "backend 'exploding' could not be created: RuntimeError: cannot reach the daemon "
        "at /var/run/docker.sock"
    )


def requiring_source(name: str, requires: tuple[str, ...]) -> str:
    return backend_source(name) + f"\nBackend.requires = {requires!r}\n"


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("kubernetes", "pip install altar-backend-k8s"),
        ("modal", "pip install altar-backend-modal"),
        ("exotic", "pip install --force-reinstall exotic-dist"),
    ],
)
def test_a_required_module_that_is_missing_gives_the_install_hint(plugins, group, name, hint):
    # A backend that imports its SDK lazily loads without it; ``requires`` names the SDK so
    # the registry still reports it missing, as when the import was eager.
    missing = f"not_installed_{uuid.uuid4().hex[:6]}"
    module = plugins.add(
        "exotic-dist",
        {name: "MODULE:Backend"},
        source=requiring_source(name, ("json", missing)),
    )
    registry = BackendRegistry(group)
    with pytest.raises(BackendImportError) as caught:
        registry.get(name)
    message = str(caught.value)
    assert message == (
        f"backend {name!r} from exotic-dist 1.0 ({module}:Backend) cannot be imported: "
        f"module {missing!r} is missing; {hint}"
    )
    assert isinstance(caught.value, ImportError)
    assert list(registry.discover().failures) == [name]


def test_required_modules_are_found_without_importing_them(plugins, group, tmp_path):
    sdk = f"altar_test_sdk_{uuid.uuid4().hex[:6]}"
    (tmp_path / "site" / f"{sdk}.py").write_text("raise RuntimeError('imported')\n")
    plugins.add("sdk-dist", {"sdk": "MODULE:Backend"}, source=requiring_source("sdk", (sdk,)))
    registry = BackendRegistry(group)
    assert registry.get("sdk").requires == (sdk,)  # type: ignore[attr-defined]
    assert sdk not in sys.modules


def test_a_missing_required_module_is_not_cached(plugins, group, tmp_path):
    sdk = f"altar_test_sdk_{uuid.uuid4().hex[:6]}"
    plugins.add("sdk-dist", {"sdk": "MODULE:Backend"}, source=requiring_source("sdk", (sdk,)))
    registry = BackendRegistry(group)
    with pytest.raises(BackendImportError, match=f"module '{sdk}' is missing"):
        registry.get("sdk")
    (tmp_path / "site" / f"{sdk}.py").write_text("")  # pip install it, ask again
    importlib.invalidate_caches()
    assert registry.get("sdk").name == "sdk"


def test_a_missing_submodule_of_a_required_package_is_reported(plugins, group):
    plugins.add(
        "sdk-dist",
        {"sdk": "MODULE:Backend"},
        source=requiring_source("sdk", ("json.not_a_submodule_xyz",)),
    )
    with pytest.raises(BackendImportError, match=r"module 'json\.not_a_submodule_xyz' is missing"):
        BackendRegistry(group).get("sdk")


def test_requires_must_name_modules(plugins, group):
    plugins.add("sdk-dist", {"sdk": "MODULE:Backend"}, source=requiring_source("sdk", ("",)))
    with pytest.raises(BackendValidationError, match="requires must be a tuple of module names"):
        BackendRegistry(group).get("sdk")


def test_a_class_registered_in_code_is_checked_too():
    class NeedsSdk(InCode):
        name = "needs-sdk"
        requires = (f"not_installed_{uuid.uuid4().hex[:6]}",)

    registry = BackendRegistry("altar.test_no_entry_points")
    registry.register("needs-sdk", NeedsSdk)
    with pytest.raises(BackendImportError, match="is missing"):
        registry.get("needs-sdk")
