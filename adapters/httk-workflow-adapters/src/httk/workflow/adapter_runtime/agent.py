"""An opt-in command agent on the far side of a multiplexed ssh connection (``ssh_agent=yes``).

Multiplexing saves the ssh handshake, but sshd still starts the user's login shell for every
command, and a login node's start-up files (module systems, conda or pyenv hooks) often cost
more than the handshake. With ``ssh_agent=yes`` (which needs ``ssh_multiplex``) the first
operation starts one small Python process on the target, in one session of the master
connection, listening on a unix socket in a private directory under ``~/.cache``; the master
forwards a local socket beside its own to it. Each later command is one JSON request over that
socket: the agent starts the argument vector directly (no shell at all), streams stdout and
stderr back, and reports the exit status. A client that goes away (timeout, Ctrl-C, a lost
connection) has the command's process group killed, as with the ssh guard.

Commands then run in the environment of the login that started the agent, not a fresh login
each time. When the agent cannot be used (no ``python3`` on the target, forwarding refused) the
operation falls back to a normal ssh session, so the setting is never worse than off.

Wire format, both ways over the socket: the request is one JSON line ``{"argv", "cwd"}`` (or
``{"ping": true}``); the answer is frames of one type byte and a 4-byte big-endian length:
``0`` started, ``1`` stdout, ``2`` stderr, ``3`` exit status (decimal), ``4`` pong.
"""

from __future__ import annotations

import os

# Typing names only: importing typing costs every adapter call start-up time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from .process import Completed

STARTED, STDOUT, STDERR, EXIT, PONG = range(5)

# The agent itself, run as `python3 -c AGENT SOCKET IDLE_SECONDS` (argv, never interpolated).
AGENT = r"""
import json, os, signal, socket, struct, subprocess, sys, threading, time
path, idle = sys.argv[1], float(sys.argv[2])
directory = os.path.dirname(path)
os.makedirs(directory, mode=0o700, exist_ok=True)
os.chmod(directory, 0o700)
probe = socket.socket(socket.AF_UNIX)
try:
    probe.connect(path)
    sys.exit(0)
except OSError:
    pass
finally:
    probe.close()
try:
    os.unlink(path)
except FileNotFoundError:
    pass
server = socket.socket(socket.AF_UNIX)
server.bind(path)
server.listen(64)
server.settimeout(5)
state = {"active": 0, "last": time.monotonic()}
guard = threading.Lock()

def serve(conn):
    lock = threading.Lock()
    def send(kind, data=b""):
        with lock:
            conn.sendall(struct.pack(">BI", kind, len(data)) + data)
    try:
        request = json.loads(conn.makefile("rb").readline())
        if request.get("ping"):
            send(4)
            return
        argv = request["argv"]
        try:
            child = subprocess.Popen(argv, cwd=request.get("cwd") or None,
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                start_new_session=True)
        except OSError as exc:
            send(0)
            send(2, ("%s: %s\n" % (exc.filename or argv[0], exc.strerror)).encode())
            send(3, b"127" if request.get("cwd") is None or os.path.isdir(request["cwd"]) else b"2")
            return
        send(0)
        def pump(pipe, kind):
            for chunk in iter(lambda: pipe.read1(65536), b""):
                send(kind, chunk)
        def watch():
            try:
                while conn.recv(4096):
                    pass
            except OSError:
                pass
            if child.poll() is None:
                for sig, pause in ((signal.SIGTERM, 2), (signal.SIGKILL, 0)):
                    try:
                        os.killpg(child.pid, sig)
                    except OSError:
                        return
                    time.sleep(pause)
        threading.Thread(target=watch, daemon=True).start()
        pumps = [threading.Thread(target=pump, args=(child.stdout, 1)),
                 threading.Thread(target=pump, args=(child.stderr, 2))]
        for t in pumps:
            t.start()
        for t in pumps:
            t.join()
        code = child.wait()
        send(3, str(code if code >= 0 else 128 - code).encode())
    except (OSError, ValueError, KeyError, TypeError):
        pass
    finally:
        conn.close()
        with guard:
            state["active"] -= 1
            state["last"] = time.monotonic()

while True:
    try:
        conn, _ = server.accept()
    except socket.timeout:
        with guard:
            if state["active"] == 0 and time.monotonic() - state["last"] > idle:
                break
        continue
    with guard:
        state["active"] += 1
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
try:
    os.unlink(path)
    os.rmdir(directory)
except OSError:
    pass
"""


def _frames(sock: object) -> tuple[int, bytes] | None:
    """The next frame, or None at end of stream."""
    import struct

    header = _exactly(sock, 5)
    if header is None:
        return None
    kind, length = struct.unpack(">BI", header)
    body = _exactly(sock, length) if length else b""
    return None if body is None else (kind, body)


def _exactly(sock: object, size: int) -> bytes | None:
    chunks = []
    while size:
        data = sock.recv(min(size, 65536))  # type: ignore[attr-defined]
        if not data:
            return None
        chunks.append(data)
        size -= len(data)
    return b"".join(chunks)


def _connect(path: str, timeout: float | None = None) -> object | None:
    import socket

    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(timeout)
    try:
        client.connect(path)
    except OSError:
        client.close()
        return None
    return client


def ping(path: str) -> bool:
    """Whether an agent answers through the local socket ``path``."""
    client = _connect(path, timeout=5)
    if client is None:
        return False
    try:
        client.sendall(b'{"ping": true}\n')  # type: ignore[attr-defined]
        frame = _frames(client)
    except OSError:
        return False
    finally:
        client.close()  # type: ignore[attr-defined]
    return frame is not None and frame[0] == PONG


def run(path: str, argv: Sequence[str], cwd: str | None) -> Completed | None:
    """Run ``argv`` through the agent; None when it could not be started (use a session)."""
    from . import jsontext
    from .process import Completed, _text

    client = _connect(path)
    if client is None:
        return None
    try:
        client.sendall((jsontext.dumps({"argv": list(argv), "cwd": cwd}) + "\n").encode())  # type: ignore[attr-defined]
        first = _frames(client)
        if first is None or first[0] != STARTED:
            return None
        out: list[bytes] = []
        err: list[bytes] = []
        while True:
            frame = _frames(client)
            if frame is None:
                err.append(b"httk adapter: the connection to the command agent was lost\n")
                return Completed(255, _text(b"".join(out)), _text(b"".join(err)))
            kind, body = frame
            if kind == STDOUT:
                out.append(body)
            elif kind == STDERR:
                err.append(body)
            elif kind == EXIT:
                return Completed(int(body), _text(b"".join(out)), _text(b"".join(err)))
    except OSError:
        return None
    finally:
        client.close()  # type: ignore[attr-defined]


def local_socket(control_path: str) -> str:
    """The forwarded socket beside a master's control socket."""
    return f"{control_path}.agent"


def remote_socket(home: str, control_path: str) -> str:
    """Where the agent listens on the target: a private directory under ``~/.cache``."""
    return f"{home.rstrip('/')}/.cache/httk-workflow-{os.path.basename(control_path)[:12]}/agent"
