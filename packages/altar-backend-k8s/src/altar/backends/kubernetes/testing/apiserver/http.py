"""The HTTP side: routing requests to :class:`ApiOperations` and writing answers."""

from __future__ import annotations

import json
import re
import socket
from contextlib import suppress
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

from altar.backends.kubernetes.testing.apiserver.access import SSAR_PATH
from altar.backends.kubernetes.testing.apiserver.api import first
from altar.backends.kubernetes.testing.apiserver.discovery import discovery
from altar.backends.kubernetes.testing.apiserver.objects import JsonDict
from altar.backends.kubernetes.testing.apiserver.status import ApiError

if TYPE_CHECKING:
    from altar.backends.kubernetes.testing.apiserver.server import FakeApiServer

__all__ = ["Handler", "RecordedRequest"]


_JOBS_PATH = re.compile(r"^/apis/batch/v1/namespaces/([^/]+)/jobs(?:/([^/]+))?$")
_PODS_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/pods(?:/([^/]+)(/log)?)?$")
_CORE_LIST_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/(resourcequotas|events)$")
_NAMESPACE_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)$")
_CLAIM_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/persistentvolumeclaims/([^/]+)$")


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: dict[str, list[str]]


class Handler(BaseHTTPRequestHandler):
    fake: FakeApiServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # quiet test output
        pass

    def setup(self) -> None:
        super().setup()
        # headers and body go out in separate writes; without this, Nagle's algorithm and
        # the client's delayed ACK add ~40 ms to every keep-alive request
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.fake._lock:
            self.fake._connections.add(self.connection)

    def finish(self) -> None:
        with self.fake._lock:
            self.fake._connections.discard(self.connection)
        super().finish()

    def _send(self, code: int, body: JsonDict | str, headers: dict[str, str] | None = None) -> None:
        if isinstance(body, str):
            payload, ctype = body.encode(), "text/plain"
        else:
            payload, ctype = json.dumps(body).encode(), "application/json"
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(payload)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(payload)

    def _body(self) -> JsonDict:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return {}
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as error:
            raise ApiError(400, "BadRequest", f"invalid JSON body: {error}") from error
        if not isinstance(value, dict):
            raise ApiError(400, "BadRequest", "the request body must be a JSON object")
        return value

    def _handle(self, method: str) -> None:
        parts = urlsplit(self.path)
        path, query = parts.path.rstrip("/") or "/", parse_qs(parts.query)
        fake = self.fake
        with fake._lock:
            fake.requests.append(RecordedRequest(method, path, query))
        body = self._body() if method in ("POST", "DELETE", "PUT", "PATCH") else {}
        fault = fake._take_fault(method) if path.startswith(("/api/v1/", "/apis/batch/")) else None
        if fault is not None:
            headers = {"Retry-After": str(fault.retry_after)} if fault.retry_after else None
            reason = {
                403: "Forbidden",
                409: "Conflict",
                429: "TooManyRequests",
                503: "ServiceUnavailable",
            }.get(fault.code, "InternalError")
            error = ApiError(fault.code, reason, f"injected {fault.code} from the fake apiserver")
            self._send(fault.code, error.body(), headers)
            return
        try:
            code, result = self._route(method, path, query, body)
        except ApiError as error:
            self._send(error.code, error.body())
            return
        if method == "POST" and code == 201 and fake._take_dropped_answer():
            # The object is stored; the connection dies before the answer leaves (a server
            # restart, a proxy timeout, the client's node losing its network).
            self.close_connection = True
            with suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        self._send(code, result)

    def _route(
        self, method: str, path: str, query: dict[str, list[str]], body: JsonDict
    ) -> tuple[int, JsonDict | str]:
        fake = self.fake
        answer = discovery(path, fake.minor_version)
        if answer is not None:
            if method != "GET":
                raise ApiError(405, "MethodNotAllowed", f"method {method} is not allowed")
            return 200, answer
        selector = first(query, "labelSelector")
        jobs = _JOBS_PATH.match(path)
        pods = _PODS_PATH.match(path)
        core_list = _CORE_LIST_PATH.match(path)
        with fake._lock:
            if core_list and method == "GET":
                namespace, kind = core_list.groups()
                if kind == "resourcequotas":
                    return 200, fake.api_list_quotas(namespace)
                return 200, fake.api_list_events(namespace)
            if path == SSAR_PATH and method == "POST":
                return 201, fake.access.api_review(body)
            if (found := _NAMESPACE_PATH.match(path)) and method == "GET":
                return 200, fake.access.api_get_namespace(found.group(1))
            if (found := _CLAIM_PATH.match(path)) and method == "GET":
                return 200, fake.access.api_get_claim(found.group(1), found.group(2))
            if jobs:
                namespace, name = jobs.group(1), jobs.group(2)
                if name is None and method == "GET":
                    return 200, fake.api_list("JobList", namespace, selector)
                if name is None and method == "POST":
                    fake.access.require_namespace(namespace)
                    return 201, fake.api_create_job(namespace, body)
                if name is not None and method == "GET":
                    return 200, fake.api_get_job(namespace, name)
                if name is not None and method == "DELETE":
                    options = dict(body)
                    for key in ("propagationPolicy", "gracePeriodSeconds"):
                        if key in query and key not in options:
                            options[key] = query[key][0]
                    result = fake.api_delete_job(namespace, name, options)
                    return (202 if result.get("kind") == "Job" else 200), result
            elif pods:
                namespace, name, log = pods.group(1), pods.group(2), pods.group(3)
                if name is None and method == "GET":
                    return 200, fake.api_list("PodList", namespace, selector)
                if name is not None and log and method == "GET":
                    return 200, fake.api_pod_log(namespace, name, query)
                if name is not None and method == "GET":
                    return 200, fake.api_get_pod(namespace, name)
            elif not core_list:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
        raise ApiError(405, "MethodNotAllowed", f"the server does not allow this method: {method}")

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")
