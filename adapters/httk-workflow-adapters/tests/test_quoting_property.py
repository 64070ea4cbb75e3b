"""Property: no argv element, cwd or setting value escapes its quoting."""

from __future__ import annotations

import shlex
import subprocess

import pytest
from httk.workflow.adapter_runtime.batch import batch_script
from httk.workflow.adapter_runtime.quoting import shell_command
from httk.workflow.adapter_runtime.targets import SshTarget
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# Anything a process argument can hold: every character except NUL.
words = st.text(st.characters(exclude_characters="\x00", codec="utf-8"), max_size=40)
argvs = st.lists(words, min_size=1, max_size=6)


@given(argvs, st.none() | words.filter(bool))
def test_shell_command_round_trips_through_a_shell_lexer(argv: list[str], cwd: str | None) -> None:
    tokens = shlex.split(shell_command(argv, cwd=cwd), posix=True)
    if cwd is None:
        assert tokens == argv
    else:
        assert tokens == ["cd", cwd, "&&", *argv]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(argvs)
def test_a_real_shell_receives_exactly_the_words(argv: list[str]) -> None:
    # printf is a builtin of every sh; NUL-separated output shows each word's exact bytes.
    command = shell_command(["printf", "%s\\0", *argv])
    completed = subprocess.run(["/bin/sh", "-c", command], capture_output=True, check=True)
    assert completed.stdout.decode("utf-8", "surrogateescape").split("\0")[:-1] == argv


@given(
    argvs,
    st.dictionaries(
        st.sampled_from(
            ["account", "partition", "time_limit", "nodes", "cpus_per_task", "reservation"]
        ),
        words,
    ),
)
def test_batch_script_has_fixed_shape_or_refuses(argv: list[str], values: dict[str, str]) -> None:
    try:
        script = batch_script(argv, values, "/scratch/ws")
    except ValueError as exc:
        refused = str(exc)
        assert "control characters" in refused or "blanks with quotes" in refused
        return
    head, separator, tail = script.partition("\nset -eu\n")
    assert separator
    # sbatch reads directives only up to the first command, so the head is all that counts.
    directives = [line for line in head.split("\n") if line.startswith("#SBATCH ")]
    assert len(directives) == 4 + sum(1 for v in values.values() if v.strip())
    assert all(line.startswith("#") for line in head.split("\n") if line)
    assert shlex.split(tail) == ["exec", *argv]


@given(st.dictionaries(st.sampled_from(["host", "username", "port"]), words))
def test_login_settings_become_one_argv_element_or_are_refused(values: dict[str, str]) -> None:
    values.setdefault("host", "login")
    try:
        target = SshTarget(values)
    except ValueError:
        return
    transport = target.transport()
    assert all(not any(ch.isspace() for ch in part) for part in transport)
    assert not target.destination.startswith("-")
    argv = [*transport, "--", target.destination, shell_command(["true"])]
    assert argv.index(target.destination) == argv.index("--") + 1


@pytest.mark.parametrize("value", ["$(id)", "`id`", "a;b", "a'b", "*", "a\nb", "~root"])
def test_known_hostile_words(value: str) -> None:
    assert shlex.split(shell_command([value])) == [value]


@given(words.filter(lambda w: w.strip()), argvs)
def test_workspace_stays_inside_its_directives(workspace: str, argv: list[str]) -> None:
    try:
        script = batch_script(argv, {}, workspace)
    except ValueError as exc:
        refused = str(exc)
        assert "control characters" in refused or "blanks with quotes" in refused
        return
    head, separator, tail = script.partition("\nset -eu\n")
    assert separator
    lines = head.split("\n")
    assert len(lines) == 7
    chdir = lines[3].removeprefix("#SBATCH --chdir=")
    # sbatch reads one word, in double quotes when it holds blanks.
    assert chdir == (f'"{workspace}"' if any(c.isspace() for c in workspace) else workspace)
    assert shlex.split(tail) == ["exec", *argv]


@given(words)
def test_httk_command_becomes_words_never_syntax(value: str) -> None:
    from httk.workflow.adapter_runtime.targets import LocalTarget

    try:
        argv = LocalTarget({"httk_command": value}).httk(["httk", "x; y"])
    except ValueError:
        return  # unbalanced quotes, or nothing left: refused
    if not value.strip():
        return
    assert argv == [*shlex.split(value.strip()), "x; y"]  # settings are read stripped
    assert shlex.split(shell_command(argv)) == argv
