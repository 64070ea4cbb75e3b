"""The tutorial shows its example inline (readable outside the built site), and that code is
the code the suite runs: every block marked with its source must be a verbatim part of it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "extending" / "writing-a-backend.md"
BLOCK = re.compile(
    r"<!-- source: (?P<source>\S+) -->\n(?:<!-- skip: next -->\n)?```python\n(?P<code>.*?)```",
    re.DOTALL,
)


def _blocks() -> list[tuple[Path, str]]:
    return [
        ((PAGE.parent / m["source"]).resolve(), m["code"]) for m in BLOCK.finditer(PAGE.read_text())
    ]


def test_every_sourced_block_is_verbatim_in_its_source() -> None:
    blocks = _blocks()
    assert blocks, "the tutorial shows no sourced code"
    for source, code in blocks:
        assert source.is_file(), f"{PAGE.name} names a missing source {source}"
        assert code in source.read_text(), (
            f"a block of {PAGE.name} is not a verbatim part of {source.relative_to(ROOT)}; "
            "copy the current code into the page"
        )


def test_the_page_shows_the_whole_backend_its_fake_and_its_contract_test() -> None:
    shown = "\n".join(code for _, code in _blocks())
    for part in (
        "class ProcessRuntime(Protocol):",
        "class SubprocessExecutionBackend(ExecutionBackend):",
        "async def poll(self, handles: list[TaskHandle])",
        "class FakeProcesses:",
        "class TestSubprocessBackend(ExecutionBackendContract):",
        "def launched_task(",
        # the durable runtime, where the hard problems are, and the test module's imports
        "class LocalProcesses:",
        "_SHIM = ",
        "def _alive(pid: int) -> bool:",
        "from altar.conformance import ExecutionBackendContract",
    ):
        assert part in shown, f"{PAGE.name} does not show {part!r}"
    # launched_task reports what the fake received, not what the backend was configured with
    assert "LaunchedTask(process.image," in shown
    assert "backend.host_image, process" not in shown


def test_the_page_includes_both_files_whole() -> None:
    # The site shows the complete files as CI runs them; the checkout shows where they are.
    text = PAGE.read_text()
    for source in (
        "../examples/subprocess_backend.py",
        "../../conformance/tests/test_example_backend.py",
    ):
        directive = f"```{{literalinclude}} {source}\n:language: python\n```"
        assert directive in text, f"{PAGE.name} does not include {source} whole"
        assert (PAGE.parent / source).resolve().is_file(), f"{source} does not exist"
