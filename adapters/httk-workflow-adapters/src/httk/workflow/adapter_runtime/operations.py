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
from .targets import (
    SSH_FAILED,
    LocalTarget,
    SshTarget,
    Unreachable,
    home_relative,
    target_for,
)

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
    """The adapter understood the request and will not, or cannot, carry it out.

    ``reason`` goes into the refusal document as ``refusal`` (``unreachable`` when the
    remote could not be reached), so callers can tell the cases apart by type.
    """

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason


def unreachable(target: SshTarget, stderr: str, returncode: int) -> Refusal:
    # ssh's messages keep their lines: a changed host key explains itself over several.
    reason = stderr.strip() or str(returncode)
    return Refusal(f"cannot reach {target.destination}: {reason}", "unreachable")


def workspace_base(request: Mapping[str, Any]) -> str | None:
    """What a relative local workspace is relative to: the project owning the bundle.

    A project bundle lives in ``PROJECT/.httk-project/remotes/NAME``; a relative
    workspace then means the same directory from wherever the command is run. A global
    bundle's relative workspace is relative to the home directory, as over ssh.
    """
    directory = request.get("adapter_dir")
    if not isinstance(directory, str) or not directory:
        return None
    remotes = os.path.dirname(os.path.normpath(directory))
    project_dir = os.path.dirname(remotes)
    if os.path.basename(remotes) == "remotes" and os.path.basename(project_dir) == ".httk-project":
        return os.path.dirname(project_dir)
    return None


def validate_settings(kind: str, settings: Mapping[str, Any]) -> None:
    """Refuse malformed values before anything is stored or run."""
    workers_of(settings)
    for key, _ in BATCH_DIRECTIVES:
        value = text(settings, key)
        if value is not None:
            check_directive(key, value)
    if kind == "ssh-slurm" and text(settings, "host") is not None:
        SshTarget(settings)


def absolute_workspace(target: Target, workspace: str, request: Mapping[str, Any]) -> str:
    """The workspace as every operation must read it: over ssh relative to the login
    directory (where ssh starts commands and rsync resolves paths), locally relative to
    the project owning the bundle (:func:`workspace_base`)."""
    if target.remote:
        return target.absolute(workspace)
    return target.absolute(workspace, workspace_base(request))


def configure(kind: str, request: Mapping[str, Any]) -> Values:
    pending = request.get("settings")
    settings = {**settings_of(request), **(pending if isinstance(pending, dict) else {})}
    validate_settings(kind, settings)
    if kind != "ssh-slurm":
        return {"configured": True}
    if text(settings, "host") is None or not flag(settings, "check_connectivity", True):
        return {"configured": True, "connectivity": "skipped"}
    target = SshTarget(settings)
    probe = target.reachable()
    if probe.returncode != 0:
        reason = probe.stderr.strip() or str(probe.returncode)
        raise Refusal(
            f"cannot reach {target.destination}: {reason}; "
            "set check_connectivity=no to configure the queue anyway",
            "unreachable",
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
        probe = target.reachable()
        if probe.returncode != 0:
            raise Refusal(
                f"cannot reach {target.destination}: {probe.stderr.strip()}", "unreachable"
            )
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
        # ~ and relative workspaces are made absolute the way every later operation will
        # read them; quoted, "~/ws" would otherwise create a directory named "~".
        path = absolute_workspace(target, workspace, request)
        existed = target.run(["test", "-d", path]).returncode == 0
        if not existed:
            made = target.run(["mkdir", "-p", "--", path])
            if made.returncode != 0:
                raise Refusal(
                    f"cannot create workspace directory {workspace}: {made.stderr.strip()}"
                )
        values.update(workspace=workspace, workspace_created=not existed)
        if path != workspace:
            values["workspace_path"] = path
    return values


def invoke(kind: str, request: Mapping[str, Any], operation: str) -> Values:
    settings = settings_of(request)
    argv = argv_of(request, operation)
    cwd = cwd_of(request) if operation == "invoke" else None
    target = target_for(kind, settings)
    if cwd is not None and cwd.startswith("~"):
        cwd = target.absolute(cwd)
    completed = target.run(target.httk(argv), cwd=cwd, guard=True)
    if isinstance(target, SshTarget) and completed.returncode == SSH_FAILED:
        # 255 is also an exit status a command may choose: ask again with a bare `true`.
        probe = target.reachable()
        if probe.returncode != 0:
            raise unreachable(target, completed.stderr or probe.stderr, probe.returncode)
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
        copy_local(
            Path(source).expanduser().resolve(),
            resolved,
            files,
            progress=request.get("progress") is True,
        )
        return {"path": str(resolved)}
    target = SshTarget(settings_of(request))
    if push:
        destination = home_relative(destination)
    else:
        source = home_relative(source)
    stated = request.get("directory")
    if isinstance(stated, bool):
        directory = stated
    elif push:
        directory = os.path.isdir(os.path.expanduser(source))
    elif files is not None:
        directory = True
    else:
        # As the local kinds do: a single file is pulled as a file, a tree as its contents.
        directory = target.run(["test", "-f", source]).returncode != 0
    rsync(
        target,
        source=source,
        destination=destination,
        directory=directory,
        files=files,
        push=push,
        progress=request.get("progress") is True,
    )
    return {"path": paths_of(request)[1]}


def start_manager(kind: str, request: Mapping[str, Any]) -> Values:
    import subprocess

    from . import batch

    settings = settings_of(request)
    argv = batch.with_workers(argv_of(request, "start-manager"), workers_of(settings))
    target = target_for(kind, settings)
    if argv[0] == "httk":
        # Every kind alike: a manager whose httk does not answer is refused before anything
        # is started or submitted.
        _check_manager_program(target, target.httk(["httk"]))
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
    chosen = batch.choose_workspace(request, argv, settings)
    workspace = absolute_workspace(target, chosen, request)
    argv = batch.with_manager_workspace(argv, chosen, workspace)
    command = target.httk(argv)
    script = batch.batch_script(command, settings, workspace)
    count = count_of(request)
    return batch.submit(target, script, workspace, count)


def _check_manager_program(target: Target, program: list[str]) -> None:
    """Refuse before submitting when the manager's httk does not answer on the target.

    Otherwise sbatch accepts the job (or the local kind starts a detached process),
    "submitted" or "started" is printed, and the manager fails at once with exit status
    127 where nobody is looking.
    """
    try:
        answer = target.run([*program, "--version"])
    except FileNotFoundError:
        raise Refusal(MISSING_HTTK) from None
    if isinstance(target, SshTarget) and answer.returncode == SSH_FAILED:
        probe = target.reachable()
        if probe.returncode != 0:
            raise unreachable(target, probe.stderr, probe.returncode)
    if answer.returncode != 0:
        raise Refusal(MISSING_HTTK)


def dispatch(kind: str, operation: str, request: Mapping[str, Any]) -> Values:
    try:
        return _dispatch(kind, operation, request)
    except Unreachable as exc:
        raise Refusal(str(exc), "unreachable") from None


def _dispatch(kind: str, operation: str, request: Mapping[str, Any]) -> Values:
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
