"""The task cache: never pay twice across runs for a task whose result is already known.

:mod:`.key` turns a task into the sha256 of what determines its outputs; :mod:`.store` keeps
each successful task's outputs by content digest under that key, and serves them, verified,
to a later run. See ``docs/guide/cache.md``.
"""

from altar.execution.cache.key import KEY_FORMAT, TaskKey, UncacheableError, explain, task_key
from altar.execution.cache.settings import CacheSettings
from altar.execution.cache.store import CacheEntry, CacheStore, default_store_dir

__all__ = [
    "KEY_FORMAT",
    "CacheEntry",
    "CacheSettings",
    "CacheStore",
    "TaskKey",
    "UncacheableError",
    "default_store_dir",
    "explain",
    "task_key",
]
