"""The ``altar`` command: ``main`` parses the command line, one module per group of subcommands."""

from typing import Any


def __getattr__(name: str) -> Any:
    # The entry point was ``altar.execution.cli:main`` when the CLI was one module; importing
    # ``main`` lazily keeps ``altar.execution.cli.status`` and friends cheap to import.
    if name == "main":
        from altar.execution.cli.command import main

        return main
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
