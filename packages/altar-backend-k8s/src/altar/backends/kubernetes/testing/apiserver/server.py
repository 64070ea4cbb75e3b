"""FakeApiServer: the cluster state served over HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

from altar.backends.kubernetes.testing.apiserver.access import AccessRules
from altar.backends.kubernetes.testing.apiserver.api import ApiOperations
from altar.backends.kubernetes.testing.apiserver.http import Handler, RecordedRequest

__all__ = ["FakeApiServer", "running_fake_apiserver"]


@dataclass
class _Fault:
    code: int
    remaining: int
    retry_after: int | None
    methods: frozenset[str] | None


class FakeApiServer(ApiOperations):
    """A threaded HTTP server faking the parts of kube-apiserver Altar uses.

    Use as a context manager, or call :meth:`start` and :meth:`stop`. ``deletion_delay_s`` is
    how long a foreground deletion keeps a Job visible (with ``deletionTimestamp`` and the
    ``foregroundDeletion`` finalizer) before it completes; None keeps it until
    :meth:`collect_garbage` is called. Background deletion removes the Job at once and leaves
    its Pods until :meth:`collect_garbage`; a delete without a policy orphans them (the
    batch/v1 default). With ``honour_ttl`` a finished Job and its pods are deleted
    ``ttlSecondsAfterFinished`` seconds after it finished, as the TTL controller does.
    With ``namespaces`` only those (and the system namespaces) exist; without, every one.
    """

    def __init__(
        self,
        *,
        deletion_delay_s: float | None = 0.2,
        minor_version: str = "32",
        honour_ttl: bool = False,
        namespaces: tuple[str, ...] | list[str] | None = None,
    ) -> None:
        super().__init__(deletion_delay_s=deletion_delay_s, honour_ttl=honour_ttl)
        #: Namespaces, claims and RBAC refusals (:mod:`.access`): ``access.add_claim``,
        #: ``access.deny``; ``namespaces`` (plus the system ones) makes namespaces real.
        self.access = AccessRules(namespaces)
        self.minor_version = minor_version
        self.requests: list[RecordedRequest] = []
        self._faults: list[_Fault] = []
        self._dropped_answers = 0
        self._httpd: ThreadingHTTPServer | None = None
        self._connections: set[socket.socket] = set()
        self._thread: threading.Thread | None = None

    # -- lifecycle --

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("the fake apiserver is not running; call start() first")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FakeApiServer:
        handler = type("_BoundHandler", (Handler,), {"fake": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        for timer in self._timers:
            timer.cancel()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        with self._lock:
            connections, self._connections = self._connections, set()
        for connection in connections:  # keep-alive connections of clients not yet closed
            with suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
            connection.close()

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def write_kubeconfig(self, path: str | Path, *, namespace: str = "default") -> Path:
        """Write a kubeconfig (JSON is YAML) pointing at this server with a token user."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake-user", "user": {"token": "fake-token"}}],
            "contexts": [
                {
                    "name": "fake",
                    "context": {"cluster": "fake", "user": "fake-user", "namespace": namespace},
                }
            ],
            "current-context": "fake",
        }
        target = Path(path)
        target.write_text(json.dumps(config, indent=2))
        target.chmod(0o600)
        return target

    # -- request accounting and fault injection --

    def reset_requests(self) -> None:
        with self._lock:
            self.requests.clear()

    def count_requests(self, method: str | None = None, path_contains: str = "") -> int:
        with self._lock:
            return sum(
                1
                for r in self.requests
                if (method is None or r.method == method) and path_contains in r.path
            )

    def inject_error(
        self,
        code: int,
        *,
        times: int = 1,
        retry_after: int | None = None,
        methods: set[str] | None = None,
    ) -> None:
        """Answer the next ``times`` API requests (of ``methods``) with ``code``."""
        with self._lock:
            self._faults.append(
                _Fault(code, times, retry_after, frozenset(methods) if methods else None)
            )

    def drop_created_answers(self, times: int = 1) -> None:
        """Store the next ``times`` created objects, then drop the connection unanswered."""
        with self._lock:
            self._dropped_answers += times

    def _take_dropped_answer(self) -> bool:
        with self._lock:
            if self._dropped_answers <= 0:
                return False
            self._dropped_answers -= 1
            return True

    def _take_fault(self, method: str) -> _Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.remaining > 0 and (fault.methods is None or method in fault.methods):
                    fault.remaining -= 1
                    return fault
            return None


@contextmanager
def running_fake_apiserver(**options: Any) -> Iterator[FakeApiServer]:
    """``with running_fake_apiserver() as fake: ...``"""
    fake = FakeApiServer(**options)
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()
