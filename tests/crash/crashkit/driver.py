"""Driving the installed ``altar run`` through a kill schedule, resuming after each interruption.

:class:`Driver` starts ``altar run PLAN --run-dir DIR`` (the console script, as a user would),
watches the run (its journal, its stderr, the data root) for the next :class:`Moment`'s
trigger, sends the signal, waits for the process to end and starts it again with the same
command (the resume command the CLI prints), until the schedule is spent; then it lets the
run finish. Every wait is bounded: a process that neither reaches its trigger nor ends within
``process_bound_s`` counts as a stuck run (and is killed).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from crashkit.journalview import JournalView
from crashkit.plan import CrashPlan
from crashkit.schedule import Moment

__all__ = ["EXPECTED_STATUS", "Drive", "Driver", "Interruption"]

#: The exit status ``altar run`` must end with after each signal (SIGKILL: killed by it).
EXPECTED_STATUS = {
    signal.SIGKILL: -signal.SIGKILL,
    signal.SIGINT: 130,
    signal.SIGTERM: 143,
    signal.SIGHUP: 129,
}
WATCH_INTERVAL_S = 0.005
#: How long a signalled process may take to end (SIGINT & co. give submits a 10 s grace).
EXIT_BOUND_S = 90.0


@dataclass
class Interruption:
    """What happened to one moment of the schedule."""

    moment: Moment
    process: int  # index of the altar process it interrupted
    fired: bool = False
    #: the phase the run was seen in when the signal was sent (the moment's, unless it had passed)
    phase: str = ""
    #: what the driver saw when it fired, e.g. "f03 submitting" or "models/.w1.bin.altar-tmp-..."
    observed: str = ""
    #: submits whose intent was journaled but not their handle, when the signal was sent
    submits_in_flight: int = 0
    status: int | None = None
    resume_hint: bool = False  # the CLI printed how to resume

    @property
    def status_ok(self) -> bool:
        return self.status == EXPECTED_STATUS[self.moment.signal]


@dataclass
class Drive:
    """The whole drive: each interruption, the processes, and how the run ended."""

    interruptions: list[Interruption] = field(default_factory=list)
    processes: int = 0
    stuck: int = 0
    final_status: int | None = None
    rerun_status: int | None = None
    errors: list[str] = field(default_factory=list)  # processes that ended unasked, not 0

    @property
    def fired(self) -> list[Interruption]:
        return [i for i in self.interruptions if i.fired]


class Driver:
    """Runs one plan's ``altar run`` through a schedule of interruptions."""

    def __init__(
        self,
        altar: str,
        plan: CrashPlan,
        run_dir: Path,
        env: dict[str, str],
        *,
        process_bound_s: float = 240.0,
        log: Callable[[str], None] = print,
    ) -> None:
        self.altar = altar
        self.plan = plan
        self.run_dir = run_dir
        self.env = env
        self.process_bound_s = process_bound_s
        self.view = JournalView(run_dir)
        self.log = log
        self.logs = run_dir.parent / "altar-logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.drive = Drive()

    # -- one process ----------------------------------------------------------------------

    def command(self) -> list[str]:
        return [self.altar, "run", str(self.plan.path), "--run-dir", str(self.run_dir)]

    def spawn(self) -> tuple[subprocess.Popen[bytes], Path]:
        index = self.drive.processes
        self.drive.processes += 1
        stderr = self.logs / f"altar-{index:02d}.err"
        with open(self.logs / f"altar-{index:02d}.out", "wb") as out, open(stderr, "wb") as err:
            process = subprocess.Popen(
                self.command(),
                cwd=self.plan.path.parent,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
            )
        return process, stderr

    def _staging_temporaries(self) -> list[str]:
        found: list[str] = []
        for directory in (self.plan.data_root / "models",):
            try:
                names = os.listdir(directory)
            except FileNotFoundError:
                continue
            found.extend(
                name
                for name in names
                if ".altar-tmp-" in name or name.endswith((".tmp", ".partial"))
            )
        return found

    def _in_flight(self) -> int:
        count = 0
        for record in self.view.records.values():
            attempts = record.get("attempts") or []
            if (
                record.get("state") == "submitting"
                and attempts
                and attempts[-1].get("handle") is None
            ):
                count += 1
        return count

    def _observe(
        self, moment: Moment, process: subprocess.Popen[bytes], stderr: Path, born: float
    ) -> str | None:
        """What the trigger saw, once ``moment.occurrence`` times; None while not yet."""
        changes = self.view.poll()
        phase, trigger = moment.phase, moment.trigger
        seen: list[str] = []
        if phase == "startup" and trigger == "spawn":
            if time.monotonic() - born >= moment.delay_s:
                return f"{time.monotonic() - born:.2f}s after spawn"
            return None
        if phase == "startup" and trigger == "banner":
            text = stderr.read_bytes()
            return text.splitlines()[0].decode(errors="replace")[:80] if b"\n" in text else None
        if phase == "startup" and trigger == "pid":
            return f"pid {process.pid} journaled" if process.pid in self.view.pids() else None
        if phase == "staging":
            # a copy of this process's (one an earlier process left is not news)
            temporaries = [t for t in self._staging_temporaries() if t not in self._stale]
            if temporaries:
                return f"models/{temporaries[0]}"
            began = b"  staging " in stderr.read_bytes()  # the `staging` event's line
            return "staging event" if began else None
        if phase == "cleanup":
            if process.pid in self.view.pids() and self.view.all_settled():
                return "every task settled"
            return None
        if process.pid in self.view.pids() and self.view.all_settled():
            # nothing left of this moment's phase: interrupt the clean-up rather than let the
            # process end the run with moments still to come (reported as a clean-up moment)
            self._fallback = "cleanup"
            return "every task settled"
        for change in changes:
            if phase == "submit" and "submitting" in change.passed:
                seen.append(f"{change.task} submitting")
            elif phase == "poll" and "running" in change.passed:
                seen.append(f"{change.task} running")
            elif phase == "collect" and "awaiting_collection" in change.passed:
                seen.append(f"{change.task} succeeded, outputs not collected")
        self._counted += len(seen)
        if seen and self._counted >= moment.occurrence:
            return seen[-1]
        return None

    def feasible(self, moment: Moment) -> Moment:
        """``moment``, or the next phase that can still happen if its own is over for good.

        A process that cannot meet its trigger would run the whole plan to its end and leave
        the rest of the schedule nothing to interrupt.
        """
        records = list(self.view.records.values())
        states = [r.get("state") for r in records]
        possible = {
            "startup": True,
            "staging": not self.view.snapshot.get("staged"),
            "submit": "queued" in states,
            "poll": any(s in ("queued", "submitting", "pending") for s in states),
            "collect": any(
                s not in ("failed", "skipped", "cancelled") and not r.get("outputs_collected")
                for s, r in zip(states, records, strict=True)
            ),
            "cleanup": not self.view.snapshot.get("finished"),
        }
        if not records:
            possible.update(submit=True, poll=True, collect=True)
        if possible.get(moment.phase, True):
            return moment
        if moment.phase == "staging":
            # staging is over (an earlier process finished it): the start-up of this one
            return Moment("startup", moment.signal, 1, 0.0, "pid")
        order = ["submit", "poll", "collect", "cleanup"]
        for phase in order[order.index(moment.phase) + 1 :]:
            if possible[phase]:
                return Moment(phase, moment.signal, 1, moment.delay_s)
        return moment

    def _wait_exit(self, process: subprocess.Popen[bytes], bound_s: float) -> int | None:
        try:
            return process.wait(timeout=bound_s)
        except subprocess.TimeoutExpired:
            return None

    def _kill_stuck(self, process: subprocess.Popen[bytes], why: str) -> None:
        self.drive.stuck += 1
        self.log(f"STUCK: {why}; killing pid {process.pid}")
        process.kill()
        process.wait()

    def interrupt(self, moment: Moment) -> Interruption | None:
        """Run one process until ``moment`` fires (returns it) or the process ends (None)."""
        self.view.poll()  # what earlier processes wrote is not this one's news
        self._counted = 0
        self._stale = set(self._staging_temporaries())
        process, stderr = self.spawn()
        born = time.monotonic()
        entry = Interruption(moment, self.drive.processes - 1)
        moment = self.feasible(moment)
        entry.phase = moment.phase
        self._fallback = ""
        observed = None
        while observed is None:
            if process.poll() is not None:
                self._ended_unasked(process)
                return None
            if time.monotonic() - born > self.process_bound_s:
                self._kill_stuck(
                    process, f"no {moment.phase} moment within {self.process_bound_s:.0f}s"
                )
                return None
            observed = self._observe(moment, process, stderr, born)
            if observed is None:
                time.sleep(WATCH_INTERVAL_S)
        if moment.delay_s and moment.trigger != "spawn":
            end = time.monotonic() + moment.delay_s
            while time.monotonic() < end and process.poll() is None:
                time.sleep(WATCH_INTERVAL_S)
        if process.poll() is not None:  # it ended during the delay: not interrupted
            self._ended_unasked(process)
            return None
        self.view.poll()
        entry.submits_in_flight = self._in_flight()
        entry.phase = self._fallback or entry.phase
        process.send_signal(moment.signal)
        entry.fired = True
        entry.observed = observed
        status = self._wait_exit(process, EXIT_BOUND_S)
        if status is None:
            self._kill_stuck(
                process, f"still running {EXIT_BOUND_S:.0f}s after {moment.signal.name}"
            )
        entry.status = status
        entry.resume_hint = b"Resume with: altar run" in stderr.read_bytes()
        self.log(
            f"[{entry.process:02d}] {moment.describe():<38} saw {observed!r}, "
            f"{entry.submits_in_flight} submit(s) in flight, exit {status}"
        )
        return entry

    def _ended_unasked(self, process: subprocess.Popen[bytes]) -> None:
        status = process.returncode
        self.drive.final_status = status
        if status != 0:
            self.drive.errors.append(f"process {self.drive.processes - 1} ended with {status}")
        self.log(f"[{self.drive.processes - 1:02d}] ended by itself with status {status}")

    def finish(self) -> int | None:
        """Resume without interruption until the run ends; its exit status (None: stuck)."""
        self.view.poll()
        process, _ = self.spawn()
        status = self._wait_exit(process, self.process_bound_s)
        if status is None:
            self._kill_stuck(
                process, f"the final resume did not end within {self.process_bound_s:.0f}s"
            )
        self.log(f"[{self.drive.processes - 1:02d}] final resume ended with status {status}")
        return status
