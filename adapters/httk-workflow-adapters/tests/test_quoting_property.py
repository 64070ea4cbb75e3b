"""Property: no argv element, cwd or setting value escapes its quoting."""

from __future__ import annotations

import shlex
import subprocess

import pytest
from httk.workflow.adapter_runtime import BATCH_DIRECTIVES
from httk.workflow.adapter_runtime.batch import batch_script
from httk.workflow.adapter_runtime.quoting import shell_command
from httk.workflow.adapter_runtime.targets import SshTarget
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

# Anything a process argument can hold: every character except NUL.
words = st.text(st.characters(exclude_characters="\x00", codec="utf-8"), max_size=40)
argvs = st.lists(words, min_size=1, max_size=6)
# The same, drawn often from the characters sbatch's directive reader treats as syntax.
directive_values = st.text(
    st.sampled_from(list(" #'\"\\%=/a-")) | st.characters(exclude_characters="\x00", codec="utf-8"),
    max_size=40,
)


@given(argvs, st.none() | words.filter(bool))
def test_shell_command_round_trips_through_a_shell_lexer(argv: list[str], cwd: str | None) -> None:
    tokens = shlex.split(shell_command(argv, cwd=cwd), posix=True)
    if cwd is None:
        assert tokens == argv
    else:
        # cd reads a leading "-" as an option ("-" alone is $OLDPWD): such a path goes as ./-…
        assert tokens == ["cd", f"./{cwd}" if cwd.startswith("-") else cwd, "&&", *argv]


@pytest.mark.parametrize("name", ["-P", "-L", "-", "--", "-e x", "plain"])
def test_a_real_shell_changes_into_exactly_that_directory(tmp_path, name: str) -> None:
    (tmp_path / name).mkdir()
    command = shell_command(["pwd"], cwd=name)
    completed = subprocess.run(
        ["/bin/sh", "-c", command], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert (completed.returncode, completed.stdout) == (0, f"{tmp_path / name}\n")
    missing = subprocess.run(
        ["/bin/sh", "-c", shell_command(["pwd"], cwd=f"{name}-missing")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert missing.returncode != 0  # never silently somewhere else, such as $HOME
    assert missing.stdout == ""


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(argvs)
def test_a_real_shell_receives_exactly_the_words(argv: list[str]) -> None:
    # printf is a builtin of every sh; NUL-separated output shows each word's exact bytes.
    command = shell_command(["printf", "%s\\0", *argv])
    completed = subprocess.run(["/bin/sh", "-c", command], capture_output=True, check=True)
    assert completed.stdout.decode("utf-8", "surrogateescape").split("\0")[:-1] == argv


def _sbatch_words(text: str, *, single_quotes: bool = True) -> list[str]:
    """The words sbatch reads from what follows ``#SBATCH`` (Slurm's ``_get_argument``).

    A backslash escapes the next character, ``#`` outside quotes ends the line, double
    quotes (and, since Slurm 18, single quotes) group blanks; a quote left open is fatal.
    Older releases (``single_quotes=False``) take ``'`` literally and end the line at a
    ``#`` even inside double quotes.
    """
    words: list[str] = []
    position = 0
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        if position >= len(text):
            return words
        word, quote, escaped = "", "", False
        while position < len(text) and (quote or not text[position].isspace()):
            ch = text[position]
            position += 1
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
                continue
            elif quote and ch == quote:
                quote = ""
                continue
            elif ch == '"' or (ch == "'" and single_quotes and not quote):
                if not quote:
                    quote = ch
                    continue
            elif ch == "#" and (not quote or not single_quotes):
                return [*words, word] if word else words
            word += ch
        if quote:
            raise AssertionError(f"sbatch: Unmatched `{quote}` in [{text}]")
        words.append(word)


def _directive_words(script: str) -> dict[str, str]:
    """Each ``#SBATCH`` line of the script read the way sbatch reads it (both dialects)."""
    head = script.partition("\nset -eu\n")[0]
    options: dict[str, str] = {}
    for line in head.split("\n"):
        if not line.startswith("#SBATCH "):
            continue
        text = line.removeprefix("#SBATCH")
        words = _sbatch_words(text)
        assert words == _sbatch_words(text, single_quotes=False), line
        assert len(words) == 1, line  # one option per line, nothing smuggled in beside it
        name, equals, value = words[0].partition("=")
        assert equals, line
        options[name] = value
    return options


@given(
    argvs,
    st.dictionaries(
        st.sampled_from(
            ["account", "partition", "time_limit", "nodes", "cpus_per_task", "reservation"]
        ),
        directive_values,
    ),
)
def test_batch_script_has_fixed_shape_or_refuses(argv: list[str], values: dict[str, str]) -> None:
    try:
        script = batch_script(argv, values, "/scratch/ws")
    except ValueError as exc:
        refused = str(exc)
        assert "control characters" in refused or "backslashes" in refused
        return
    head, separator, tail = script.partition("\nset -eu\n")
    assert separator
    # sbatch reads directives only up to the first command, so the head is all that counts.
    directives = [line for line in head.split("\n") if line.startswith("#SBATCH ")]
    assert len(directives) == 4 + sum(1 for v in values.values() if v.strip())
    assert all(line.startswith("#") for line in head.split("\n") if line)
    read = _directive_words(script)
    for key, directive in BATCH_DIRECTIVES:
        if values.get(key, "").strip():
            assert read[directive] == values[key].strip()
    assert shlex.split(tail) == ["exec", *argv]


@pytest.mark.parametrize(
    "workspace",
    ["/scratch/run#1", "/scratch/it's", '/scratch/say "hi"', "/scratch/a b#c", "/p%j/x"],
)
def test_sbatch_reads_back_the_workspace_it_was_given(workspace: str) -> None:
    read = _directive_words(batch_script(["true"], {"account": "p#1"}, workspace))
    assert read["--account"] == "p#1"
    assert read["--chdir"] == workspace
    logs = workspace.replace("%", "%%") + "/.httk-workflow/batch/manager-%j"
    assert (read["--output"], read["--error"]) == (f"{logs}.out", f"{logs}.err")


@given(st.dictionaries(st.sampled_from(["host", "username", "port"]), words))
@example({"port": "1", "host": "1"})  # a host spelled like the port: found by hypothesis in CI
def test_login_settings_become_one_argv_element_or_are_refused(values: dict[str, str]) -> None:
    values.setdefault("host", "login")
    try:
        target = SshTarget(values)
    except ValueError:
        return
    transport = target.transport()
    assert all(not any(ch.isspace() for ch in part) for part in transport)
    assert not target.destination.startswith("-")
    assert "--" not in transport  # the destination is the first word after the only "--"
    argv = [*transport, "--", target.destination, shell_command(["true"])]
    assert argv[argv.index("--") + 1] == target.destination


@pytest.mark.parametrize("value", ["$(id)", "`id`", "a;b", "a'b", "*", "a\nb", "~root"])
def test_known_hostile_words(value: str) -> None:
    assert shlex.split(shell_command([value])) == [value]


@given(directive_values.filter(lambda w: w.strip()), argvs)
def test_workspace_stays_inside_its_directives(workspace: str, argv: list[str]) -> None:
    try:
        script = batch_script(argv, {}, workspace)
    except ValueError as exc:
        refused = str(exc)
        assert "control characters" in refused or "backslashes" in refused
        return
    head, separator, tail = script.partition("\nset -eu\n")
    assert separator
    assert len(head.split("\n")) == 7
    # What sbatch reads back is the workspace itself, whatever characters it holds.
    assert _directive_words(script)["--chdir"] == workspace
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
