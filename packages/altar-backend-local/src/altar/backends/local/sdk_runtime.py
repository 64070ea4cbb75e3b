"""The real runtime: the Docker Engine API through the docker SDK's low-level client.

Works against any Docker-compatible socket: ``DOCKER_HOST`` (and ``DOCKER_TLS_VERIFY`` /
``DOCKER_CERT_PATH``) as the docker CLI reads them, or an explicit ``base_url``. The API
version is negotiated with the engine on first use, so old (20.10) and new engines both work.

It imports :func:`.render.create_body` (the one arrow from a real runtime to its renderer):
the seam carries a :class:`~.runtime.ContainerRequest` value so the fake sees values, and the
exact Engine API body is rendered here, by the pure function the reference files pin.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from datetime import datetime
from functools import partial
from typing import Any, NoReturn, TypeVar

import docker
import docker.errors
import requests.exceptions
from altar.backends.local.leaks import close_unconnected
from altar.backends.local.render import create_body
from altar.backends.local.restarts import engine_pid, process_started_at, socket_path
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
from docker.utils import kwargs_from_env

__all__ = ["LOG_SCAN_LINES", "DockerSdkRuntime", "demultiplex", "describe_engine"]

_T = TypeVar("_T")
# Ids are sent in one list request; keep each request line well below the engine's 1 MiB limit.
_IDS_PER_REQUEST = 2000
_ZERO_TIME_PREFIX = "0001-01-01"
#: How far back ``log_tails`` looks in the interleaved log for each stream's last lines.
LOG_SCAN_LINES = 1000


def describe_engine(base_url: str | None) -> str:
    """Where the runtime looks for the engine, for messages."""
    return base_url or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def _list_ids(api: docker.APIClient, *, ids: list[str]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = api.containers(all=True, filters={"id": ids})
    return rows


def _client_kwargs(base_url: str | None) -> dict[str, Any]:
    """The SDK client's arguments, as the docker CLI reads the environment.

    An explicit engine URL replaces ``DOCKER_HOST`` only: like ``docker -H tcp://...``, it still
    uses ``DOCKER_TLS_VERIFY``/``DOCKER_CERT_PATH`` for a TCP engine.
    """
    kwargs: dict[str, Any] = dict(kwargs_from_env())
    if base_url:
        kwargs["base_url"] = base_url
        if not base_url.startswith("tcp://"):
            kwargs.pop("tls", None)  # a unix socket or ssh:// engine takes no TLS settings
    return kwargs


def demultiplex(body: bytes) -> tuple[bytes, bytes]:
    """Split the engine's multiplexed log stream into (stdout, stderr).

    Each frame is an 8-byte header (stream type 1 = stdout, 2 = stderr; three zero bytes; the
    payload's length, big-endian) and the payload. A truncated last frame is kept as far as it
    goes; an unknown stream type (0, stdin) is ignored.
    """
    streams = {1: bytearray(), 2: bytearray()}
    offset = 0
    while offset + 8 <= len(body):
        kind = body[offset]
        size = int.from_bytes(body[offset + 4 : offset + 8], "big")
        payload = body[offset + 8 : offset + 8 + size]
        if kind in streams:
            streams[kind] += payload
        offset += 8 + size
    return bytes(streams[1]), bytes(streams[2])


def _parse_time(value: str | None) -> float | None:
    if not value or value.startswith(_ZERO_TIME_PREFIX):
        return None
    return datetime.fromisoformat(value).timestamp()


def _event(raw: dict[str, Any]) -> ContainerEvent:
    actor = raw.get("Actor") or {}
    attributes = actor.get("Attributes") or {}
    exit_code = attributes.get("exitCode")
    nanos = raw.get("timeNano")
    return ContainerEvent(
        container_id=str(actor.get("ID") or raw.get("id") or ""),
        action=str(raw.get("Action") or raw.get("status") or ""),
        time=nanos / 1e9 if nanos else float(raw.get("time") or 0),
        exit_code=int(exit_code) if exit_code is not None else None,
    )


class _SdkEventStream:
    """The SDK's cancellable events stream, yielding seam values."""

    def __init__(self, stream: Any, translate: Callable[[], Any]) -> None:
        self._stream = stream
        self._translate = translate

    def __iter__(self) -> Iterator[ContainerEvent]:
        with self._translate():
            for raw in self._stream:
                yield _event(raw)

    def close(self) -> None:
        with suppress(Exception):
            self._stream.close()


class DockerSdkRuntime:
    """:class:`~altar.backends.local.runtime.DockerRuntime` over ``docker.APIClient``.

    The client is created on first use (negotiating the API version costs one request) and is
    shared by the backend's worker threads, as the SDK's connection pool allows.
    """

    def __init__(self, base_url: str | None = None, *, timeout_s: float = 60.0) -> None:
        self._base_url = base_url
        self._timeout_s = timeout_s
        self._client: docker.APIClient | None = None
        self._lock = threading.Lock()
        # (dockerd pid, its start) -> engine_restarted_at's answer: one info request per
        # engine process, for its live-restore setting.
        self._restart: tuple[tuple[int, float], float | None] | None = None

    @property
    def engine(self) -> str:
        return describe_engine(self._base_url)

    # -- plumbing ---------------------------------------------------------------------------

    def _unavailable(self, error: BaseException) -> NoReturn:
        close_unconnected(error)
        if isinstance(error, FileNotFoundError):
            advice = (
                "No engine socket exists there: install a Docker engine (Debian/Ubuntu: "
                "`sudo apt-get install docker.io`; elsewhere https://docs.docker.com/engine/install/"
                "), start it, and set DOCKER_HOST if it listens elsewhere"
            )
        else:
            advice = (
                "Start the engine (`sudo systemctl start docker`, or `scripts/services up --only "
                "docker` in the altar repository) or set DOCKER_HOST to a running "
                "Docker-compatible engine"
            )
        raise BackendUnavailableError(
            f"cannot reach the Docker engine at {self.engine}: {error}. {advice}."
        ) from error

    def _preflight(self, base_url: str) -> None:
        """Refuse a unix socket nobody listens on before the SDK tries it.

        The SDK leaks the socket of a failed unix connection; checking first keeps an engine
        that is down a clean BackendUnavailableError.
        """
        if not base_url.startswith(("unix://", "http+unix://")):
            return
        path = base_url.split("://", 1)[1]
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                probe.settimeout(self._timeout_s)
                probe.connect(path)
        except OSError as error:
            self._unavailable(error)

    def client(self) -> docker.APIClient:
        """The SDK client (created and version-negotiated on first use)."""
        return self._api()

    def _api(self) -> docker.APIClient:
        with self._lock:
            if self._client is None:
                kwargs = _client_kwargs(self._base_url)
                self._preflight(str(kwargs.get("base_url") or "unix:///var/run/docker.sock"))
                try:
                    self._client = docker.APIClient(
                        version="auto", timeout=int(self._timeout_s), **kwargs
                    )
                except (docker.errors.DockerException, requests.exceptions.RequestException) as e:
                    self._unavailable(e)
            return self._client

    @contextmanager
    def _translate(self, *, not_found: bool = True) -> Iterator[None]:
        """Turn SDK errors into the seam's errors."""
        try:
            yield
        except docker.errors.NotFound as error:
            if not_found:
                raise ContainerNotFoundError(str(error.explanation or error)) from error
            raise EngineRefusedError(404, str(error.explanation or error)) from error
        except docker.errors.APIError as error:
            status = error.status_code or 0
            if status >= 500 or status == 0:
                self._unavailable(error)
            raise EngineRefusedError(status, str(error.explanation or error)) from error
        except (requests.exceptions.RequestException, docker.errors.DockerException) as error:
            self._unavailable(error)

    def _call(self, operation: Callable[[docker.APIClient], _T], *, not_found: bool = True) -> _T:
        api = self._api()
        with self._translate(not_found=not_found):
            return operation(api)
        raise AssertionError("unreachable")  # pragma: no cover - _translate always raises

    # -- operations -------------------------------------------------------------------------

    def ping(self) -> None:
        self._call(lambda api: api.ping())

    def run(self, request: ContainerRequest) -> str:
        container_id = self.create(request)
        try:
            self.start(container_id)
        except EngineRefusedError:
            # The engine answered: the container cannot start. Never leave it behind.
            with suppress(EngineRefusedError, BackendUnavailableError):
                self.remove(container_id)
            raise
        except BackendUnavailableError:
            # No answer: the start may have gone through after all; nobody will hold a handle.
            with suppress(EngineRefusedError, BackendUnavailableError):
                self.remove(container_id)
            raise
        return container_id

    def create(self, request: ContainerRequest) -> str:
        api = self._api()
        body = create_body(request)

        def create() -> dict[str, Any]:
            result: dict[str, Any] = api.create_container_from_config(  # type: ignore[no-untyped-call]
                body, name=request.name
            )
            return result

        try:
            try:
                with self._translate(not_found=False):
                    created = create()
            except EngineRefusedError as error:
                if error.status != 404:
                    raise
                self._pull(request.image, error.explanation)
                with self._translate(not_found=False):
                    created = create()
        except EngineRefusedError as error:
            if error.status == 409 and request.name:
                raise ContainerExistsError(request.name, error.explanation) from error
            raise
        return str(created["Id"])

    def start(self, container_id: str) -> None:
        api = self._api()
        try:
            api.start(container_id)
        except docker.errors.APIError as error:
            # Any answer, 5xx included, is the engine refusing this container (a device request
            # it cannot satisfy, a missing executable), not the engine being away.
            raise EngineRefusedError(
                error.status_code or 500, str(error.explanation or error)
            ) from error
        except (requests.exceptions.RequestException, docker.errors.DockerException) as error:
            self._unavailable(error)

    def list_labelled(self, labels: Sequence[str]) -> list[ContainerSummary]:
        filters = {"label": list(labels)}
        rows = self._call(lambda api: api.containers(all=True, filters=filters))
        return [self._summary(row) for row in rows]

    def _pull(self, image: str, why: str) -> None:
        api = self._api()
        try:
            api.pull(image)
        except docker.errors.APIError as error:
            raise EngineRefusedError(
                404,
                f"image {image!r} is not on the engine ({why}) and pulling it failed: "
                f"{error.explanation or error}. Load it (`docker load`) or pull it first.",
            ) from error
        except (requests.exceptions.RequestException, docker.errors.DockerException) as error:
            self._unavailable(error)

    @staticmethod
    def _summary(row: dict[str, Any]) -> ContainerSummary:
        return ContainerSummary(
            id=str(row["Id"]),
            state=str(row.get("State") or ""),
            created=int(row.get("Created") or 0),
            labels=dict(row.get("Labels") or {}),
        )

    def list_containers(self, ids: Sequence[str]) -> list[ContainerSummary]:
        rows: list[dict[str, Any]] = []
        unique = list(dict.fromkeys(ids))
        for start in range(0, len(unique), _IDS_PER_REQUEST):
            chunk = unique[start : start + _IDS_PER_REQUEST]
            rows.extend(self._call(partial(_list_ids, ids=chunk)))
        return [self._summary(row) for row in rows]

    def list_live(self, label: str) -> list[ContainerSummary]:
        filters = {"label": [label], "status": list(LIVE_CONTAINER_STATES)}
        rows = self._call(lambda api: api.containers(all=True, filters=filters))
        return [self._summary(row) for row in rows]

    def inspect(self, container_id: str) -> ContainerDetail:
        data = self._call(lambda api: api.inspect_container(container_id))
        state = data.get("State") or {}
        return ContainerDetail(
            id=str(data["Id"]),
            state=str(state.get("Status") or ""),
            exit_code=int(state.get("ExitCode") or 0),
            oom_killed=bool(state.get("OOMKilled")),
            finished_at=_parse_time(state.get("FinishedAt")),
            started_at=_parse_time(state.get("StartedAt")),
            labels=dict((data.get("Config") or {}).get("Labels") or {}),
            pid=int(state.get("Pid") or 0) or None,
        )

    def exit_events(
        self, container_ids: Sequence[str], since: float, until: float
    ) -> list[ContainerEvent]:
        filters = {
            "type": "container",
            "event": ["start", "die", "oom"],
            "container": list(container_ids),
        }

        def read(api: docker.APIClient) -> list[dict[str, Any]]:
            # With ``until`` in the past the engine sends its buffered events and closes.
            # Fractional times keep sub-second precision (the SDK's types say int or datetime).
            stream = api.events(since=since, until=until, filters=filters, decode=True)  # type: ignore[call-overload]
            return list(stream)

        return [_event(raw) for raw in self._call(read)]

    def watch_events(self, label: str, since: float) -> _SdkEventStream:
        filters = {"type": "container", "event": ["start", "die", "oom"], "label": [label]}
        # The SDK opens event streams without a read timeout: an idle stream stays open.
        stream = self._call(
            lambda api: api.events(since=since, filters=filters, decode=True)  # type: ignore[call-overload]
        )
        return _SdkEventStream(stream, self._translate)

    def engine_time(self) -> float:
        info = self._call(lambda api: api.info())
        parsed = _parse_time(info.get("SystemTime"))
        if parsed is None:  # an engine that does not report its clock: assume ours
            import time

            return time.time()
        return parsed

    def kill(self, container_id: str) -> None:
        try:
            self._call(lambda api: api.kill(container_id))
        except ContainerNotFoundError:
            pass
        except EngineRefusedError as error:
            if error.status != 409:  # 409: not running any more, which is what we wanted
                raise

    def remove(self, container_id: str) -> None:
        try:
            self._call(lambda api: api.remove_container(container_id, force=True))
        except ContainerNotFoundError:
            pass
        except EngineRefusedError as error:
            if error.status != 409:  # 409: removal already in progress
                raise

    def log_tail(self, container_id: str, lines: int) -> str:
        raw = self._call(lambda api: api.logs(container_id, stdout=True, stderr=True, tail=lines))
        return raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw)

    def log_tails(self, container_id: str, lines: int) -> LogTail:
        """One request for the log's last :data:`LOG_SCAN_LINES` lines, split by stream.

        Docker 20.10 applies ``tail`` to the interleaved log *before* its stream filter (seen on
        this project's test engine): asking for "stderr, last 20 lines" returned nothing when
        stderr's lines were older than the last 20 of stdout. The multiplexed answer (8-byte
        frame headers naming the stream) is split here instead, by :func:`demultiplex`.
        """

        def read(api: docker.APIClient) -> bytes:
            client: Any = api  # the SDK's typed surface has no demultiplexing logs call
            params = {"stdout": 1, "stderr": 1, "tail": max(lines, LOG_SCAN_LINES)}
            response = client.get(client._url("/containers/{0}/logs", container_id), params=params)
            client._raise_for_status(response)
            body: bytes = response.content
            return body

        # Containers are created without a TTY, so the answer is multiplexed.
        out, err = demultiplex(self._call(read))

        def last(raw: bytes) -> str:
            text = raw.decode("utf-8", errors="replace")
            kept = text.splitlines()[-lines:] if lines else []
            return "".join(line + "\n" for line in kept)

        return LogTail(stdout=last(out), stderr=last(err))

    def logs(self, container_id: str) -> LogTail:
        """One request for the whole log, split by stream (:func:`demultiplex`)."""

        def read(api: docker.APIClient) -> bytes:
            client: Any = api  # the SDK's typed surface has no demultiplexing logs call
            params = {"stdout": 1, "stderr": 1}
            response = client.get(client._url("/containers/{0}/logs", container_id), params=params)
            client._raise_for_status(response)
            body: bytes = response.content
            return body

        out, err = demultiplex(self._call(read))
        return LogTail(
            stdout=out.decode("utf-8", errors="replace"),
            stderr=err.decode("utf-8", errors="replace"),
        )

    def image_present(self, image: str) -> bool:
        try:
            self._call(lambda api: api.inspect_image(image), not_found=False)  # type: ignore[no-untyped-call]
        except EngineRefusedError as error:
            if error.status == 404:
                return False
            raise
        return True

    def image_id(self, image: str) -> str | None:
        try:
            found = self._call(lambda api: api.inspect_image(image), not_found=False)  # type: ignore[no-untyped-call]
        except EngineRefusedError as error:
            if error.status == 404:
                return None
            raise
        identity = found.get("Id") if isinstance(found, dict) else None
        return identity if isinstance(identity, str) else None

    def cpu_count(self) -> int:
        info = self._call(lambda api: api.info())
        return int(info.get("NCPU") or 0)

    def engine_restarted_at(self) -> float | None:
        """The start of the ``dockerd`` behind a local unix socket, unless it runs with
        live-restore (then a restart ends no container); None where it cannot be told
        (see :mod:`.restarts`)."""
        url = str(_client_kwargs(self._base_url).get("base_url") or "unix:///var/run/docker.sock")
        path = socket_path(url)
        pid = engine_pid(path, self._timeout_s) if path is not None else None
        started = process_started_at(pid) if pid is not None else None
        if pid is None or started is None:
            return None
        with self._lock:
            known = self._restart
        # The same process reads a start a tick apart from one call to the next.
        if known is not None and known[0][0] == pid and abs(known[0][1] - started) < 1.0:
            return known[1]
        info = self._call(lambda api: api.info())
        answer = None if info.get("LiveRestoreEnabled") else started
        with self._lock:
            self._restart = ((pid, started), answer)
        return answer
