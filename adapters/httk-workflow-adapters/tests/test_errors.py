"""The error family: drawn completely, builtin bases kept, raised where the contract says."""

from __future__ import annotations

import inspect
import json

import httk.workflow.adapters as adapters
import pytest
from httk.workflow.adapters import errors


def _exported_exceptions() -> dict[str, type[BaseException]]:
    found = {}
    for module in (adapters, errors):
        for name in module.__all__:
            value = getattr(module, name)
            if inspect.isclass(value) and issubclass(value, BaseException):
                found[name] = value
    return found


def test_every_exported_exception_is_in_the_drawing() -> None:
    drawing = errors.__doc__ or ""
    exported = _exported_exceptions()
    assert len(exported) >= 10
    missing = [name for name in exported if f"── {name} " not in drawing]
    assert missing == []


def test_the_drawing_shows_each_class_under_its_real_parent() -> None:
    lines = (errors.__doc__ or "").splitlines()
    for name, cls in _exported_exceptions().items():
        (line,) = [line for line in lines if f"── {name} " in line]
        depth = line.index("──")
        parents = [
            other
            for other in lines[: lines.index(line)]
            if "──" in other and other.index("──") < depth
        ]
        parent = parents[-1].split("──")[1].split()[0] if parents else "Exception"
        assert parent in {base.__name__ for base in cls.__mro__[1:]}, (name, parent)


@pytest.mark.parametrize(
    ("cls", "builtin"),
    [
        (errors.AdapterRefused, RuntimeError),
        (errors.RemoteUnreachable, RuntimeError),
        (errors.AdapterCrashed, RuntimeError),
        (errors.AdapterTimeout, TimeoutError),
        (errors.AdapterResultError, ValueError),
        (errors.BundleError, ValueError),
        (errors.UnknownRemote, ValueError),
        (errors.InvalidRemoteName, ValueError),
    ],
)
def test_builtin_bases_are_kept(cls: type[Exception], builtin: type[Exception]) -> None:
    assert issubclass(cls, builtin)
    assert issubclass(cls, errors.AdapterError)


def test_run_adapter_raises_the_family(env, make_bundle) -> None:
    refusing = make_bundle(
        env.root,
        "#!python\nimport json, sys\nprint(json.dumps({'format': 'httk-computer-result',"
        " 'format_version': 1, 'operation': 'invoke', 'ok': False, 'error': 'no thanks'}))\n",
        name="refusing",
    )
    with pytest.raises(errors.AdapterRefused, match=r"^no thanks$") as refused:
        adapters.run_adapter(refusing, "invoke", {"argv": ["true"]})
    assert refused.value.operation == "invoke"
    assert not isinstance(refused.value, errors.RemoteUnreachable)
    crashing = make_bundle(
        env.root, "#!python\nimport sys\nsys.stderr.write('boom')\nsys.exit(3)\n", name="crash"
    )
    with pytest.raises(errors.AdapterCrashed, match=r"adapter invoke failed \(3\): boom") as crash:
        adapters.run_adapter(crashing, "invoke", {"argv": ["true"]})
    assert (crash.value.returncode, crash.value.stderr) == (3, "boom")
    garbled = make_bundle(env.root, "#!python\nprint('{} {}')\n", name="garbled")
    with pytest.raises(errors.AdapterResultError, match="exactly one JSON result"):
        adapters.run_adapter(garbled, "invoke", {"argv": ["true"]})
    sleepy = make_bundle(env.root, "#!python\nimport time\ntime.sleep(30)\n", name="sleepy")
    with pytest.raises(errors.AdapterTimeout, match=r"adapter invoke exceeded 0\.5 seconds"):
        adapters.run_adapter(sleepy, "invoke", {"argv": ["true"]}, timeout=0.5)
    with pytest.raises(errors.UnknownRemote, match=r"^unknown remote: nowhere$"):
        adapters.resolve_remote("nowhere")
    broken = env.root / "broken"
    broken.mkdir()
    (broken / "remote.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(errors.BundleError, match="httk-computer-adapter format version 1"):
        adapters.validate_adapter_bundle(broken)
