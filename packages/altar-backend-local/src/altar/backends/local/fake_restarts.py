"""The in-memory engine's restart, as Docker 20.10 without live-restore was seen to restart.

``dockerd`` SIGKILLed and started again (the engine-kill crash test's engine, and
``tests/crash/test_engine_endings.py``): open event streams end and the events window is
lost; the new engine stops every container it finds running (its stop signal, then SIGKILL
after the 10 s stop timeout: exit code 137, no OOM flag, ``FinishedAt`` after its start);
a container that ended while it was down keeps its own outcome. Two rarer shapes are
scripted: a container gone after the restart, and one listed running for ever with no
``StartedAt`` and no process (dockerd killed while starting it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from altar.backends.local.runtime import ContainerEvent

if TYPE_CHECKING:
    from altar.backends.local.fake import FakeDockerRuntime

__all__ = ["restart"]


def restart(engine: FakeDockerRuntime, lose: Sequence[str], stuck: Sequence[str]) -> None:
    """Restart ``engine`` (its lock held): ``lose`` are gone after it, ``stuck`` left running
    but never started; with ``engine.live_restore`` running containers keep running."""
    engine.break_event_streams()
    engine.events.clear()
    started = [c.started_at for c in engine.containers.values() if c.started_at]
    # After every start so far, however coarse the clock.
    engine.restarted_at = at = max([engine.now(), *(t + 1e-3 for t in started)])
    for container in [engine._get(i) for i in lose]:
        del engine.containers[container.id]
    for container in engine.containers.values():
        if container.id in stuck or container.name in stuck:
            container.started_at = None  # running, with a process that is gone
        elif container.state in ("running", "paused") and not engine.live_restore:
            container.state, container.exit_code, container.finished_at = "exited", 137, at
            engine._event(container, ContainerEvent(container.id, "die", at, 137))
