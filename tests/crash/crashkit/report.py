"""The numbers a crash run ends with, and their one-screen rendering."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

__all__ = ["Counts"]


@dataclass
class Counts:
    """What one crash-consistency run measured; every ``*_left`` and problem list must be empty."""

    backend: str
    seed: int
    tasks: int = 0
    executions: int = 0
    doubles: dict[str, int] = field(default_factory=dict)
    lost: list[str] = field(default_factory=list)
    stuck: int = 0
    retried: int = 0  # attempts that failed on the provider and were submitted again
    reported_attempts: int = 0  # the results table's ATTEMPTS, summed (should be executions)
    attempts_mismatch: dict[str, str] = field(default_factory=dict)  # task -> both counts
    processes: int = 0
    #: phase -> signals sent (e.g. {"submit": Counter({"SIGKILL": 6, "SIGINT": 1})})
    by_phase: dict[str, Counter[str]] = field(default_factory=dict)
    unfired: list[str] = field(default_factory=list)
    in_flight_kills: int = 0  # interruptions sent while a submit's answer was outstanding
    bad_status: list[str] = field(default_factory=list)  # a signal's exit status was wrong
    no_resume_hint: list[str] = field(default_factory=list)
    containers_left: list[str] = field(default_factory=list)
    unlabelled: list[str] = field(default_factory=list)
    unowned: list[str] = field(default_factory=list)
    processes_left: list[str] = field(default_factory=list)
    records_left: list[str] = field(default_factory=list)
    temporaries_left: list[str] = field(default_factory=list)
    rerun_executions: int = 0
    final_status: int | None = None
    rerun_status: int | None = None
    engine_kills: int = 0
    succeeded: int = 0  # tasks the journal ends with as succeeded
    first_status: int | None = None  # the exit status of the first run, before any resume
    #: task -> failed attempts charged to its retries (no provider_ending)
    charged: dict[str, int] = field(default_factory=dict)
    #: failed attempts by reason (``reason/provider_ending`` when the provider ended them)
    failure_reasons: Counter[str] = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)

    @property
    def kills(self) -> int:
        return sum(c["SIGKILL"] for c in self.by_phase.values())

    @property
    def double_count(self) -> int:
        return sum(self.doubles.values())

    def format(self) -> str:
        phases = ", ".join(f"{phase} {sum(c.values())}" for phase, c in self.by_phase.items() if c)
        others = Counter[str]()
        for counter in self.by_phase.values():
            others.update({k: v for k, v in counter.items() if k != "SIGKILL"})
        lines = [
            f"crash test: backend {self.backend}, seed {self.seed}",
            f"  {self.tasks} tasks, {self.executions} executions (ledger), "
            f"{self.double_count} double, {len(self.lost)} lost, {self.stuck} stuck, "
            f"{self.retried} attempts failed on the provider; ATTEMPTS column adds up to "
            f"{self.reported_attempts}",
            f"  {self.processes} altar processes; {self.kills} SIGKILLs"
            + "".join(f", {n} {name}" for name, n in sorted(others.items()))
            + f"; by phase: {phases or '-'}; {self.in_flight_kills} with a submit in flight",
            f"  left: {len(self.containers_left)} containers, {len(self.processes_left)} "
            f"processes, {len(self.records_left)} task records, {len(self.temporaries_left)} "
            f"temporary files; {len(self.unlabelled)} unlabelled, {len(self.unowned)} unowned",
            f"  final status {self.final_status}, re-run status {self.rerun_status} with "
            f"{self.rerun_executions} new executions",
        ]
        if self.engine_kills:
            lines.append(f"  Docker engine killed {self.engine_kills} time(s) during submits")
        reasons = ", ".join(f"{n} {why}" for why, n in sorted(self.failure_reasons.items()))
        lines.append(
            f"  {self.succeeded} of {self.tasks} tasks succeeded; failed attempts: "
            f"{reasons or 'none'}; retries charged: {sum(self.charged.values())}"
            + ("" if self.first_status is None else f"; first run's status {self.first_status}")
        )
        problems = {
            "doubles": self.doubles,
            "lost": self.lost,
            "unfired": self.unfired,
            "bad exit status": self.bad_status,
            "no resume hint": self.no_resume_hint,
            "containers left": self.containers_left,
            "unlabelled": self.unlabelled,
            "unowned": self.unowned,
            "processes left": self.processes_left,
            "records left": self.records_left,
            "temporary files left": self.temporaries_left,
            "ATTEMPTS is not the ledger's executions": self.attempts_mismatch,
            "retries charged": self.charged,
        }
        for name, value in problems.items():
            if value:
                lines.append(f"  {name}: {value}")
        lines.extend(f"  note: {note}" for note in self.notes)
        return "\n".join(lines)
