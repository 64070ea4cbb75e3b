"""The error tree drawn in errors.py is complete and true."""

from __future__ import annotations

import importlib
import pkgutil
import re

import altar.execution
import pytest
from altar.execution import errors


def drawing(block: int) -> dict[str, tuple[str | None, str | None]]:
    """name -> (parent, other base) from the ``block``-th drawing in the docstring."""
    doc = errors.__doc__ or ""
    blocks = re.findall(r"::\n\n((?:    .*\n|\n)+?)(?:\n\S|\Z)", doc + "\nEND")
    tree: dict[str, tuple[str | None, str | None]] = {}
    stack: list[tuple[int, str]] = []
    for raw in blocks[block].splitlines():
        line = raw[4:]
        match = re.match(r"^([ │]*)(?:[├└]── )?(_?[A-Za-z]+)(?: \((\w+)\))?", line)
        if not match or not match.group(2) or (line.strip().startswith("│") and "──" not in line):
            continue
        if match.group(2)[0].islower() and match.group(2) != "_NotARegularFile":
            continue  # a continued description
        depth = len(match.group(1)) + (4 if "──" in line else 0)
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parent = stack[-1][1] if stack else None
        tree[match.group(2)] = (parent, match.group(3))
        stack.append((depth, match.group(2)))
    return tree


def exported_exceptions() -> dict[str, type[BaseException]]:
    """Every exception class a public altar.execution module exports."""
    found: dict[str, type[BaseException]] = {}
    modules = [altar.execution] + [
        importlib.import_module(f"altar.execution.{info.name}")
        for info in pkgutil.iter_modules(altar.execution.__path__)
        if not info.name.startswith("_")
    ]
    for module in modules:
        for name in getattr(module, "__all__", []):
            value = getattr(module, name)
            if isinstance(value, type) and issubclass(value, BaseException):
                found[name] = value
    return found


def test_every_exported_exception_class_is_drawn_under_its_bases() -> None:
    public = drawing(0)
    exported = exported_exceptions()
    assert exported, "found no exception classes: the test would prove nothing"
    missing = sorted(set(exported) - set(public))
    assert not missing, f"errors.py does not draw {missing}"
    for name, cls in exported.items():
        parent, also = public[name]
        bases = [base.__name__ for base in cls.__bases__]
        assert parent == bases[0], f"{name} is drawn under {parent}, but derives from {bases[0]}"
        assert also == (bases[1] if len(bases) > 1 else None), f"{name}: other base {bases[1:]}"


def test_the_drawing_holds_nothing_that_is_not_exported() -> None:
    drawn = set(drawing(0)) - {"Exception", "ValueError", "OSError", "ConnectionError"}
    assert drawn == set(exported_exceptions())


def test_seam_internal_exceptions_are_drawn_apart() -> None:
    internal = drawing(1)
    assert {"_NotARegularFile", "UsageError"} <= set(internal)
    assert not set(internal) & set(exported_exceptions())


@pytest.mark.parametrize(
    "name",
    ["StagingError", "OutputCollectionError", "BackendCallError", "CancelIncompleteError"],
)
def test_run_errors_share_one_base_and_stay_importable_from_the_runner(name: str) -> None:
    from altar.execution.run import runner

    cls = getattr(errors, name)
    assert issubclass(cls, errors.RunStoppedError)
    assert getattr(runner, name) is cls
    assert getattr(altar.execution, name) is cls
