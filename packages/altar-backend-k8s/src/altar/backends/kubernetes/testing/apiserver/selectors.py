"""Label selectors as the API server reads them (equality- and set-based)."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Requirement", "matches_selector", "parse_selector"]


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        if self.op == "exists":
            return self.key in labels
        if self.op == "!":
            return self.key not in labels
        if self.op in ("=", "in"):
            return labels.get(self.key) in self.values
        # "!=" and "notin" also match objects without the key (Kubernetes semantics)
        return labels.get(self.key) not in self.values


def _split_top_level(selector: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def parse_selector(selector: str) -> list[Requirement]:
    """Parse a label selector (``k=v``, ``k==v``, ``k!=v``, ``k``, ``!k``, ``k in (a,b)``,
    ``k notin (a,b)``); raise ValueError for anything else."""
    requirements = []
    for part in _split_top_level(selector):
        set_match = re.fullmatch(r"(\S+)\s+(in|notin)\s+\((.*)\)", part)
        if set_match:
            values = tuple(v.strip() for v in set_match.group(3).split(",") if v.strip())
            requirements.append(Requirement(set_match.group(1), set_match.group(2), values))
        elif "!=" in part:
            key, value = part.split("!=", 1)
            requirements.append(Requirement(key.strip(), "!=", (value.strip(),)))
        elif "=" in part:
            key, value = re.split(r"==?", part, maxsplit=1)
            requirements.append(Requirement(key.strip(), "=", (value.strip(),)))
        elif part.startswith("!"):
            requirements.append(Requirement(part[1:].strip(), "!"))
        elif re.fullmatch(r"[A-Za-z0-9._/-]+", part):
            requirements.append(Requirement(part, "exists"))
        else:
            raise ValueError(f"unable to parse requirement: {part!r}")
    return requirements


def matches_selector(labels: dict[str, str] | None, selector: str | None) -> bool:
    if not selector:
        return True
    return all(r.matches(labels or {}) for r in parse_selector(selector))
