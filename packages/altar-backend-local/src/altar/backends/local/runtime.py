"""The runtime seam: the few Docker Engine operations the backend needs, as plain values.

:class:`DockerRuntime` is what the backend talks to.
:class:`~altar.backends.local.sdk_runtime.DockerSdkRuntime` implements it with the docker SDK
against a real engine; :class:`~altar.backends.local.fake.FakeDockerRuntime` implements it in
memory for tests. Only plain values cross the seam, and every method is
synchronous (the backend calls them through :func:`asyncio.to_thread`). The labels this
backend's containers carry live here too: :mod:`.render` writes them and :mod:`.classify` and the
poller read them back, so the two pure modules take them from the seam, not from each other.

Errors crossing the seam:

- :class:`ContainerNotFoundError` — the engine answered that the container does not exist (404);
- :class:`~altar.execution.BackendUnavailableError` — the engine could not be reached, timed out
  or answered with a server error (5xx); the container may well exist;
- :class:`EngineRefusedError` — the engine understood the request and refused it (other 4xx/5xx
  answers that name a reason, e.g. a CPU quota above the host's CPUs);
- :class:`ContainerExistsError` (an :class:`EngineRefusedError`, 409) — a create named a
  container that already exists: the submission it names may be adopted (issue 13).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

#: Identity label on every container this backend starts (lists and events filter on it).
BACKEND_LABEL = "altar.backend"
BACKEND_LABEL_VALUE = "local"
#: The task's wall-clock limit in seconds (same key as altar 0.3.0, so its containers read too).
TIMEOUT_LABEL = "altar.timeout_s"
RESERVED_LABELS = frozenset({BACKEND_LABEL, TIMEOUT_LABEL})
#: Container states that have not ended (the engine's ``status`` filter values).
LIVE_CONTAINER_STATES = ("created", "running", "paused", "restarting", "removing")

__all__ = [
    "BACKEND_LABEL",
    "BACKEND_LABEL_VALUE",
    "LIVE_CONTAINER_STATES",
    "RESERVED_LABELS",
    "TIMEOUT_LABEL",
    "ContainerDetail",
    "ContainerEvent",
    "ContainerExistsError",
    "ContainerNotFoundError",
    "ContainerRequest",
    "ContainerSummary",
    "DockerRuntime",
    "EngineRefusedError",
    "EventStream",
    "LogTail",
    "timeout_from_labels",
]


class ContainerNotFoundError(LookupError):
    """The engine reports that no container has this id."""


class EngineRefusedError(RuntimeError):
    """The engine refused a request; ``status`` is the HTTP status, ``explanation`` its reason."""

    def __init__(self, status: int, explanation: str) -> None:
        super().__init__(f"the Docker engine refused the request ({status}): {explanation}")
        self.status = status
        self.explanation = explanation


class ContainerExistsError(EngineRefusedError):
    """A create asked for a name the engine already has a container under."""

    def __init__(self, name: str, explanation: str) -> None:
        super().__init__(409, explanation)
        self.name = name


@dataclass(frozen=True)
class ContainerRequest:
    """Everything needed to create one container, already mapped from a task spec."""

    image: str
    command: list[str]
    labels: dict[str, str]
    environment: dict[str, str] = field(default_factory=dict)
    user: str | None = None
    nano_cpus: int | None = None
    memory_bytes: int | None = None  # also the memory+swap limit, so the limit is real
    gpu_count: int = 0
    binds: dict[str, str] = field(default_factory=dict)  # host path -> container path (rw)
    network_mode: str = "none"
    name: str | None = None  # deterministic for a submission key; None lets the engine pick


@dataclass(frozen=True)
class ContainerSummary:
    """One row of a container listing (what a single list request returns per container)."""

    id: str
    state: str  # created, running, paused, restarting, removing, exited, dead
    created: int  # engine epoch seconds
    labels: dict[str, str]


@dataclass(frozen=True)
class ContainerDetail:
    """The terminal facts an inspect returns."""

    id: str
    state: str
    exit_code: int
    oom_killed: bool
    finished_at: float | None  # engine epoch seconds; None while it never finished
    started_at: float | None = None  # engine epoch seconds; None while it never started
    labels: dict[str, str] = field(default_factory=dict)
    pid: int | None = None  # its main process as the engine knows it; None when not running


@dataclass(frozen=True)
class LogTail:
    """The last lines of each output stream, read apart (the engine interleaves them by time)."""

    stdout: str
    stderr: str


@dataclass(frozen=True)
class ContainerEvent:
    """A ``start``, ``die`` or ``oom`` event from the engine's event stream."""

    container_id: str
    action: str  # "start", "die" or "oom"
    time: float  # engine epoch seconds
    exit_code: int | None = None  # set on "die"


class EventStream(Protocol):
    """An open events request: iterating blocks for the next event; ends when the stream does."""

    def __iter__(self) -> Iterator[ContainerEvent]: ...

    def close(self) -> None:
        """End the stream from another thread (the iteration then ends or raises)."""
        ...


class DockerRuntime(Protocol):
    """The Docker Engine operations the local backend uses (one engine request each)."""

    def ping(self) -> None:
        """One cheap request; raises BackendUnavailableError if the engine does not answer."""
        ...

    def run(self, request: ContainerRequest) -> str:
        """Create and start a container; return its full id (kept for seam users of 0.1; the
        backend calls :meth:`create` and :meth:`start` apart).

        A container whose start fails is removed before the error is raised.
        """
        ...

    def create(self, request: ContainerRequest) -> str:
        """Create a container (pulling its image if the engine lacks it); return its full id.

        Raises ContainerExistsError when ``request.name`` is taken.
        """
        ...

    def start(self, container_id: str) -> None:
        """Start a created container (a running one is left alone). A refusal (the engine
        cannot start it) is EngineRefusedError; the container stays, created."""
        ...

    def list_labelled(self, labels: Sequence[str]) -> list[ContainerSummary]:
        """Containers carrying every one of ``labels`` (``key=value``), in any state (one
        request)."""
        ...

    def list_containers(self, ids: Sequence[str]) -> list[ContainerSummary]:
        """The containers among ``ids`` (full or unique-prefix ids) that exist, in any state."""
        ...

    def list_live(self, label: str) -> list[ContainerSummary]:
        """Containers carrying ``label`` (``key`` or ``key=value``) that have not ended."""
        ...

    def inspect(self, container_id: str) -> ContainerDetail:
        """Facts of one container, by id or name; raises ContainerNotFoundError."""
        ...

    def exit_events(
        self, container_ids: Sequence[str], since: float, until: float
    ) -> list[ContainerEvent]:
        """``start``, ``die`` and ``oom`` events of these containers between two engine times.

        The engine keeps only a bounded window of past events; an event that fell out of it is
        simply absent, so callers must not read absence of a ``die`` event as anything.
        """
        ...

    def watch_events(self, label: str, since: float) -> EventStream:
        """Stream ``start``/``die``/``oom`` events of containers carrying ``label``
        (``key=value``), from engine time ``since`` (already past: replayed from the engine's
        window) on, until closed. Raises BackendUnavailableError if it cannot be opened."""
        ...

    def engine_time(self) -> float:
        """The engine's current clock, epoch seconds."""
        ...

    def kill(self, container_id: str) -> None:
        """Send SIGKILL. A container that is gone or no longer running is not an error."""
        ...

    def remove(self, container_id: str) -> None:
        """Remove a container, running or not. A container that is gone is not an error."""
        ...

    def log_tail(self, container_id: str, lines: int) -> str:
        """The last ``lines`` lines of stdout and stderr together; raises ContainerNotFoundError."""
        ...

    def log_tails(self, container_id: str, lines: int) -> LogTail:
        """The last ``lines`` of stdout and of stderr, apart; raises ContainerNotFoundError."""
        ...

    def logs(self, container_id: str) -> LogTail:
        """The whole stdout and stderr so far, apart (one request); raises
        ContainerNotFoundError."""
        ...

    def image_present(self, image: str) -> bool:
        """Whether the engine has ``image`` locally (one image inspect; no pull)."""
        ...

    def image_id(self, image: str) -> str | None:
        """The engine's id of ``image`` (``sha256:...``, its config digest), None if absent."""
        ...

    def cpu_count(self) -> int:
        """How many CPUs the engine offers a container (its info's ``NCPU``)."""
        ...

    def engine_restarted_at(self) -> float | None:
        """When the running engine started (epoch seconds), if starting it ended every
        container that ran before it (Docker without live-restore); None when that cannot be
        told or when its restarts leave containers running (live-restore, Podman).

        Optional: the backend reads a runtime without it as one whose restarts are unknown.
        """
        ...


def timeout_from_labels(labels: dict[str, str]) -> int | None:
    """The limit a container carries, or None (no label, or not a positive integer)."""
    value = labels.get(TIMEOUT_LABEL, "")
    if value.isascii() and value.isdigit() and int(value) > 0:
        return int(value)
    return None
