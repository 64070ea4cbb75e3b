"""Keeping a container's logs past its removal, so ``altar logs`` works for finished tasks.

``cleanup`` removes containers, and their logs with them. Before it does, :class:`LogKeeper`
saves each one's stdout and stderr under ``<data_root>/.altar-logs/<container id>/`` (files
0600, written whole through a temporary file): the data root is the one directory the backend
owns and can write; it does not know the run directory. Saved before the removal, so a process
killed in between leaves the container, and the next cleanup saves them again; that one first
removes the temporary file the killed process was writing, when the runner names it among its
earlier processes (:func:`~altar.execution.atomic.sweeping_for`).
"""

from __future__ import annotations

import os

from altar.backends.local.runtime import ContainerNotFoundError, DockerRuntime
from altar.execution import TaskLogs
from altar.execution.atomic import atomic_write, remove_stale_temporaries, stale_owners

__all__ = ["LOG_DIR", "LogKeeper"]

#: Under the data root: one directory per removed container, holding ``stdout`` and ``stderr``.
LOG_DIR = ".altar-logs"


class LogKeeper:
    """Saves and reads back containers' logs (blocking; the backend calls it in a thread).

    Container ids are the backend's checked hex ids, never a path a caller chose.
    """

    def __init__(self, runtime: DockerRuntime, data_root: str) -> None:
        self.runtime = runtime
        self.data_root = data_root

    def directory(self, container_id: str) -> str:
        return os.path.join(self.data_root, LOG_DIR, container_id)

    def save(self, container_id: str) -> None:
        """One logs request; nothing for a container that is already gone."""
        try:
            streams = self.runtime.logs(container_id)
        except ContainerNotFoundError:
            return
        directory = self.directory(container_id)
        os.makedirs(directory, mode=0o700, exist_ok=True)
        remove_stale_temporaries(directory, stale_owners())  # a killed save's, if any
        atomic_write(os.path.join(directory, "stdout"), streams.stdout.encode())
        atomic_write(os.path.join(directory, "stderr"), streams.stderr.encode())

    def saved(self, container_id: str) -> TaskLogs | None:
        texts = []
        for stream in ("stdout", "stderr"):
            path = os.path.join(self.directory(container_id), stream)
            try:
                with open(path, encoding="utf-8", errors="replace") as handle:
                    texts.append(handle.read())
            except FileNotFoundError:
                return None
        return TaskLogs(texts[0], texts[1])
