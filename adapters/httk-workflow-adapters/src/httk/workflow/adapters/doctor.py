"""``remote doctor``: every precondition of a remote checked, one line each.

The checks on the target go through the bundle's own adapter (``configure`` for the
connection, ``invoke`` for the rest), so they see exactly what operations will see:
the same ssh options, multiplexing, ``httk_command`` and login environment.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from .bundles import RemoteTarget, read_metadata, validate_adapter_bundle
from .errors import AdapterError
from .run import run_adapter
from .settings import credentials_path, queue_settings

# Whether the workspace exists, or could be created, without creating anything: the path
# itself, else the nearest existing ancestor, must be a directory this user may write and
# enter; a broken symbolic link or a file on the way cannot be created through. Prints one
# word (and the path it concerns): exists, create D, notdir D, unwritable D, dangling D.
_WORKSPACE = (
    'p=$1; d=$p; while [ ! -e "$d" ]; do '
    'if [ -L "$d" ]; then echo "dangling $d"; exit 1; fi; d=$(dirname -- "$d"); done; '
    'if [ ! -d "$d" ]; then echo "notdir $d"; exit 1; fi; '
    'if [ ! -w "$d" ] || [ ! -x "$d" ]; then echo "unwritable $d"; exit 1; fi; '
    'if [ "$d" = "$p" ]; then echo exists; else echo "create $d"; fi'
)
_HOST_KEY_SIGNS = ("Host key verification failed", "REMOTE HOST IDENTIFICATION HAS CHANGED")


@dataclass
class Check:
    """One line of the report: ``ok`` is True, False (a failure) or None (skipped)."""

    check: str
    ok: bool | None
    detail: str


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else ""


class _Doctor:
    def __init__(self, target: RemoteTarget, timeout: float | None) -> None:
        self.target = target
        self.timeout = timeout
        self.checks: list[Check] = []

    def add(self, name: str, ok: bool | None, detail: str) -> bool | None:
        self.checks.append(Check(name, ok, detail))
        return ok

    def invoke(self, argv: list[str]) -> tuple[int | None, str]:
        """Run argv on the target: (returncode, first line of output), or (None, why not)."""
        try:
            result = run_adapter(
                self.target.bundle,
                "invoke",
                {"queue": self.target.queue, "argv": argv},
                timeout=self.timeout,
            )
        except (AdapterError, OSError, RuntimeError, ValueError, TimeoutError) as exc:
            return None, _first_line(str(exc))
        code = result.get("returncode")
        output = _first_line(str(result.get("stdout", ""))) or _first_line(
            str(result.get("stderr", ""))
        )
        return (code if isinstance(code, int) else None), output

    def on_target(self, name: str, argv: list[str], missing: str) -> bool | None:
        code, output = self.invoke(argv)
        if code == 0:
            return self.add(name, True, output or "answers")
        return self.add(name, False, f"{missing}: {output or code}")


def _connection(doctor: _Doctor) -> bool:
    target = doctor.target
    try:
        result = run_adapter(
            target.bundle,
            "configure",
            {"queue": target.queue, "settings": {"check_connectivity": "yes"}},
            timeout=doctor.timeout,
        )
    except (AdapterError, OSError, RuntimeError, ValueError, TimeoutError) as exc:
        message = str(exc)
        if any(sign in message for sign in _HOST_KEY_SIGNS):
            doctor.add("ssh", False, "the connection was refused by host key verification")
            doctor.add("host key", False, "does not match known_hosts; verify it, then update")
        else:
            doctor.add("ssh", False, _first_line(message))
            doctor.add("host key", None, "not checked: no connection")
        return False
    if result.get("connectivity") != "ok":
        doctor.add("ssh", False, "no host configured: remote configure NAME --set host=HOST")
        doctor.add("host key", None, "not checked: no connection")
        return False
    doctor.add("ssh", True, "a remote `true` answered")
    doctor.add("host key", True, "matches known_hosts")
    return True


def _target_path(kind: str, path: str) -> str:
    """A workspace as a command on the target reads it (no shell expands a quoted ~)."""
    if kind == "ssh-slurm":
        if path == "~":
            return "."
        return path[2:] if path.startswith("~/") else path
    import os

    return os.path.expanduser(path)


def _workspace_detail(workspace: str, path: str, code: int | None, output: str) -> str:
    """What the workspace check found, saying exactly what it tested."""
    word, _, where = output.partition(" ")
    if code == 0 and word == "exists":
        return f"{workspace}: exists, a directory this user may write"
    if code == 0 and word == "create":
        return (
            f"{workspace}: does not exist yet; it can be created, as {where} is a directory "
            "this user may write (nothing was created)"
        )
    if word == "notdir":
        if where == path:
            return f"{workspace}: exists and is not a directory"
        return f"{workspace}: cannot be created: {where} is not a directory"
    if word == "unwritable":
        if where == path:
            return f"{workspace}: exists, but this user may not write it"
        return f"{workspace}: cannot be created: this user may not write {where}"
    if word == "dangling":
        return f"{workspace}: cannot be created: {where} is a broken symbolic link"
    return f"{workspace}: not checked: {output or code}"


_BEYOND_THE_CONNECTION = (
    "rsync (target)",
    "sbatch (target)",
    "partition",
    "httk (target)",
    "workspace",
)


def diagnose(target: RemoteTarget, *, timeout: float | None = None) -> list[Check]:
    """Check bundle, credentials, connection, tools, partition, httk and workspace."""
    doctor = _Doctor(target, timeout)
    try:
        validate_adapter_bundle(target.bundle)
        metadata: Mapping[str, Any] = read_metadata(target.bundle)
        doctor.add("bundle", True, str(target.bundle))
    except (AdapterError, ValueError) as exc:
        doctor.add("bundle", False, _first_line(str(exc)))
        return doctor.checks
    credentials = credentials_path(target.bundle)
    if credentials.exists():
        mode = credentials.stat().st_mode & 0o777
        doctor.add("credentials", mode & 0o077 == 0, f"{credentials} mode {mode:04o}")
    else:
        doctor.add("credentials", None, "none stored")
    kind = str(metadata.get("kind") or "local")
    settings = queue_settings(target.bundle, target.queue)
    if kind == "ssh-slurm":
        here = shutil.which("rsync")
        doctor.add("rsync (here)", here is not None, here or "not on PATH")
        if not _connection(doctor):
            # every later check is shown, as not run, so the report's shape never changes
            for name in _BEYOND_THE_CONNECTION:
                doctor.add(name, None, "not checked: the target cannot be reached (see ssh)")
            return doctor.checks
        doctor.on_target("rsync (target)", ["rsync", "--version"], "not found")
    if kind in {"ssh-slurm", "local-slurm"}:
        where = "target" if kind == "ssh-slurm" else "here"
        doctor.on_target(f"sbatch ({where})", ["sbatch", "--version"], "not found")
        partition = settings.get("partition")
        if isinstance(partition, str) and partition:
            code, output = doctor.invoke(
                ["sinfo", "--noheader", f"--partition={partition}", "--format=%P"]
            )
            known = code == 0 and bool(output)
            doctor.add("partition", known, partition if known else f"{partition}: not known")
        else:
            doctor.add("partition", None, "not set: Slurm's default partition is used")
    doctor.on_target("httk (target)", ["httk", "--version"], "not found; see remote install")
    workspace = settings.get("workspace")
    if isinstance(workspace, str) and workspace:
        path = _target_path(kind, workspace)
        code, output = doctor.invoke(["sh", "-c", _WORKSPACE, "sh", path])
        doctor.add("workspace", code == 0, _workspace_detail(workspace, path, code, output))
    else:
        doctor.add("workspace", None, "not set: remote configure NAME --set workspace=PATH")
    return doctor.checks


def as_documents(checks: list[Check]) -> list[dict[str, Any]]:
    return [asdict(check) for check in checks]
