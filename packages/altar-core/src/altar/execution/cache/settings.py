"""How a run uses the task cache: the plan's ``[cache]`` table, or ``altar run --cache DIR``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["CacheSettings"]


@dataclass(frozen=True)
class CacheSettings:
    """``store_dir`` (None: the default store), the key's ``version`` salt, ``trust_tags``."""

    store_dir: Path | None = None
    version: str = ""
    trust_tags: bool = False
