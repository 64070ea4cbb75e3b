"""Exactly once on a Docker engine (issue 13): create, start, or adopt a submission's container.

The runner puts a durable submission key on every spec (the ``altar.submission`` label); the
container is named ``altar-<key>``, so the engine itself refuses a second container for the key
with a name conflict. A conflict means "already there": the container is inspected, started if
it was only created (its submitter stopped in between), and adopted as it is otherwise, finished
included. A start whose answer never arrived keeps a keyed container for that adoption; an
unkeyed one (altar 0.3.0 specs) is removed, since nobody could find it again.

One case cannot be decided: an engine killed between starting a container's process and
recording that it did restores the container as ``created``, with no trace that it ran (found by
the engine-kill crash test). So a container still ``created`` after a start this instance sent
and never heard back from is not started again; the backend reports its attempt failed (not
deterministic), and the runner's retry runs the task under a new key.

Ownership: the :class:`Launcher` remembers which runs it submitted to (or listed) and which keys
it holds handles for, so ``capacity`` can leave out a killed runner's orphans (issue 13).

Outside the common anatomy because Docker has no create-if-absent: the adopt/start/remove
dance over the seam is long enough for its own module (Kubernetes' pure part is ``adoption``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from contextlib import suppress

from altar.backends.local.render import (
    BACKEND_LABEL,
    BACKEND_LABEL_VALUE,
    RUN_LABEL,
    SUBMISSION_LABEL,
)
from altar.backends.local.runtime import (
    ContainerExistsError,
    ContainerNotFoundError,
    ContainerRequest,
    ContainerSummary,
    DockerRuntime,
    EngineRefusedError,
)
from altar.execution import BackendUnavailableError, ContainerTaskSpec

__all__ = ["Launcher"]


class Launcher:
    """Blocking launches for one backend instance (its methods run in worker threads)."""

    def __init__(
        self,
        runtime: DockerRuntime,
        data_root: str,
        prepare_outputs: Callable[[ContainerTaskSpec], None],
    ) -> None:
        self.runtime = runtime
        self._data_root = data_root
        self._prepare_outputs = prepare_outputs
        self._ownership = threading.Lock()
        self._runs: set[str] = set()  # runs this instance submitted to or listed
        self._owned: set[str] = set()  # submission keys it submitted or adopted
        self._unanswered: set[str] = set()  # keys whose start the engine never answered
        self._undecided: set[str] = set()  # containers that may or may not have run

    def launch(self, spec: ContainerTaskSpec, request: ContainerRequest) -> str:
        """Blocking: create and start, or adopt on a name conflict; the container's id."""
        os.makedirs(self._data_root, exist_ok=True)  # the engine refuses a missing bind source
        try:
            container_id = self.runtime.create(request)
        except ContainerExistsError:
            return self._adopt(spec, request)
        self._start_created(spec, request, container_id)
        return container_id

    def _start_created(
        self, spec: ContainerTaskSpec, request: ContainerRequest, container_id: str
    ) -> None:
        """Start a container that never ran; stale outputs go first (an earlier run's)."""
        self._prepare_outputs(spec)
        try:
            self.runtime.start(container_id)
        except EngineRefusedError:
            # The engine answered: it cannot start. Never leave the container behind.
            with suppress(EngineRefusedError, BackendUnavailableError):
                self.runtime.remove(container_id)
            raise
        except BackendUnavailableError:
            if request.name is None:
                # No key, so nobody can find it again: remove it (if the engine listens)
                # rather than leave a task running that no handle observes.
                with suppress(EngineRefusedError, BackendUnavailableError):
                    self.runtime.remove(container_id)
            else:
                # With a key it stays: the resubmit of this in-doubt submit adopts it by name.
                with self._ownership:
                    self._unanswered.add(request.labels.get(SUBMISSION_LABEL, ""))
            raise

    def _adopt(self, spec: ContainerTaskSpec, request: ContainerRequest) -> str:
        """The container named for this submission already exists: take it as it is."""
        name = request.name
        key = request.labels.get(SUBMISSION_LABEL, "")
        assert name is not None  # a conflict needs a name
        try:
            detail = self.runtime.inspect(name)
        except ContainerNotFoundError:
            # Removed between the conflict and the look (a cleanup): this submit creates it.
            container_id = self.runtime.create(request)
            self._start_created(spec, request, container_id)
            return container_id
        if (
            detail.labels.get(SUBMISSION_LABEL) != key
            or detail.labels.get(BACKEND_LABEL) != BACKEND_LABEL_VALUE
        ):
            raise EngineRefusedError(
                409,
                f"a container named {name!r} exists on the engine, but the local backend did "
                f"not create it for submission {key}; remove it (`docker rm -f {name}`)",
            )
        if detail.state == "created":
            with self._ownership:
                unanswered = key in self._unanswered
                if unanswered:
                    self._undecided.add(detail.id)
            if not unanswered:
                self._start_created(spec, request, detail.id)  # its submitter stopped in between
        elif detail.state == "removing":
            raise BackendUnavailableError(
                f"container {detail.id} of submission {key} is being removed; submit again "
                "once it is gone"
            )
        return detail.id

    def undecided(self, container_id: str) -> bool:
        """Whether ``container_id`` may or may not have run (see the module doc)."""
        with self._ownership:
            return container_id in self._undecided

    def own(self, labels: dict[str, str]) -> None:
        """Note a submission this instance holds a handle for (``capacity`` counts it)."""
        run, key = labels.get(RUN_LABEL), labels.get(SUBMISSION_LABEL)
        with self._ownership:
            if run is not None:
                self._runs.add(run)
            if key is not None:
                self._owned.add(key)

    def note_run(self, run: str) -> None:
        """This instance serves ``run`` (it listed its submissions)."""
        with self._ownership:
            self._runs.add(run)

    def counts(self, container: ContainerSummary) -> bool:
        """Whether a live container holds a slot: started, not being removed, not an orphan
        (a container of a run this instance serves whose submission it does not hold)."""
        if container.state in ("created", "removing"):
            return False
        with self._ownership:
            run = container.labels.get(RUN_LABEL)
            return run not in self._runs or container.labels.get(SUBMISSION_LABEL) in self._owned
