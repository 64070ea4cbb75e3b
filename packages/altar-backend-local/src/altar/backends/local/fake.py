"""An in-memory Docker engine behind the runtime seam, for tests.

It behaves like the Docker Engine 20.10 the backend talks to, not like the backend: fresh
64-hex ids, whole-second ``Created`` and precise ``StartedAt`` times, ``start``/``die``/``oom``
events with a bounded window,
image labels merged under the container's, 404 for unknown containers, 409-style no-ops for
killing a stopped container, the engine's own refusals (CPU quota above the host's CPUs, a
device request without a GPU runtime), and an engine that cannot be reached. Tests script
outcomes through :meth:`FakeDockerRuntime.finish`, :meth:`oom_kill`, :meth:`expire` and
:meth:`write_log`, and count requests per operation. With ``hold_starts`` a created container
stays ``created`` (its start request in flight, as a real start is for a good fraction of a
second) until :meth:`release_start`.
"""

from __future__ import annotations

import collections
import hashlib
import os
import queue
import secrets
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from altar.backends.local.fake_restarts import restart
from altar.backends.local.runtime import (
    LIVE_CONTAINER_STATES,
    ContainerDetail,
    ContainerEvent,
    ContainerExistsError,
    ContainerNotFoundError,
    ContainerRequest,
    ContainerSummary,
    EngineRefusedError,
    LogTail,
)
from altar.execution import BackendUnavailableError

__all__ = ["FakeContainer", "FakeDockerRuntime", "FakeEventStream"]

_CLOSED = object()


class FakeEventStream:
    """An open events request: the engine pushes matching events; closing ends the iteration."""

    def __init__(self, label: str) -> None:
        self.key, _, self.value = label.partition("=")
        self._queue: queue.Queue[object] = queue.Queue()
        self.closed = False

    def matches(self, labels: Mapping[str, str]) -> bool:
        return self.key in labels and (not self.value or labels[self.key] == self.value)

    def push(self, event: ContainerEvent) -> None:
        self._queue.put(event)

    def __iter__(self) -> Iterator[ContainerEvent]:
        while True:
            item = self._queue.get()
            if item is _CLOSED:
                self._queue.task_done()
                return
            assert isinstance(item, ContainerEvent)
            yield item
            self._queue.task_done()  # the reader came back for more: it handled ``item``

    def drain(self, timeout_s: float = 5.0) -> None:
        """Wait (bounded) until the reader has handled every event pushed so far."""
        end = time.monotonic() + timeout_s
        while self._queue.unfinished_tasks and not self.closed and time.monotonic() < end:
            time.sleep(0.001)

    def close(self) -> None:
        self.closed = True
        self._queue.put(_CLOSED)


@dataclass
class FakeContainer:
    id: str
    request: ContainerRequest
    created: int
    state: str = "running"
    exit_code: int = 0
    oom_killed: bool = False
    finished_at: float | None = None
    started_at: float | None = None
    logs: list[tuple[str, str]] = field(default_factory=list)  # (stream, line), as written
    # The container's labels as the engine reports them: the image's, then the request's.
    labels: dict[str, str] = field(default_factory=dict)
    name: str | None = None


class FakeDockerRuntime:
    """:class:`~altar.backends.local.runtime.DockerRuntime` with an engine in memory."""

    def __init__(
        self,
        *,
        images: Sequence[str] | None = None,
        cpus: int = 2,
        gpu_devices: int = 0,
        event_window: int = 256,
        clock_skew_s: float = 0.0,
        hold_starts: bool = False,
        image_labels: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        # None: every image can be pulled; a set: only these exist and pulling fails (offline).
        self.images = set(images) if images is not None else None
        # LABELs baked into images; the engine merges them under the container's own labels.
        self.image_labels = {k: dict(v) for k, v in (image_labels or {}).items()}
        self.cpus = cpus
        self.gpu_devices = gpu_devices
        self.clock_skew_s = clock_skew_s
        self.available = True
        self.containers: dict[str, FakeContainer] = {}
        self.events: collections.deque[ContainerEvent] = collections.deque(maxlen=event_window)
        self.requests: collections.Counter[str] = collections.Counter()
        self.hold_starts = hold_starts
        self._starts: dict[str, threading.Event] = {}
        self.streams: list[FakeEventStream] = []
        # Operations ("create", "start") whose next answer is lost after the engine did them.
        self.lose_answers: set[str] = set()
        # Set by restart_engine (None: no start reported, as from a TCP engine).
        self.restarted_at: float | None = None
        self.live_restore = False  # True: restarts keep containers running, none reported
        self._lock = threading.RLock()

    # -- engine behaviour ---------------------------------------------------------------------

    def now(self) -> float:
        return time.time() + self.clock_skew_s

    def _request(self, operation: str) -> None:
        if not self.available:
            raise BackendUnavailableError(
                "cannot reach the Docker engine at unix:///fake/docker.sock: connection refused"
            )
        self.requests[operation] += 1

    def _get(self, container_id: str) -> FakeContainer:
        named = [c for c in self.containers.values() if c.name and c.name == container_id]
        if named:
            return named[0]
        matches = [c for cid, c in self.containers.items() if cid.startswith(container_id)]
        if len(matches) != 1 or not container_id:
            raise ContainerNotFoundError(f"No such container: {container_id}")
        return matches[0]

    def _event(self, container: FakeContainer, event: ContainerEvent) -> None:
        self.events.append(event)
        for stream in self.streams:
            if not stream.closed and stream.matches(container.labels):
                stream.push(event)

    def _start(self, container: FakeContainer) -> None:
        container.state = "running"
        container.started_at = self.now()
        self._event(container, ContainerEvent(container.id, "start", container.started_at))

    def _end(self, container: FakeContainer, exit_code: int, *, oom: bool = False) -> None:
        now = self.now()
        if oom:
            container.oom_killed = True
            self._event(container, ContainerEvent(container.id, "oom", now))
        container.state = "exited"
        container.exit_code = exit_code
        container.finished_at = now
        self._event(container, ContainerEvent(container.id, "die", now, exit_code))

    # -- the seam -----------------------------------------------------------------------------

    def ping(self) -> None:
        with self._lock:
            self._request("ping")

    def run(self, request: ContainerRequest) -> str:
        container_id = self.create(request)
        try:
            self.start(container_id)
        except (EngineRefusedError, BackendUnavailableError):
            with self._lock:  # as the real runtime: a container that cannot start is removed
                self.containers.pop(container_id, None)
            raise
        return container_id

    def _answer(self, operation: str) -> None:
        """The engine did the work; the answer may be lost on the way (scripted)."""
        if operation in self.lose_answers:
            self.lose_answers.discard(operation)
            raise BackendUnavailableError(
                f"cannot reach the Docker engine at unix:///fake/docker.sock: the {operation} "
                "request's answer never arrived (read timed out)"
            )

    def create(self, request: ContainerRequest) -> str:
        with self._lock:
            self._request("create")
            if self.images is not None and request.image not in self.images:
                raise EngineRefusedError(
                    404,
                    f"image {request.image!r} is not on the engine (No such image) and pulling "
                    "it failed: network is unreachable. Load it (`docker load`) or pull it first.",
                )
            if request.nano_cpus is not None and request.nano_cpus > self.cpus * 1_000_000_000:
                raise EngineRefusedError(
                    400,
                    f"Range of CPUs is from 0.01 to {self.cpus}.00, as there are only "
                    f"{self.cpus} CPUs available",
                )
            if request.memory_bytes is not None and request.memory_bytes < 6 * 1024 * 1024:
                raise EngineRefusedError(400, "Minimum memory limit allowed is 6MB")
            for source in request.binds:
                if not os.path.isdir(source):
                    raise EngineRefusedError(
                        400,
                        'invalid mount config for type "bind": bind source path does not '
                        f"exist: {source}",
                    )
            if request.name is not None:
                taken = next((c for c in self.containers.values() if c.name == request.name), None)
                if taken is not None:
                    raise ContainerExistsError(
                        request.name,
                        f'Conflict. The container name "/{request.name}" is already in use by '
                        f'container "{taken.id}". You have to remove (or rename) that container '
                        "to be able to reuse that name.",
                    )
            container_id = secrets.token_hex(32)
            labels = {**self.image_labels.get(request.image, {}), **request.labels}
            self.containers[container_id] = FakeContainer(
                container_id,
                request,
                created=int(self.now()),
                labels=labels,
                state="created",
                name=request.name,
            )
            self._answer("create")
            return container_id

    def start(self, container_id: str) -> None:
        with self._lock:
            self._request("start")
            container = self._get(container_id)
            if container.state != "created":
                return  # 304: already started
            request = container.request
            if request.gpu_count and not self.gpu_devices:
                raise EngineRefusedError(
                    500, 'could not select device driver "" with capabilities: [[gpu]]'
                )
            if request.gpu_count > self.gpu_devices:
                raise EngineRefusedError(
                    500,
                    "OCI runtime create failed: nvidia-container-cli: device error: "
                    f"{request.gpu_count - 1}: unknown device",
                )
            if not self.hold_starts:
                self._start(container)
                self._answer_after_delivery("start")
                return
            started = self._starts[container_id] = threading.Event()
        started.wait()
        self._answer_after_delivery("start")

    def _answer_after_delivery(self, operation: str) -> None:
        """The engine publishes ``start`` before it answers the start request: readers of
        an open events stream have it by then (milliseconds on a real engine)."""
        for stream in list(self.streams):
            stream.drain()
        with self._lock:
            self._answer(operation)

    def held_starts(self) -> list[str]:
        """Containers created and waiting in :meth:`run` for :meth:`release_start`."""
        with self._lock:
            return [cid for cid, event in self._starts.items() if not event.is_set()]

    def release_start(self, container_id: str | None = None) -> None:
        """Let one held start (or all of them) complete: the container is running on return."""
        with self._lock:
            for cid, event in self._starts.items():
                if container_id in (None, cid) and not event.is_set():
                    self._start(self.containers[cid])
                    event.set()

    def list_containers(self, ids: Sequence[str]) -> list[ContainerSummary]:
        with self._lock:
            self._request("list")
            return [
                self._summary(c)
                for cid, c in self.containers.items()
                if any(cid.startswith(i) for i in ids if i)
            ]

    def list_live(self, label: str) -> list[ContainerSummary]:
        key, _, value = label.partition("=")
        with self._lock:
            self._request("list")
            return [
                self._summary(c)
                for c in self.containers.values()
                if key in c.labels
                and (not value or c.labels[key] == value)
                and c.state in LIVE_CONTAINER_STATES
            ]

    def list_labelled(self, labels: Sequence[str]) -> list[ContainerSummary]:
        wanted = [label.partition("=") for label in labels]
        with self._lock:
            self._request("list")
            return [
                self._summary(c)
                for c in self.containers.values()
                if all(k in c.labels and (not v or c.labels[k] == v) for k, _, v in wanted)
            ]

    @staticmethod
    def _summary(container: FakeContainer) -> ContainerSummary:
        return ContainerSummary(
            container.id, container.state, container.created, dict(container.labels)
        )

    def inspect(self, container_id: str) -> ContainerDetail:
        with self._lock:
            self._request("inspect")
            c = self._get(container_id)
            return ContainerDetail(
                c.id,
                c.state,
                c.exit_code,
                c.oom_killed,
                c.finished_at,
                c.started_at,
                dict(c.labels),
            )

    def exit_events(
        self, container_ids: Sequence[str], since: float, until: float
    ) -> list[ContainerEvent]:
        with self._lock:
            self._request("events")
            wanted = set(container_ids)
            return [
                e
                for e in self.events
                if e.container_id in wanted
                and e.action in ("start", "die", "oom")
                and since <= e.time <= until
            ]

    def watch_events(self, label: str, since: float) -> FakeEventStream:
        with self._lock:
            self._request("events")
            stream = FakeEventStream(label)
            for event in self.events:  # the window's events since ``since`` come first
                container = self.containers.get(event.container_id)
                if event.time >= since and container and stream.matches(container.labels):
                    stream.push(event)
            self.streams.append(stream)
            return stream

    def break_event_streams(self) -> None:
        """The engine drops every open events request (a restart, a proxy timeout)."""
        with self._lock:
            for stream in self.streams:
                stream.close()
            self.streams.clear()

    def engine_time(self) -> float:
        with self._lock:
            self._request("info")
            return self.now()

    def kill(self, container_id: str) -> None:
        with self._lock:
            self._request("kill")
            try:
                container = self._get(container_id)
            except ContainerNotFoundError:
                return
            if container.state in ("running", "paused", "restarting"):
                self._end(container, 137)

    def remove(self, container_id: str) -> None:
        with self._lock:
            self._request("remove")
            try:
                container = self._get(container_id)
            except ContainerNotFoundError:
                return
            del self.containers[container.id]

    def log_tail(self, container_id: str, lines: int) -> str:
        with self._lock:
            self._request("logs")
            container = self._get(container_id)
            tail = container.logs[-lines:] if lines else []
            return "".join(line + "\n" for _, line in tail)

    def log_tails(self, container_id: str, lines: int) -> LogTail:
        with self._lock:
            self._request("logs")
            self._request("logs")  # the engine serves one stream per request
            container = self._get(container_id)

            def tail(stream: str) -> str:
                chosen = [line for s, line in container.logs if s == stream]
                return "".join(line + "\n" for line in (chosen[-lines:] if lines else []))

            return LogTail(tail("stdout"), tail("stderr"))

    def logs(self, container_id: str) -> LogTail:
        with self._lock:
            self._request("logs")
            container = self._get(container_id)

            def whole(stream: str) -> str:
                return "".join(line + "\n" for s, line in container.logs if s == stream)

            return LogTail(whole("stdout"), whole("stderr"))

    def image_present(self, image: str) -> bool:
        with self._lock:
            self._request("image_inspect")
            # An engine that can pull every image (images=None) has none until it pulls.
            return self.images is not None and image in self.images

    def image_id(self, image: str) -> str | None:
        with self._lock:
            self._request("image_inspect")
            if self.images is None or image not in self.images:
                return None
            # a real engine's id is the digest of the image's config: stable per image
            return "sha256:" + hashlib.sha256(image.encode()).hexdigest()

    def cpu_count(self) -> int:
        with self._lock:
            self._request("info")
            return self.cpus

    def engine_restarted_at(self) -> float | None:
        with self._lock:  # the kernel's answer, and live-restore read once: no request counted
            return None if self.live_restore else self.restarted_at

    # -- scripting (not engine requests) -----------------------------------------------------

    def finish(self, container_id: str, exit_code: int, *, oom: bool = False) -> None:
        """The container's main process exits with ``exit_code``; ``oom``: a kill was flagged."""
        with self._lock:
            self._end(self._get(container_id), exit_code, oom=oom)

    def oom_kill(self, container_id: str, *, exit_code: int = 137) -> None:
        self.finish(container_id, exit_code, oom=True)

    def expire(self, container_id: str) -> None:
        """Make the container look as if it started long enough ago to overrun its limit."""
        with self._lock:
            container = self._get(container_id)
            timeout = int(container.labels.get("altar.timeout_s", "0") or 0)
            container.created -= timeout + 5
            if container.started_at is not None:
                container.started_at -= timeout + 5
            # ...and its start event says so too (the window keeps its order and size).
            events = [
                replace(e, time=e.time - timeout - 5)
                if e.container_id == container.id and e.action == "start"
                else e
                for e in self.events
            ]
            self.events.clear()
            self.events.extend(events)
            if container.started_at is not None:
                # Followers learn the earlier start too (a contrivance: real starts don't move).
                for stream in self.streams:
                    if not stream.closed and stream.matches(container.labels):
                        stream.push(ContainerEvent(container.id, "start", container.started_at))
        for stream in list(self.streams):
            stream.drain()  # outside the lock: the reader may be waiting on it

    def restart_engine(self, *, lose: Sequence[str] = (), stuck: Sequence[str] = ()) -> None:
        """dockerd dies and starts again (see :func:`.fake_restarts.restart`)."""
        with self._lock:
            restart(self, lose, stuck)

    def write_log(self, container_id: str, lines: list[str], *, stream: str = "stdout") -> None:
        """The container writes ``lines`` to ``stream`` (``stdout`` or ``stderr``)."""
        with self._lock:
            self._get(container_id).logs.extend((stream, line) for line in lines)

    def set_state(self, container_id: str, state: str) -> None:
        with self._lock:
            self._get(container_id).state = state
