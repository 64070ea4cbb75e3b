"""Find execution backends through the ``altar.execution_backends`` entry-point group.

Listing names reads only distribution metadata; a backend's module is imported the first
time its class is asked for, then validated (a concrete ``ExecutionBackend`` subclass whose
``name`` equals its key) and cached. A backend that imports its provider SDK lazily names it
in a ``requires`` class attribute (``("modal",)``); the registry looks each name up with
:func:`importlib.util.find_spec`, without importing it, and reports a missing one as
:class:`BackendImportError` with an install hint, as if the backend module had imported it.
Every failure is a :class:`RegistryError` whose message is one line saying what to do, e.g.
which distribution to ``pip install``.

The module-level functions act on one process-wide :class:`BackendRegistry`; tests and tools
may build their own registry over another entry-point group.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from altar.execution.backend import EXECUTION_BACKEND_GROUP, ExecutionBackend
from altar.execution.errors import (
    AltarError,
    BackendImportError,
    BackendUnavailableError,
    BackendValidationError,
    DuplicateBackendError,
    PlanError,
    RegistryError,
)

__all__ = [
    "KNOWN_DISTRIBUTIONS",
    "BackendEntry",
    "BackendRegistry",
    "DiscoveryReport",
    "backend_names",
    "create_backend",
    "default_registry",
    "discover",
    "entries",
    "get_backend_class",
    "register",
]

#: Which distribution provides each backend this project maintains (for install hints).
KNOWN_DISTRIBUTIONS: Mapping[str, str] = {
    "kubernetes": "altar-backend-k8s",
    "local": "altar-backend-local",
    "modal": "altar-backend-modal",
}

BackendClass = type[ExecutionBackend]


@dataclass(frozen=True)
class BackendEntry:
    """One installed backend as its metadata declares it (nothing imported)."""

    name: str
    value: str
    distribution: str | None
    version: str | None = None

    @property
    def origin(self) -> str:
        """``dist-name version (module:attr)`` or ``registered in code``."""
        if self.distribution is None:
            return f"{self.value}" if self.value else "registered in code"
        version = f" {self.version}" if self.version else ""
        return f"{self.distribution}{version} ({self.value})"


@dataclass(frozen=True)
class DiscoveryReport:
    """The outcome of loading every installed backend: healthy classes and why others failed."""

    healthy: dict[str, BackendClass] = field(default_factory=dict)
    failures: dict[str, RegistryError] = field(default_factory=dict)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _install_hint(name: str, entry: BackendEntry | None) -> str | None:
    if name in KNOWN_DISTRIBUTIONS:
        return f"pip install {KNOWN_DISTRIBUTIONS[name]}"
    if entry is not None and entry.distribution:
        return f"pip install --force-reinstall {entry.distribution}"
    return None


def _validate(name: str, obj: object, origin: str) -> BackendClass:
    if not (isinstance(obj, type) and issubclass(obj, ExecutionBackend)):
        raise BackendValidationError(
            f"backend {name!r} from {origin} is {obj!r}, not a subclass of "
            "altar.execution.ExecutionBackend"
        )
    declared = getattr(obj, "name", None)
    if declared != name:
        raise BackendValidationError(
            f"backend class {obj.__module__}.{obj.__qualname__} from {origin} has name "
            f"{declared!r} but is registered as {name!r}; its name must equal its key"
        )
    if inspect.isabstract(obj):
        missing = ", ".join(sorted(getattr(obj, "__abstractmethods__", ())))
        raise BackendValidationError(f"backend {name!r} from {origin} does not implement {missing}")
    return obj


def _missing_module(cls: BackendClass, origin: str) -> str | None:
    """The first module of ``cls.requires`` that cannot be found (none is imported)."""
    requires = getattr(cls, "requires", ())
    if not isinstance(requires, tuple | list) or not all(
        isinstance(module, str) and module and not module.startswith(".") for module in requires
    ):
        raise BackendValidationError(
            f"backend {cls.name!r} from {origin}: requires must be a tuple of module names "
            f"(such as ('modal',)), got {requires!r}"
        )
    module: str
    for module in requires:
        if sys.modules.get(module) is not None:
            continue  # already imported (None there marks an import that failed)
        try:
            # For a dotted name this imports its parent packages, never the module itself.
            found = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            found = None
        if found is None:
            return module
    return None


class BackendRegistry:
    """Backends of one entry-point group plus those registered in code.

    Programmatic registrations win over entry points of the same name only with
    ``replace=True``; loaded classes are cached, failures are not (installing the missing
    dependency and asking again works without restarting).
    """

    def __init__(
        self,
        group: str = EXECUTION_BACKEND_GROUP,
        *,
        entry_points: Callable[[str], Iterable[metadata.EntryPoint]] | None = None,
    ) -> None:
        self.group = group
        self._entry_points = entry_points or (lambda g: metadata.entry_points(group=g))
        self._programmatic: dict[str, BackendClass] = {}
        self._cache: dict[str, BackendClass] = {}

    # -- metadata only ------------------------------------------------------------------

    def _installed(self) -> dict[str, list[tuple[BackendEntry, metadata.EntryPoint]]]:
        found: dict[str, list[tuple[BackendEntry, metadata.EntryPoint]]] = {}
        seen: set[tuple[str, str, str | None]] = set()
        for ep in self._entry_points(self.group):
            dist = ep.dist
            dist_name = dist.name if dist is not None else None
            version = dist.version if dist is not None else None
            key = (ep.name, ep.value, dist_name)
            if key in seen:  # the same distribution visible twice on sys.path
                continue
            seen.add(key)
            entry = BackendEntry(ep.name, ep.value, dist_name, version)
            found.setdefault(ep.name, []).append((entry, ep))
        for claims in found.values():
            claims.sort(key=lambda claim: (claim[0].distribution or "", claim[0].value))
        return found

    def names(self) -> list[str]:
        """Every backend name, sorted, without importing any backend."""
        return sorted(set(self._installed()) | set(self._programmatic))

    def entries(self) -> list[BackendEntry]:
        """Every installed or registered backend as declared (duplicates included)."""
        result = [entry for claims in self._installed().values() for entry, _ in claims]
        for name, cls in self._programmatic.items():
            result.append(BackendEntry(name, f"{cls.__module__}:{cls.__qualname__}", None))
        return sorted(result, key=lambda e: (e.name, e.distribution or "", e.value))

    # -- loading ------------------------------------------------------------------------

    def get(self, name: str) -> BackendClass:
        """The backend class registered as ``name``, imported and validated on first use."""
        if name in self._programmatic:
            cls = self._programmatic[name]
            self._check_requires(name, cls, None)
            return cls
        if name in self._cache:
            return self._cache[name]
        installed = self._installed()
        claims = installed.get(name)
        if not claims:
            available = ", ".join(self.names()) or "none"
            hint = _install_hint(name, None)
            import difflib  # only for this message: it costs start-up

            close = difflib.get_close_matches(name, self.names(), n=1)
            guess = f"; did you mean {close[0]!r}?" if close and not hint else ""
            message = (
                f"no execution backend named {name!r} is installed{guess} (available: {available})"
            )
            raise RegistryError(message + (f"; to add it: {hint}" if hint else ""))
        if len(claims) > 1:
            origins = " and ".join(entry.origin for entry, _ in claims)
            raise DuplicateBackendError(
                f"backend name {name!r} is registered by more than one distribution: {origins}; "
                "uninstall all but one of them"
            )
        entry, ep = claims[0]
        try:
            obj = ep.load()
        except ImportError as error:
            hint = _install_hint(name, entry)
            missing = f"module {error.name!r} is missing" if error.name else _one_line(str(error))
            message = f"backend {name!r} from {entry.origin} cannot be imported: {missing}"
            raise BackendImportError(message + (f"; {hint}" if hint else "")) from error
        except Exception as error:
            raise BackendImportError(
                f"backend {name!r} from {entry.origin} failed to import: "
                f"{type(error).__name__}: {_one_line(str(error))}"
            ) from error
        cls = _validate(name, obj, entry.origin)
        self._check_requires(name, cls, entry)
        self._cache[name] = cls
        return cls

    @staticmethod
    def _check_requires(name: str, cls: BackendClass, entry: BackendEntry | None) -> None:
        origin = entry.origin if entry is not None else "code"
        missing = _missing_module(cls, origin)
        if missing is None:
            return
        hint = _install_hint(name, entry)
        message = (
            f"backend {name!r} from {origin} cannot be imported: module {missing!r} is missing"
        )
        raise BackendImportError(message + (f"; {hint}" if hint else ""))

    def register(self, name: str, cls: BackendClass, *, replace: bool = False) -> None:
        """Register a backend class in code (tests, notebooks, embedding applications)."""
        _validate(name, cls, "code")
        if not replace:
            if name in self._programmatic:
                raise RegistryError(
                    f"backend {name!r} is already registered in code; "
                    "pass replace=True to replace it"
                )
            claims = self._installed().get(name)
            if claims:
                raise RegistryError(
                    f"backend {name!r} is already provided by {claims[0][0].origin}; "
                    "pass replace=True to override it"
                )
        self._programmatic[name] = cls

    def unregister(self, name: str) -> None:
        """Forget a programmatic registration (no-op if there is none)."""
        self._programmatic.pop(name, None)

    def clear_cache(self) -> None:
        """Forget loaded classes so the next lookup reads the metadata again."""
        self._cache.clear()

    def discover(self) -> DiscoveryReport:
        """Load every backend; broken ones are reported, never fatal."""
        report = DiscoveryReport()
        for name in self.names():
            try:
                report.healthy[name] = self.get(name)
            except RegistryError as error:
                report.failures[name] = error
        return report


default_registry = BackendRegistry()


def backend_names() -> list[str]:
    """Names of every installed backend, without importing any of them."""
    return default_registry.names()


def entries() -> list[BackendEntry]:
    """Every installed backend as its metadata declares it."""
    return default_registry.entries()


def get_backend_class(name: str) -> BackendClass:
    """Import, validate and cache the backend class registered as ``name``."""
    return default_registry.get(name)


def register(name: str, cls: BackendClass, *, replace: bool = False) -> None:
    """Register a backend class in code under ``name`` (which must equal ``cls.name``)."""
    default_registry.register(name, cls, replace=replace)


def discover() -> DiscoveryReport:
    """Load every installed backend and report the healthy ones and why the others failed."""
    return default_registry.discover()


def create_backend(
    name: str,
    options: Mapping[str, Any] | None = None,
    *,
    source: str = "backend",
    registry: BackendRegistry | None = None,
) -> ExecutionBackend:
    """Build backend ``name`` from keyword options, as ``cls(**options)``.

    An option the constructor does not accept, a missing required one, or an error the
    constructor raises about a value becomes one :class:`PlanError` line prefixed with
    ``source`` (e.g. ``plan.toml: backend.options``) naming the option.
    """
    cls = (registry or default_registry).get(name)
    options = dict(options or {})
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
        signature = None
    if signature is not None:
        params = signature.parameters
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        accepted = [
            p.name
            for p in params.values()
            if p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        ]
        unknown = sorted(key for key in options if key not in accepted)
        if unknown and not takes_any:
            known = ", ".join(accepted) or "none"
            raise PlanError(
                f"{source}.{unknown[0]}: backend {name!r} has no option {unknown[0]!r} "
                f"(its options: {known})"
            )
        required = [
            p.name
            for p in params.values()
            if p.default is inspect.Parameter.empty
            and p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
            and p.name not in options
        ]
        if required:
            raise PlanError(f"{source}.{required[0]}: backend {name!r} requires this option")
    try:
        return cls(**options)
    except (TypeError, ValueError) as error:
        raise PlanError(
            f"{source}: backend {name!r} rejected its options: {_one_line(str(error))}"
        ) from error
    except BackendUnavailableError:
        raise
    except Exception as error:
        raise AltarError(
            f"backend {name!r} could not be created: {type(error).__name__}: "
            f"{_one_line(str(error))}"
        ) from error
