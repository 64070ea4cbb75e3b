"""Portable paths in plans: ``{altar:mount_root}`` and ``{altar:path:LOGICAL}``.

A task's command and env may name where the shared volume is mounted without hard-coding a
backend's root (``/mnt/volume`` on Docker, another on Kubernetes, Modal, Slurm or in-process):

- ``{altar:mount_root}`` becomes the backend's mount root (``path_resolver().mount_root``);
- ``{altar:path:demo/variants.tsv}`` becomes that logical path as the task sees it
  (``path_resolver().resolve("demo/variants.tsv")``), so a backend that maps paths its own way
  is honoured too.

The runner expands them just before each submit, through the backend that runs the task; the
plan and its journal keep the unexpanded text, so one plan (and one run's spec digests) is the
same on every backend. The ``altar:`` prefix keeps shell and awk braces (``${HOME}``,
``{print $1}``) untouched; an unknown ``{altar:...}`` is refused when the plan is read, with one
line naming the field.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import replace

from altar.execution.types import ContainerTaskSpec, PathResolver

__all__ = ["PLACEHOLDER", "expand", "expand_spec", "has_placeholders", "placeholder_error"]

#: Anything that looks like one of ours: ``{altar:`` up to the next ``}``.
PLACEHOLDER = re.compile(r"\{altar:([^{}]*)\}")
_KNOWN = "{altar:mount_root} or {altar:path:LOGICAL_PATH}"


def placeholder_error(text: str) -> str | None:
    """Why ``text`` holds a placeholder altar cannot expand, or None if every one is known."""
    if "{altar:" in text and not PLACEHOLDER.search(text):
        return f"unterminated placeholder in {text!r}; use {_KNOWN}"
    for match in PLACEHOLDER.finditer(text):
        body = match.group(1)
        if body == "mount_root":
            continue
        if body.startswith("path:"):
            logical = body.removeprefix("path:")
            if not logical:
                return f"placeholder {match.group()} names no logical path"
            # the same check every PathResolver makes, against any root
            joined = posixpath.normpath(f"/root/{logical.lstrip('/')}")
            if joined != "/root" and not joined.startswith("/root/"):
                return f"placeholder {match.group()} leaves the mount root"
            continue
        return f"unknown placeholder {match.group()}; use {_KNOWN}"
    tail = PLACEHOLDER.sub("", text)
    if "{altar:" in tail:
        return f"unterminated placeholder in {text!r}; use {_KNOWN}"
    return None


def expand(text: str, resolver: PathResolver) -> str:
    """``text`` with every placeholder replaced (ValueError for one that is not known)."""

    def one(match: re.Match[str]) -> str:
        body = match.group(1)
        if body == "mount_root":
            return resolver.mount_root.rstrip("/")
        if body.startswith("path:") and body != "path:":
            return resolver.resolve(body.removeprefix("path:"))
        raise ValueError(f"unknown placeholder {match.group()}; use {_KNOWN}")

    return PLACEHOLDER.sub(one, text) if "{altar:" in text else text


def has_placeholders(spec: ContainerTaskSpec) -> bool:
    """Whether ``spec``'s command or env values hold a placeholder (what :func:`expand_spec`
    expands). One substring test over the texts joined by NUL, which no placeholder holds."""
    return "{altar:" in "\0".join(spec.command) or (
        bool(spec.env) and "{altar:" in "\0".join(spec.env.values())
    )


def expand_spec(spec: ContainerTaskSpec, resolver: PathResolver) -> ContainerTaskSpec:
    """``spec`` with placeholders in its command and env values expanded (the same spec if none)."""
    if not has_placeholders(spec):
        return spec
    return replace(
        spec,
        command=[expand(arg, resolver) for arg in spec.command],
        env={key: expand(value, resolver) for key, value in spec.env.items()},
    )
