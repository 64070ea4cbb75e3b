"""The seven operations of the maintained kinds."""

from __future__ import annotations

import os
import sys

from . import BATCH_DIRECTIVES
from .requests import (
    argv_of,
    check_directive,
    count_of,
    cwd_of,
    files_of,
    flag,
    paths_of,
    settings_of,
    text,
    workers_of,
)
from .targets import LocalTarget, SshTarget, target_for

# Typing names only: importing typing costs every adapter call start-up time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from .targets import Target

    Values = dict[str, Any]

MISSING_HTTK = (
    "httk-workflow is not available on the target; install it there, for example with "
    "'pipx install httk-workflow', or configure the queue with httk_command=COMMAND, "
    "or opt into an automatic attempt with bootstrap=pip"
)


class Refusal(Exception):
    """The adapter understood the request and will not, or cannot, carry it out."""


def validate_settings(kind: str, settings: Mapping[str, Any]) -> None:
    """Refuse malformed values before anything is stored or run."""
    workers_of(settings)
    for key, _ in BATCH_DIRECTIVES:
        value = text(settings, key)
        if value is not None:
            check_directive(key, value)
    if kind == "ssh-slurm" and text(settings, "host") is not None:
        SshTarget(settings)


def configure(kind: str, request: Mapping[str, Any]) -> Values:
    pending = request.get("settings")
    settings = {**settings_of(request), **(pending if isinstance(pending, dict) else {})}
    validate_settings(kind, settings)
    if kind != "ssh-slurm":
        return {"configured": True}
    if text(settings, "host") is None or not flag(settings, "check_connectivity", True):
        return {"configured": True, "connectivity": "skipped"}
    target = SshTarget(settings)
    probe = target.run(["true"])
    if probe.returncode != 0:
        reason = probe.stderr.strip() or str(probe.returncode)
        raise Refusal(
            f"cannot reach {target.destination}: {reason}; "
            "set check_connectivity=no to configure the queue anyway"
        )
    return {"configured": True, "connectivity": "ok"}


def _probe_httk(target: Target, settings: Mapping[str, Any]) -> tuple[list[str], str] | None:
    candidates = [target.httk(["httk"])]
    if text(settings, "httk_command") is None:
        candidates.append(["python3", "-m", "httk.core.cli"])
    for candidate in candidates:
        try:
            version = target.run([*candidate, "--version"])
            if version.returncode != 0:
                continue
            plugin = target.run([*candidate, "workflow", "workspace", "--help"])
        except FileNotFoundError:
            continue
        if plugin.returncode == 0:
            return candidate, version.stdout.strip()
    return None


def install(kind: str, request: Mapping[str, Any]) -> Values:
    settings = settings_of(request)
    target = target_for(kind, settings)
    if isinstance(target, SshTarget):
        probe = target.run(["true"])
        if probe.returncode != 0:
            raise Refusal(f"cannot reach {target.destination}: {probe.stderr.strip()}")
    found = _probe_httk(target, settings)
    bootstrapped = False
    if found is None and text(settings, "bootstrap") == "pip":
        attempt = target.run(["python3", "-m", "pip", "install", "--user", "httk-workflow"])
        sys.stderr.write(attempt.stderr)
        bootstrapped = attempt.returncode == 0
        found = _probe_httk(target, settings)
    if found is None:
        raise Refusal(MISSING_HTTK)
    command, version = found
    values: Values = {
        "installed": True,
        "bootstrapped": bootstrapped,
        "httk_command": command,
        "httk_version": version,
    }
    workspace = text(settings, "workspace")
    if workspace is not None:
        existed = target.run(["test", "-d", workspace]).returncode == 0
        if not existed:
            made = target.run(["mkdir", "-p", "--", workspace])
            if made.returncode != 0:
                raise Refusal(
                    f"cannot create workspace directory {workspace}: {made.stderr.strip()}"
                )
        values.update(workspace=workspace, workspace_created=not existed)
    return values


def invoke(kind: str, request: Mapping[str, Any], operation: str) -> Values:
    settings = settings_of(request)
    argv = argv_of(request, operation)
    cwd = cwd_of(request) if operation == "invoke" else None
    target = target_for(kind, settings)
    completed = target.run(target.httk(argv), cwd=cwd)
    return {
        "returncode": completed.returncode,
        "stdout": completed.stdout,
        "stderr": completed.stderr,
    }


def transfer(kind: str, request: Mapping[str, Any], operation: str) -> Values:
    from pathlib import Path

    from .transfer import copy_local, rsync

    source, destination = paths_of(request)
    files = files_of(request)
    push = operation == "push"
    if kind != "ssh-slurm":
        resolved = Path(destination).expanduser().resolve()
        copy_local(Path(source).expanduser().resolve(), resolved, files)
        return {"path": str(resolved)}
    target = SshTarget(settings_of(request))
    stated = request.get("directory")
    if isinstance(stated, bool):
        directory = stated
    else:
        directory = os.path.isdir(os.path.expanduser(source)) if push else True
    rsync(
        target,
        source=source,
        destination=destination,
        directory=directory,
        files=files,
        push=push,
    )
    return {"path": destination}


def start_manager(kind: str, request: Mapping[str, Any]) -> Values:
    import subprocess

    from . import batch

    settings = settings_of(request)
    argv = batch.with_workers(argv_of(request, "start-manager"), workers_of(settings))
    target = target_for(kind, settings)
    if isinstance(target, LocalTarget) and kind == "local":
        count = count_of(request)
        pids = []
        for _ in range(count):
            process = subprocess.Popen(
                target.httk(argv),
                cwd=cwd_of(request),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            pids.append(process.pid)
        return {"pid": pids[0], "pids": pids, "count": count}
    workspace = batch.choose_workspace(request, argv, settings)
    script = batch.batch_script(target.httk(argv), settings, workspace)
    count = count_of(request)
    return batch.submit(target, script, workspace, count)


def dispatch(kind: str, operation: str, request: Mapping[str, Any]) -> Values:
    if operation == "configure":
        return configure(kind, request)
    if operation == "install":
        return install(kind, request)
    if operation in {"push", "pull"}:
        return transfer(kind, request, operation)
    if operation in {"invoke", "status"}:
        return invoke(kind, request, operation)
    if operation == "start-manager":
        return start_manager(kind, request)
    raise ValueError(f"unsupported maintained adapter operation: {operation}")
