"""Building many objects at once without the cyclic garbage collector running over and over.

Reading a journal or a plan of 100,000 tasks allocates millions of objects, none of them
garbage; every few thousand allocations CPython's collector walks the young objects, and each
older-generation pass walks every object alive, so the work grows faster than the plan (on a
100,000-task journal, half of its load time). Pausing it while the objects are built is safe:
reference counting still frees what is dropped, and the collector runs again afterwards.

A run keeps its plan and journal for as long as it lasts: inside :func:`long_lived` they, and
what a paused bulk step leaves alive, are frozen out of the collector's passes (``gc.freeze``)
instead of being walked again by the first collections after the step (a third of a
10,000-task cached run's CPU). A cycle among them that becomes garbage is collected when the
block ends (a cycle a bulk step made and dropped waits until then too).
:func:`skip_collection_at_exit` spares a command's process the same walk as it exits.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
from collections.abc import Iterator

__all__ = ["FREEZE_AT", "collector_paused", "long_lived", "skip_collection_at_exit"]

#: New container objects (net, since the last young collection) that make a paused block a
#: bulk step whose survivors are frozen (a 10,000-task tick leaves about 300,000).
FREEZE_AT = 10_000
_long_lived = 0  # depth of long_lived blocks open in this process
_at_exit = False


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic collector inside the block (nested blocks and a paused caller kept).

    Inside :func:`long_lived`, a block that left ``FREEZE_AT`` new objects or more (a bulk
    step) freezes them as it ends; a small one leaves its few to the collector, so the cycles
    a long run's small ticks drop are still collected as it goes.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if _long_lived and gc.get_count()[0] >= FREEZE_AT:
            gc.freeze()  # the step's survivors (keys, index rows, records) live as long
        if enabled:
            gc.enable()


@contextlib.contextmanager
def long_lived() -> Iterator[None]:
    """Freeze the objects alive now (a run's plan and journal) until the block ends."""
    global _long_lived
    gc.freeze()
    _long_lived += 1
    try:
        yield
    finally:
        _long_lived -= 1
        if not _long_lived:
            gc.unfreeze()


def skip_collection_at_exit() -> None:
    """Freeze every object as this process exits: its last collection would walk a plan's
    and a journal's objects only to free memory the exit frees anyway (0.2 s of a
    10,000-task run). Objects alive then are not finalized; altar's files are closed by then.
    """
    global _at_exit
    if not _at_exit:
        _at_exit = True
        atexit.register(gc.freeze)
