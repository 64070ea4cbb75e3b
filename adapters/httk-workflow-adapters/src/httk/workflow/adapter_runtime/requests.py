"""Reading request members and queue settings, and refusing malformed ones."""

from __future__ import annotations

# Typing names only: importing typing costs every adapter call start-up time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    Settings = Mapping[str, Any]

FALSE_SETTINGS = frozenset({"0", "false", "no", "off"})


def has_control_character(value: str) -> bool:
    """Whether ``value`` holds an ASCII control character (U+0000-U+001F or U+007F)."""
    return any(ch < " " or ch == "\x7f" for ch in value)


def _ascii_digits(value: str) -> bool:
    return value.isascii() and value.isdigit()


def settings_of(request: Mapping[str, Any]) -> dict[str, Any]:
    value = request.get("queue_settings")
    return dict(value) if isinstance(value, dict) else {}


def text(settings: Settings, key: str) -> str | None:
    """A setting as stripped text; missing, empty, JSON booleans and non-scalars are unset."""
    value = settings.get(key)
    if value is None or isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    stripped = str(value).strip()
    return stripped or None


def flag(settings: Settings, key: str, default: bool) -> bool:
    value = text(settings, key)
    if value is None:
        return default
    return value.lower() not in FALSE_SETTINGS


def argv_of(request: Mapping[str, Any], operation: str) -> list[str]:
    value = request.get("argv")
    if not isinstance(value, list) or not value or not all(isinstance(x, str) for x in value):
        raise ValueError(f"{operation} argv must be a nonempty string array")
    return list(value)


def cwd_of(request: Mapping[str, Any]) -> str | None:
    value = request.get("cwd")
    return None if value is None else str(value)


def paths_of(request: Mapping[str, Any]) -> tuple[str, str]:
    source, destination = request.get("source"), request.get("destination")
    if (
        not isinstance(source, str)
        or not source
        or not isinstance(destination, str)
        or not destination
    ):
        raise ValueError("transfer requires nonempty source and destination paths")
    return source, destination


def files_of(request: Mapping[str, Any]) -> list[str] | None:
    """The explicit batch, each entry relative and inside the transferred tree."""
    value = request.get("files")
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(x, str) and x for x in value):
        raise ValueError("transfer files must be an array of nonempty relative paths")
    for item in value:
        if item.startswith("/") or ".." in item.split("/") or "\n" in item or "\r" in item:
            raise ValueError(f"transfer file is not workspace relative: {item}")
    return list(value)


def count_of(request: Mapping[str, Any]) -> int:
    value = request.get("count", 1)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError("start-manager count must be a positive integer")
    return value


def port_of(settings: Settings) -> str | None:
    port = text(settings, "port")
    if port is not None and (not _ascii_digits(port) or not 0 < int(port) < 65536):
        raise ValueError(f"queue setting port must be numeric: {port!r}")
    return port


def _login_word(settings: Settings, key: str) -> str | None:
    value = text(settings, key)
    if value is None:
        return None
    if any(ch.isspace() for ch in value):
        raise ValueError(f"queue setting {key} must not contain whitespace: {value!r}")
    if has_control_character(value) or value.startswith("-"):
        raise ValueError(f"queue setting {key} is not a valid name: {value!r}")
    return value


def host_of(settings: Settings) -> str | None:
    return _login_word(settings, "host")


def username_of(settings: Settings) -> str | None:
    username = _login_word(settings, "username")
    if username is not None and "@" in username:
        raise ValueError(f"queue setting username is not a valid name: {username!r}")
    return username


def workers_of(settings: Settings) -> str | None:
    workers = text(settings, "workers")
    if workers is not None and (not _ascii_digits(workers) or int(workers) < 1):
        raise ValueError(f"queue setting workers must be a positive integer: {workers!r}")
    return workers


def httk_prefix(settings: Settings) -> list[str] | None:
    """The parsed ``httk_command`` setting, or ``None`` when unset."""
    value = text(settings, "httk_command")
    if value is None:
        return None
    import shlex

    prefix = shlex.split(value)
    if not prefix:
        raise ValueError("queue setting httk_command must not be empty")
    return prefix


def check_directive(key: str, value: str) -> str:
    """A value a ``#SBATCH`` line can carry: no control characters, no backslash.

    sbatch reads a backslash as an escape, and in ``--output`` it turns off the ``%j``
    substitution; the batch script escapes ``#`` and quotes, but cannot express it.
    """
    if has_control_character(value):
        raise ValueError(f"queue setting {key} must not contain control characters")
    if "\\" in value:
        raise ValueError(f"queue setting {key} must not contain backslashes")
    return value
