"""Reading a rendered batch script back the way ``sbatch`` and a shell would (for the fake)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

__all__ = ["ReadScript", "logical_lines", "read_script", "sbatch_directives"]


@dataclass(frozen=True)
class ReadScript:
    """What a batch script asks for, read back the way sbatch and a shell would."""

    directives: dict[str, str | None]
    env: dict[str, str]
    argv: list[str]  # the container runtime's argv


def sbatch_directives(script: str) -> dict[str, str | None]:
    """``#SBATCH`` options up to the first command line, split with sbatch's quoting rules."""
    out: dict[str, str | None] = {}
    for line in script.splitlines()[1:]:
        if not line.startswith("#"):
            if line.strip():
                break
            continue
        if not line.startswith("#SBATCH "):
            continue
        for word in _sbatch_words(line[len("#SBATCH ") :]):
            option, eq, value = word.partition("=")
            out[option] = value if eq else None
    return out


def _sbatch_words(text: str) -> list[str]:
    """Split a ``#SBATCH`` line as sbatch does: quotes group, a backslash escapes the next
    character (inside quotes too), an unquoted ``#`` ends the line."""
    words: list[str] = []
    word: list[str] | None = None
    quote: str | None = None
    chars = iter(text)
    for ch in chars:
        if ch == "\\":
            word = (word or []) + [next(chars, "")]
        elif quote is not None:
            if ch == quote:
                quote = None
            else:
                word = (word or []) + [ch]
        elif ch in "'\"":
            quote, word = ch, word or []
        elif ch == "#":
            break
        elif ch.isspace():
            if word is not None:
                words.append("".join(word))
            word = None
        else:
            word = (word or []) + [ch]
    if word is not None:
        words.append("".join(word))
    return words


def read_script(script: str) -> ReadScript:
    """The container command of a script rendered by :func:`~.render.batch_script`."""
    line = next((text for text in logical_lines(script) if _is_container_line(text)), None)
    if line is None:
        raise ValueError("no container command in the batch script")
    words = shlex.split(line.removeprefix("exec ").removesuffix(" &"))
    env: dict[str, str] = {}
    if words[:2] == ["env", "--"]:
        words = words[2:]
        while words and "=" in words[0]:
            key, _, value = words.pop(0).partition("=")
            env[key] = value
    return ReadScript(sbatch_directives(script), env, words)


def _is_container_line(text: str) -> bool:
    """The line that starts the container: ``[exec] [env -- ...] <runtime> ...``."""
    words = text.removeprefix("exec ").split(" ", 2)
    first = words[0]
    if first == "env":
        return True
    return first in ("docker", "podman", "apptainer") and (
        text.startswith("exec ") or text.endswith(" &")
    )


def logical_lines(script: str) -> list[str]:
    """Lines of a shell script, joining those a quoted newline continues."""
    lines: list[str] = []
    pending = ""
    for raw in script.splitlines():
        pending = f"{pending}\n{raw}" if pending else raw
        try:
            shlex.split(pending, comments=True)
        except ValueError:
            continue  # an open quote: the command goes on
        lines.append(pending)
        pending = ""
    return lines
