"""push and pull: a local copy, or rsync over the queue's ssh transport."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .targets import SshTarget

# Typing names only: importing typing costs every adapter call start-up time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from .progress import Progress

MANIFEST = Path(".httk-transfer") / "manifest.json"


def _replace_file(
    source: Path,
    destination: Path,
    *,
    follow_symlinks: bool = True,
    progress: Progress | None = None,
) -> None:
    """Copy one file (a symlink as a link, without ``follow_symlinks``) onto ``destination``.

    The copy is made under a temporary name beside the destination and renamed over it:
    an interrupted copy leaves the previous file (or none), never a partial one, and a
    repeated copy replaces what is there, symlinks included.
    """
    link = not follow_symlinks and source.is_symlink()
    fd, name = tempfile.mkstemp(
        prefix=f".{destination.name}.", suffix=".tmp", dir=destination.parent
    )
    os.close(fd)
    staging = Path(name)
    try:
        if link:
            staging.unlink()
            os.symlink(os.readlink(source), staging)
            if progress is not None:
                progress.file_done()
        elif progress is not None:
            progress.copy(source, staging)
        else:
            shutil.copy2(source, staging)
        os.replace(staging, destination)
    except BaseException:
        staging.unlink(missing_ok=True)
        raise


def copy_local(
    source: Path, destination: Path, files: list[str] | None = None, *, progress: bool = False
) -> None:
    """Copy a tree, a file, or a batch of files; an identical finished copy is a no-op.

    With ``progress`` a line like rsync's ``--info=progress2`` is redrawn on stderr while
    the copy runs, and ends with the totals (a no-op copy draws nothing).
    """
    shown: Progress | None = None
    if progress:
        from .progress import Progress

        shown = Progress.of(source, files)
    _copy_local(source, destination, files, shown)
    if shown is not None and shown.files:
        shown.finish()


def _copy_local(
    source: Path, destination: Path, files: list[str] | None, progress: Progress | None
) -> None:
    if files is not None:
        for item in files:
            target = destination / item
            target.parent.mkdir(parents=True, exist_ok=True)
            _replace_file(source / item, target, follow_symlinks=False, progress=progress)
        return
    if source.is_dir():
        if destination.exists():
            theirs, ours = destination / MANIFEST, source / MANIFEST
            if (
                destination.is_dir()
                and theirs.is_file()
                and ours.is_file()
                and theirs.read_bytes() == ours.read_bytes()
            ):
                return
            raise FileExistsError(destination)
        destination.parent.mkdir(parents=True, exist_ok=True)
        # Copy beside the destination, then rename: an interrupted copy is never mistaken
        # for a finished one.
        staging = Path(tempfile.mkdtemp(prefix=f".{destination.name}.", dir=destination.parent))
        try:
            if progress is None:
                shutil.copytree(source, staging, symlinks=True, dirs_exist_ok=True)
            else:
                shutil.copytree(
                    source, staging, symlinks=True, dirs_exist_ok=True, copy_function=progress.copy
                )
            staging.chmod(source.stat().st_mode & 0o7777)
            staging.rename(destination)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return
    if not source.exists():
        raise FileNotFoundError(f"source does not exist: {source}")
    if destination.is_dir():
        destination = destination / source.name  # as cp (and shutil.copy2) would
    destination.parent.mkdir(parents=True, exist_ok=True)
    _replace_file(source, destination, progress=progress)


@functools.cache
def rsync_has_mkpath() -> bool:
    completed = subprocess.run(
        ["rsync", "--help"], capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False
    )
    return "--mkpath" in completed.stdout


def _local_operand(path: str) -> str:
    # rsync reads "a:b" (a colon before any slash) as a remote path and "-x" as an option.
    return path if path.startswith("/") else f"./{path}"


def files_list(files: list[str]) -> bytes:
    """The ``--files-from`` list: NUL-separated, every name anchored with ``./``.

    rsync skips list lines starting with ``#`` or ``;`` as comments, with ``--from0``
    too, so ``#hash`` was silently left behind; ``./#hash`` names the same file.
    """
    return b"".join(f"./{item}".encode("utf-8", "surrogateescape") + b"\0" for item in files)


def _make_parent(target: SshTarget, destination: str, *, directory: bool, push: bool) -> None:
    parent = destination.rstrip("/") if directory else str(Path(destination).parent)
    if not parent:
        return
    if push:
        made = target.run(["mkdir", "-p", "--", parent])
        if made.returncode != 0:
            raise RuntimeError(f"cannot create remote directory {parent}: {made.stderr.strip()}")
    else:
        Path(parent).expanduser().mkdir(parents=True, exist_ok=True)


def rsync(
    target: SshTarget,
    *,
    source: str,
    destination: str,
    directory: bool,
    files: list[str] | None,
    push: bool,
    progress: bool = False,
) -> None:
    """Transfer with ``--archive --protect-args``; file names never pass through a shell.

    A push whose local source is missing raises FileNotFoundError before anything connects.

    With ``progress`` rsync's overall progress goes to this process's stderr as it
    happens (the caller streams it to a terminal), not into the captured output.
    """
    if push and not os.path.lexists(os.path.expanduser(source)):
        # One line naming the path, not rsync's two-line change_dir/error-code report.
        raise FileNotFoundError(f"source does not exist: {source}")
    target.ensure_master()
    argv = ["rsync", "--archive", "--protect-args", "-e", target.rsync_shell()]
    if progress:
        argv.append("--info=progress2")
    if rsync_has_mkpath():
        argv.append("--mkpath")
    else:
        _make_parent(target, destination, directory=directory or files is not None, push=push)
    list_path: str | None = None
    try:
        if files is not None:
            directory = True
            fd, list_path = tempfile.mkstemp(prefix="httk-adapter-files-", suffix=".txt")
            with os.fdopen(fd, "wb") as handle:
                handle.write(files_list(files))
            argv += ["--from0", f"--files-from={list_path}"]
        local, remote = (source, destination) if push else (destination, source)
        suffix = "/" if directory else ""
        local_operand = _local_operand(local.rstrip("/") + suffix if directory else local)
        remote_operand = (
            f"{target.destination}:{remote.rstrip('/') + suffix if directory else remote}"
        )
        argv += [local_operand, remote_operand] if push else [remote_operand, local_operand]
        sys.stderr.flush()
        completed = subprocess.run(
            argv,
            stdout=sys.stderr.fileno() if progress else subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="surrogateescape",
            stdin=subprocess.DEVNULL,
            check=False,
        )
    finally:
        if list_path is not None:
            Path(list_path).unlink(missing_ok=True)
    if completed.returncode != 0:
        # The message carries rsync's stderr; forwarding it as well printed it twice.
        raise RuntimeError(f"rsync failed ({completed.returncode}): {completed.stderr.strip()}")
    if completed.stderr:
        sys.stderr.write(completed.stderr)
