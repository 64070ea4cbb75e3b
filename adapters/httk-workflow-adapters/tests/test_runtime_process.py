"""The runtime's own command runner and JSON codec, checked against subprocess and json."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from httk.workflow.adapter_runtime import jsontext, process
from hypothesis import given, settings
from hypothesis import strategies as st

HOSTILE = ["a b", "'", '"', "$(id)", "`id`", "x\ny", "..", "-n", "", "é\u2028", "*"]


def _python(code: str, *arguments: str) -> list[str]:
    return [sys.executable, "-c", code, *arguments]


def test_arguments_reach_the_command_verbatim() -> None:
    completed = process.run(_python("import sys, json; print(json.dumps(sys.argv[1:]))", *HOSTILE))
    assert completed.returncode == 0
    assert json.loads(completed.stdout) == HOSTILE
    assert completed.stderr == ""


def test_large_interleaved_output_on_both_pipes_does_not_block() -> None:
    code = (
        "import sys\n"
        "for i in range(3000):\n"
        "    sys.stdout.write('o' * 99 + '\\n'); sys.stderr.write('e' * 49 + '\\n')\n"
    )
    completed = process.run(_python(code))
    assert completed.stdout == ("o" * 99 + "\n") * 3000
    assert completed.stderr == ("e" * 49 + "\n") * 3000


def test_exit_status_signal_and_bytes_match_subprocess(tmp_path: Path) -> None:
    cases = [
        _python("import sys; sys.stdout.buffer.write(b'a\\r\\nb\\rc\\x89'); sys.exit(3)"),
        _python("import os, signal; os.kill(os.getpid(), signal.SIGTERM)"),
        ["cat"],  # stdin is /dev/null: returns at once
    ]
    for argv in cases:
        ours = process.run(argv)
        theirs = subprocess.run(argv, capture_output=True, stdin=subprocess.DEVNULL, check=False)
        assert (
            ours.returncode,
            process.encoded(ours.stdout),
            process.encoded(ours.stderr),
        ) == (theirs.returncode, theirs.stdout, theirs.stderr)
    # CR and CRLF are kept and a byte that is not UTF-8 does not fail the command.
    assert process.run(cases[0]).stdout == "a\r\nb\rc\udc89"
    assert process.run(cases[1]).returncode == -signal.SIGTERM
    # What the command inherits as ignored: the interpreter ignores SIGPIPE and SIGXFSZ.
    # (glibc's posix_spawn also marks its two internal signals, 32 and 33, ignored; every
    # glibc program reinstalls them at start-up.)
    status = process.run(["grep", "^SigIgn:", "/proc/self/status"]).stdout
    ignored = int(status.split()[1], 16)
    assert not ignored & (1 << (signal.SIGPIPE - 1) | 1 << (signal.SIGXFSZ - 1))
    assert not ignored & ~(1 << 31 | 1 << 32)


def test_cwd_is_used_for_the_command_only(tmp_path: Path) -> None:
    directory = tmp_path / "with space $(x)"
    directory.mkdir()
    before = os.getcwd()
    completed = process.run(_python("import os; print(os.getcwd())"), cwd=str(directory))
    assert completed.stdout == f"{directory}\n"
    assert os.getcwd() == before
    with pytest.raises(FileNotFoundError):
        process.run(["true"], cwd=str(tmp_path / "missing"))
    assert os.getcwd() == before


def test_a_missing_program_raises_like_subprocess(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        process.run(["httk-no-such-program-here"])
    with pytest.raises(FileNotFoundError):
        process.run([str(tmp_path / "nope")])
    with pytest.raises(ValueError, match="program name"):
        process.run([])


def test_inherited_descriptors_are_not_passed_on(tmp_path: Path) -> None:
    # In a child interpreter that inherited an extra descriptor, as an adapter might.
    code = (
        "import os, sys\n"
        "from httk.workflow.adapter_runtime import process\n"
        "fd = int(sys.argv[1])\n"
        "listing = process.run(['ls', '/proc/self/fd']).stdout.split()\n"
        "print(str(fd) in listing, os.get_inheritable(fd))\n"
    )
    read, write = os.pipe()
    try:
        os.set_inheritable(write, True)
        completed = subprocess.run(
            _python(code, str(write)), pass_fds=[write], capture_output=True, text=True, check=True
        )
    finally:
        os.close(read)
        os.close(write)
    # Not passed to the command, and left alone in the caller.
    assert completed.stdout == "False True\n"


def test_a_closed_standard_descriptor_falls_back_to_subprocess() -> None:
    code = (
        "import os, sys\n"
        "os.close(0)\n"
        "from httk.workflow.adapter_runtime import process\n"
        "done = process.run([sys.executable, '-c', 'print(42)'])\n"
        "sys.stdout.write(f'{done.returncode} {done.stdout}')\n"
    )
    completed = subprocess.run(_python(code), capture_output=True, text=True, check=True)
    assert completed.stdout == "0 42\n"


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=20,
)


def test_the_accelerator_is_in_use() -> None:
    assert jsontext._ACCELERATED is not None


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES)
def test_json_round_trip_matches_the_json_module(value: object) -> None:
    expected = json.dumps(value, sort_keys=True, separators=(",", ":"))
    assert jsontext.dumps(value) == expected
    assert jsontext.loads(expected) == json.loads(expected)
    spaced = json.dumps(value, indent=2)
    assert jsontext.loads(f" \n\t{spaced}\r\n ") == json.loads(spaced)


@pytest.mark.parametrize(
    "text",
    ["", " ", "{", "[1,]", "[1] [2]", "{'a': 1}", '"\t"', "\ufeff{}", "{} \x0b", "nul", "01"],
)
def test_malformed_json_is_refused_like_the_json_module(text: str) -> None:
    with pytest.raises(ValueError):
        json.loads(text)
    with pytest.raises(ValueError):
        jsontext.loads(text)


def test_constants_and_unserializable_values(monkeypatch: pytest.MonkeyPatch) -> None:
    assert math.isnan(jsontext.loads("NaN"))
    assert jsontext.loads("[-Infinity]") == [float("-inf")]
    assert jsontext.dumps({"b": float("inf"), "a": "\u00e9"}) == '{"a":"\\u00e9","b":Infinity}'
    with pytest.raises(TypeError, match="not JSON serializable"):
        jsontext.dumps({"a": object()})
    monkeypatch.setattr(jsontext, "_ACCELERATED", None)
    assert jsontext.loads(' {"b": [1, 2.5]} ') == {"b": [1, 2.5]}
    assert jsontext.dumps({"b": 1, "a": [None]}) == '{"a":[null],"b":1}'
