"""The collector's pauses and freezes around a run's bulk steps (state/bulk.py)."""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref

from altar.execution.state.bulk import FREEZE_AT, collector_paused, long_lived


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycle() -> weakref.ref[_Node]:
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_long_lived_freezes_what_is_alive_and_unfreezes_at_its_end() -> None:
    assert gc.get_freeze_count() == 0
    with long_lived():
        assert gc.get_freeze_count() > 0
        with long_lived():  # nested: the outer block still holds the freeze
            pass
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0


def test_a_bulk_step_inside_long_lived_freezes_its_survivors_a_small_one_not() -> None:
    with long_lived():
        frozen = gc.get_freeze_count()
        with collector_paused():
            kept = [[n] for n in range(2 * FREEZE_AT)]  # twice as many tracked containers
        assert gc.isenabled()
        assert gc.get_freeze_count() >= frozen + 2 * FREEZE_AT
        frozen = gc.get_freeze_count()
        with collector_paused():
            few = [[n] for n in range(10)]
        assert gc.get_freeze_count() == frozen
        assert kept
        assert few
    assert gc.get_freeze_count() == 0


def test_a_paused_step_outside_long_lived_freezes_nothing() -> None:
    with collector_paused():
        kept = [[n] for n in range(100)]
    assert gc.get_freeze_count() == 0
    assert gc.isenabled()
    assert kept


def test_a_cycle_that_became_garbage_while_frozen_is_collected_after() -> None:
    with long_lived():
        with collector_paused():
            ref = _cycle()  # garbage as the step ends, frozen with its survivors
            kept = [[n] for n in range(2 * FREEZE_AT)]
        gc.collect()
        assert ref() is not None  # frozen: the collector does not look at it
        assert kept
    gc.collect()
    assert ref() is None


def test_the_command_line_skips_its_last_collection() -> None:
    """``altar`` freezes every object at exit: its last collection walks none of them."""
    # atexit runs the last registered first: a check registered before main runs after
    # the freeze main registered
    before = (
        "import atexit, gc\n"
        "atexit.register(lambda: print('frozen' if gc.get_freeze_count() else 'not frozen'))\n"
        "from altar.execution.cli.command import main\n"
        "main(['backends'])\n"
    )
    assert subprocess.run(
        [sys.executable, "-c", before], capture_output=True, text=True, check=True
    ).stdout.endswith("\nfrozen\n")
