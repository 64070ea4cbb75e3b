"""The ``altar run ...`` command that resumes a run, as a shell line a user can paste.

A run's backend and its backend options are part of the run (a resume with other options is
refused), so the command carries every ``--backend`` and ``--option`` the run needs; each
value is written so that ``--option KEY=VALUE`` reads it back as the same value.
"""

from __future__ import annotations

import contextlib
import json
import math
import shlex
import tomllib
from collections.abc import Mapping, Sequence
from typing import Any

from altar.execution.errors import AltarError
from altar.execution.plans.plan import resolve_path_options
from altar.execution.plans.plan_cache import cached_plan
from altar.execution.registry import default_registry
from altar.execution.state.journal import Journal

__all__ = [
    "RUN_FLAGS",
    "flag_words",
    "journal_resume_command",
    "option_text",
    "resume_command",
    "toml_value",
]


def toml_value(value: Any) -> str:
    """``value`` as a TOML value (what ``--option KEY=VALUE`` parses)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, Mapping):
        items = ", ".join(f"{_toml_string(str(k))} = {toml_value(v)}" for k, v in value.items())
        return "{ " + items + " }" if items else "{}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return _toml_string(str(value))


def _toml_string(text: str) -> str:
    out = ['"']
    for char in text:
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def option_text(key: str, value: Any) -> str:
    """``KEY=VALUE`` for ``--option``: plain text where it reads back as itself, else TOML."""
    if isinstance(value, str) and value == value.strip() and "\n" not in value:
        try:
            parsed: Any = tomllib.loads(f"v = {value}")["v"]
        except tomllib.TOMLDecodeError:
            return f"{key}={value}"  # not a TOML value: the CLI takes it as text
        if parsed == value and type(parsed) is str:
            return f"{key}={value}"
    return f"{key}={toml_value(value)}"


def resume_command(
    plan: str,
    run_dir: str,
    *,
    backend: str | None = None,
    options: Sequence[tuple[str, Any]] = (),
    extra: Sequence[str] = (),
) -> str:
    """The shell line ``altar run PLAN [--backend B] [--option K=V]... --run-dir DIR``."""
    argv = ["altar", "run", plan]
    if backend:
        argv += ["--backend", backend]
    for key, value in options:
        argv += ["--option", option_text(key, value)]
    argv += [*extra, "--run-dir", run_dir]
    return shlex.join(argv)


def journal_resume_command(journal: Journal) -> str:
    """The resume line of a run from its journal: the options its plan does not give, and
    the ``--max-parallel``/``--max-retries`` it was run with.

    When the plan cannot be read any more, every recorded option is given.
    """
    backend: str | None = journal.backend_type
    options: dict[str, Any] = dict(journal.backend_options)
    with contextlib.suppress(AltarError, OSError):
        plan = cached_plan(journal.plan_source)
        if plan.backend_type == journal.backend_type:
            backend = None
            planned = dict(plan.backend_options)
            with contextlib.suppress(AltarError):
                planned = resolve_path_options(
                    planned, default_registry.get(journal.backend_type), plan.base_dir
                )
            options = {
                key: value
                for key, value in options.items()
                if key not in planned or _stored(planned[key]) != _stored(value)
            }
    return resume_command(
        journal.plan_source,
        str(journal.run_dir),
        backend=backend,
        options=list(options.items()),
        extra=flag_words(journal.flags),
    )


#: The ``altar run`` flags a journal records (:attr:`Journal.flags`), in the order printed.
RUN_FLAGS = (
    ("max_parallel", "--max-parallel"),
    ("max_retries", "--max-retries"),
    ("max_provider_retries", "--max-provider-retries"),
)


def flag_words(flags: Mapping[str, int]) -> list[str]:
    """``--max-parallel N --max-retries N`` for the recorded flags (unknown names skipped)."""
    words: list[str] = []
    for name, flag in RUN_FLAGS:
        if flags.get(name) is not None:
            words += [flag, str(flags[name])]
    return words


def _stored(value: Any) -> Any:
    """A value as the journal keeps it (JSON), so a tuple equals the list it was saved as."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))
