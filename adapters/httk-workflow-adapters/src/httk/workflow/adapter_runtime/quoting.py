"""The single place a string for a shell is composed.

ssh joins its command words and hands the result to a login shell on the far side,
and a batch script is a shell program; both get their commands from here, quoted
element by element, so no request or setting value can become shell syntax.
"""

from __future__ import annotations

# Typing names only: importing typing costs every adapter call start-up time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence


def shell_command(argv: Sequence[str], *, cwd: str | None = None) -> str:
    """``argv`` as one shell command line, optionally run inside ``cwd``."""
    import shlex  # here, not at the top: local operations never need it, and start-up counts

    quoted = " ".join(shlex.quote(item) for item in argv)
    if cwd is None:
        return quoted
    # cd takes a leading "-" as an option ("-P", "-L"; "-" alone is $OLDPWD) and would
    # run the command in the login directory instead; as "./-…" it names the directory.
    if cwd.startswith("-"):
        cwd = f"./{cwd}"
    return f"cd {shlex.quote(cwd)} && {quoted}"


# The name the upstream documentation points readers to.
_shell_command = shell_command
