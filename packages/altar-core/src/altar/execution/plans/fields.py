"""What every part of plan parsing shares: the error callback, field checks, uri resolution."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from altar.execution.errors import PlanError

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_TASK_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
#: In ``outputs_dir`` or an output uri: the run directory's name, so each run collects apart.
RUN_PLACEHOLDER = "{altar:run}"


Fail = Callable[[str, str], PlanError]


def _kind(value: object) -> str:
    names = {dict: "a table", list: "a list", str: "a string", bool: "a boolean"}
    for cls, label in names.items():
        if isinstance(value, cls):
            return label
    return type(value).__name__


def _check_keys(data: Mapping[str, Any], allowed: Sequence[str], where: str, fail: Fail) -> None:
    for key in data:
        if key not in allowed:
            path = f"{where}.{key}" if where else str(key)
            raise fail(path, f"unknown field (expected one of: {', '.join(allowed)})")


def _message(error: Exception) -> str:
    return " ".join(str(error).split())


def _construct(where: str, fail: Fail, cls: Callable[..., Any], **kwargs: Any) -> Any:
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as error:
        raise fail(where, _message(error)) from None


def _resolve_uri(uri: str, base_dir: str | Path | None) -> str:
    if base_dir is None:
        return uri
    # most of a large plan's uris: a plain relative path ("out/o1": no empty, "." or ".."
    # part, so no scheme either) below a normalized local folder, which normpath(join) would
    # only join
    base = _local_folder(base_dir)
    if base is not None and uri and uri[0] != "/":
        parts = uri.split("/")
        if "" not in parts and "." not in parts and ".." not in parts:
            return f"{base}/{uri}" if base != "/" else f"/{uri}"
    if _SCHEME.match(uri) or os.path.isabs(uri):
        return uri
    if _SCHEME.match(str(base_dir)):  # outputs_dir = "gs://bucket/results/{altar:run}"
        return f"{str(base_dir).rstrip('/')}/{uri.removeprefix('./')}"
    return os.path.normpath(os.path.join(base_dir, uri))


@functools.lru_cache(maxsize=64)
def _local_folder(base_dir: str | Path) -> str | None:
    """``base_dir`` as text if it is an absolute, normalized local folder, else None."""
    text = os.fspath(base_dir)
    if _SCHEME.match(text) or not os.path.isabs(text) or os.path.normpath(text) != text:
        return None
    return text
