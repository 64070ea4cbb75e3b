"""A task's cache key: the sha256 of a canonical encoding of what determines its outputs.

The fields, and why each is in or out:

- ``image``: the image's content digest (``sha256:...``), from a digest-pinned reference
  (``repo@sha256:...``) or the digest the backend resolved before submit. A mutable tag alone
  makes a task uncacheable, unless the plan trusts tags (then the tag text is the field).
- ``command`` and ``env``: as the plan writes them, portable placeholders unexpanded, so one
  plan hits across backends; env values enter by their sha256, so no secret is kept.
- ``inputs``: logical path -> digest of every input (declared, or hashed at staging through
  verification records; an input another task of the plan writes is that task's key).
- ``outputs``: the logical paths the task declares (a task asked for another file is another
  task).
- ``gpu``: the pool and device count, when a GPU is asked for (numerics may differ by kind).
- ``cache_version``: the plan's salt; change it to invalidate every entry of the plan.

Not in the key: the backend, CPU, memory, timeout, labels, the input uris (the same bytes read
from elsewhere are the same input) and the task id (two tasks that do the same work share it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from altar.execution.errors import UncacheableError
from altar.execution.types import ContainerTaskSpec, is_sha256_digest

__all__ = [
    "KEY_FORMAT",
    "TaskKey",
    "UncacheableError",
    "canonical_json",
    "explain",
    "image_identity",
    "task_key",
]

KEY_FORMAT = "altar-task-key/1"


#: The one canonical encoding (sorted keys, no spaces, UTF-8 as is), made once: json.dumps with
#: options builds a new encoder per call.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_json(fields: Mapping[str, Any]) -> str:
    """The canonical JSON text of a key's fields (what its digest is taken over)."""
    return _CANONICAL.encode(fields)


@dataclass(frozen=True)
class TaskKey:
    """``digest`` (``sha256:<hex>``) over the canonical JSON of ``fields``."""

    digest: str
    fields: Mapping[str, Any]
    _canonical: str | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def hex(self) -> str:
        return self.digest.removeprefix("sha256:")

    @property
    def canonical(self) -> str:
        """:func:`canonical_json` of ``fields``, as encoded when the key was made."""
        return self._canonical if self._canonical is not None else canonical_json(self.fields)


def image_identity(image: str, resolved: str | None = None, *, trust_tags: bool = False) -> str:
    """The ``image`` field: a pinned digest, else the tag if trusted, else ``resolved``.

    A trusted tag is keyed by its text even where a backend could resolve it, so the same plan
    keys alike on every backend (one that resolves tags and one that cannot).
    """
    _, at, pinned = image.rpartition("@")
    if at and is_sha256_digest(pinned):
        return pinned
    if trust_tags:
        return f"tag:{image}"
    if resolved is not None:
        if not is_sha256_digest(resolved):
            raise ValueError(f"a resolved image digest must be sha256:<64 hex>, got {resolved!r}")
        return resolved
    raise UncacheableError(
        f"image {image!r} is a tag, which may point at other bytes tomorrow: pin it "
        "(repo@sha256:...) or set cache_trust_tags = true in the plan"
    )


def task_key(
    spec: ContainerTaskSpec,
    *,
    image: str,
    inputs: Mapping[str, str],
    cache_version: str = "",
) -> TaskKey:
    """The key of ``spec``; ``image`` from :func:`image_identity`, ``inputs`` by logical path."""
    missing = [t.logical_path for t in spec.inputs if t.logical_path not in inputs]
    if missing:
        raise ValueError(f"no digest for input(s) {', '.join(missing)}")
    gpu = spec.resources.gpu
    fields: dict[str, Any] = {
        "format": KEY_FORMAT,
        "image": image,
        "command": list(spec.command),
        # values by digest: a secret in env never lands in a manifest, yet a change is a miss
        "env": {name: _text_digest(value) for name, value in sorted(spec.env.items())},
        "inputs": {t.logical_path: inputs[t.logical_path] for t in spec.inputs},
        "outputs": sorted(t.logical_path for t in spec.outputs),
        "gpu": {"pool": gpu, "count": spec.resources.count} if gpu else None,
        "cache_version": cache_version,
    }
    fields["inputs"] = dict(sorted(fields["inputs"].items()))
    text = canonical_json(fields)
    return TaskKey(_text_digest(text), fields, text)


def _text_digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def explain(wanted: Mapping[str, Any], nearest: Mapping[str, Any]) -> list[str]:
    """Why ``wanted`` (a key's fields) misses ``nearest``: one line per differing field."""
    lines: list[str] = []
    for name in ("format", "image", "command", "outputs", "gpu", "cache_version"):
        if wanted.get(name) != nearest.get(name):
            lines.append(
                f"{name} changed: {_short(nearest.get(name))} -> {_short(wanted.get(name))}"
            )
    for label, field in (("input", "inputs"), ("env", "env")):
        now: Mapping[str, Any] = wanted.get(field) or {}
        then: Mapping[str, Any] = nearest.get(field) or {}
        for name in sorted(set(now) | set(then)):
            if name not in then:
                lines.append(f"{label} {name} added")
            elif name not in now:
                lines.append(f"{label} {name} removed")
            elif now[name] != then[name] and field == "env":
                lines.append(f"env {name} value changed")  # values are never shown
            elif now[name] != then[name]:
                was, now_is = _short(then[name]), _short(now[name])
                lines.append(f"input {name} digest changed: {was} -> {now_is}")
    return lines


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value
    if text.startswith("sha256:") and len(text) == 71:
        return text[:19] + "…"
    return text if len(text) <= 60 else text[:57] + "..."
