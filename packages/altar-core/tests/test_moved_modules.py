"""The flat import paths of altar-core's first layout still import, as the very modules of today."""

import importlib
import importlib.util
import subprocess
import sys

import pytest
from altar.execution._moved import MOVED


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_an_old_path_is_the_module_of_its_new_path(old, new):
    moved = importlib.import_module(f"altar.execution.{old}")
    assert moved is importlib.import_module(f"altar.execution.{new}")
    assert moved.__name__ == f"altar.execution.{new}"


def test_every_new_path_names_a_module_file():
    import altar.execution

    root = altar.execution.__path__[0]
    for new in MOVED.values():
        assert importlib.util.find_spec(f"altar.execution.{new}") is not None, new
        assert (f"{root}/{new.replace('.', '/')}.py") == importlib.util.find_spec(
            f"altar.execution.{new}"
        ).origin


def test_old_forms_of_import_work_in_a_fresh_interpreter():
    code = (
        "from altar.execution import runner, cli_status\n"
        "import altar.execution.plan as plan\n"
        "from altar.execution.journal import Journal\n"
        "from altar.execution.cli import main\n"
        "import altar.execution.run.runner, altar.execution.cli.status\n"
        "import altar.execution.plans.plan\n"
        "assert runner is altar.execution.run.runner\n"
        "assert cli_status is altar.execution.cli.status\n"
        "assert plan is altar.execution.plans.plan\n"
        "assert Journal.__module__ == 'altar.execution.state.journal'\n"
        "assert callable(main)\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout == "ok\n"


def test_a_name_that_never_existed_is_still_an_import_error():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("altar.execution.no_such_module")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("altar.execution.run.runner_v2")
