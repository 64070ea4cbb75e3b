"""The backend's plan options that need more than a type check."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable, Mapping, Sequence

from altar.backends.slurm.render import CONTAINER_RUNTIMES

__all__ = [
    "DATA_ROOT_ENV",
    "data_root",
    "extra_directives",
    "gpu_types",
    "runtime_words",
    "seconds",
]

#: Where the data root comes from when the plan names none.
DATA_ROOT_ENV = "ALTAR_SLURM_DATA_ROOT"


def extra_directives(
    value: Mapping[str, str | bool | None] | Iterable[tuple[str, str | bool | None]] | None,
) -> tuple[tuple[str, str | None], ...]:
    """``{"--constraint": "avx2", "--exclusive": true}``: ``true`` (TOML has no null) or None
    writes a valueless directive; ``false`` leaves the option out."""
    if value is None:
        return ()
    items = list(value.items()) if isinstance(value, Mapping) else list(value)
    pairs: list[tuple[str, str | None]] = []
    for item in items:
        option, directive = item
        if directive is False:
            continue
        if directive is True:
            directive = None
        if not isinstance(option, str) or not (directive is None or isinstance(directive, str)):
            raise ValueError(
                f"extra_directives: {item!r} is not an option and a string value "
                "(true for a directive without a value)"
            )
        pairs.append((option if option.startswith("--") else f"--{option}", directive))
    return tuple(pairs)


def gpu_types(value: Mapping[str, str | bool | None] | None) -> dict[str, str | None]:
    """GPU pool -> GRES type; ``true`` (TOML has no null) or None: any type of the pool."""
    if value is None:
        return {"gpu": None}
    pools: dict[str, str | None] = {}
    for pool, kind in value.items():
        if kind is True or kind is None:
            pools[pool] = None
        elif isinstance(kind, str) and kind:
            pools[pool] = kind
        else:
            raise ValueError(
                f"gpu_types.{pool}: {kind!r} is not a GRES type; give a type such as "
                '"a100", or true for any type'
            )
    return pools


def data_root(value: str | os.PathLike[str] | None, *, remote: bool) -> str:
    """The data root as the login node names it: absolute (required over ssh)."""
    root = value if value is not None else os.environ.get(DATA_ROOT_ENV)
    if root is None and remote:
        raise ValueError(
            "the slurm backend over ssh needs data_root: an absolute directory on the "
            "cluster's shared filesystem"
        )
    text = os.fspath(root or ".altar-slurm-data")
    if not remote:
        return os.path.abspath(text)
    if not posixpath.isabs(text):
        raise ValueError(f"data_root {text!r} must be absolute on the cluster")
    return posixpath.normpath(text)


def seconds(option: str, value: object) -> float:
    """A number of seconds >= 0 (``queue_interval_s``, ``exit_read_timeout_s``)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ValueError(f"{option} must be a number of seconds >= 0, got {value!r}")
    return float(value)


def runtime_words(
    runtime: str, options: Sequence[str], env: Mapping[str, str] | None
) -> tuple[list[str], dict[str, str]]:
    """The container runtime's options and environment, checked."""
    if runtime not in CONTAINER_RUNTIMES:
        raise ValueError(
            f"container_runtime must be one of {', '.join(CONTAINER_RUNTIMES)}, got {runtime!r}"
        )
    if not all(isinstance(word, str) for word in options):
        raise ValueError("runtime_options must be a list of strings")
    checked = dict(env or {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in checked.items()):
        raise ValueError("runtime_env must map names to string values")
    return list(options), checked
