"""The site's submit limits, read once from ``sacctmgr``, and the pace of ``sbatch`` calls.

A shared cluster bounds how many live (pending or running) jobs a user may hold:
``MaxSubmitJobs`` on the user's association, ``MaxSubmitJobsPerUser`` (and the group and
per-account forms) on the QOS the jobs run under. They apply only when slurm.conf enforces
limits (``AccountingStorageEnforce`` with ``limits``). :func:`read_limits` reads all of it in
one command at start; :func:`submit_limit` picks the smallest limit the backend's jobs are
under, so ``capacity()`` can say what is left and the runner does not hammer sbatch into its
refusals. Limits inherited from parent accounts are not read: sbatch's own refusal is still
backpressure (:func:`~altar.backends.slurm.commands.submit_limit`).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from altar.backends.slurm.commands import bounded
from altar.backends.slurm.runtime import LoginNode

__all__ = ["LIMITS_PROGRAM", "SiteLimits", "SubmitPace", "parse_limits", "read_limits"]

#: One round trip: the enforcement and cluster name, then the user's associations (with its
#: default account), then every QOS's submit limits; sections end with ``---``.
LIMITS_PROGRAM = (
    'set -u; u=$(id -un); c=$(scontrol show config) || exit 3; printf "%s\\n" "$c" | '
    'sed -n "s/^\\(ClusterName\\|AccountingStorageEnforce\\) *= */\\1=/p"; echo ---; '
    'sacctmgr -n -P show user "$u" format=defaultaccount || exit 4; echo ---; '
    'sacctmgr -n -P show assoc where users="$u" '
    "format=cluster,account,partition,maxsubmitjobs,grpsubmitjobs,defaultqos,qos || exit 4; "
    "echo ---; sacctmgr -n -P show qos "
    "format=name,maxsubmitjobsperuser,grpsubmitjobs,maxsubmitjobsperaccount || exit 4"
)


@dataclass(frozen=True)
class Association:
    cluster: str
    account: str
    partition: str
    limits: tuple[int, ...]  # MaxSubmitJobs, GrpSubmitJobs (those set)
    default_qos: str
    qos: tuple[str, ...]


@dataclass(frozen=True)
class SiteLimits:
    """What ``sacctmgr`` said, for one user on one cluster."""

    enforced: bool
    cluster: str
    default_account: str
    associations: tuple[Association, ...]
    qos_limits: dict[str, tuple[int, ...]]

    def submit_limit(
        self, *, account: str | None, partition: str | None, qos: str | None
    ) -> tuple[int, str] | None:
        """(the smallest live-job limit for jobs queued so, its name), or None when none
        applies (limits not enforced, none set)."""
        if not self.enforced:
            return None
        wanted = account or self.default_account
        found: list[tuple[int, str]] = []
        chosen_qos = qos
        for assoc in self.associations:
            if assoc.cluster != self.cluster or assoc.account != wanted:
                continue
            if assoc.partition and assoc.partition != partition:
                continue
            found += [(value, f"association {assoc.account}") for value in assoc.limits]
            if chosen_qos is None:
                chosen_qos = assoc.default_qos or _implied_qos(assoc.qos)
        if chosen_qos is not None:
            found += [(value, f"QOS {chosen_qos}") for value in self.qos_limits.get(chosen_qos, ())]
        return min(found) if found else None


def _implied_qos(allowed: tuple[str, ...]) -> str | None:
    # Without a DefaultQOS Slurm gives a job "normal" when the association may use it, or its
    # only QOS.
    if "normal" in allowed:
        return "normal"
    return allowed[0] if len(allowed) == 1 else None


def _numbers(*texts: str) -> tuple[int, ...]:
    return tuple(int(text) for text in texts if text.strip().isdigit())


def parse_limits(text: str) -> SiteLimits | None:
    """:data:`LIMITS_PROGRAM`'s output; None when it is not whole."""
    sections = text.split("---\n")
    if len(sections) != 4:
        return None
    config = dict(line.partition("=")[::2] for line in sections[0].splitlines() if "=" in line)
    accounts = [line.strip() for line in sections[1].splitlines() if line.strip()]
    associations = []
    for line in sections[2].splitlines():
        parts = line.split("|")
        if len(parts) != 7:
            continue
        cluster, account, partition, max_submit, grp_submit, default_qos, qos = parts
        associations.append(
            Association(
                cluster,
                account,
                partition,
                _numbers(max_submit, grp_submit),
                default_qos,
                tuple(name for name in qos.split(",") if name),
            )
        )
    qos_limits: dict[str, tuple[int, ...]] = {}
    for line in sections[3].splitlines():
        parts = line.split("|")
        if len(parts) == 4 and parts[0]:
            qos_limits[parts[0]] = _numbers(*parts[1:])
    return SiteLimits(
        enforced="limits" in config.get("AccountingStorageEnforce", "").split(","),
        cluster=config.get("ClusterName", ""),
        default_account=accounts[0] if accounts else "",
        associations=tuple(associations),
        qos_limits=qos_limits,
    )


def read_limits(node: LoginNode, *, timeout_s: float | None) -> SiteLimits | None:
    """The site's limits, or None when Slurm cannot tell (no accounting, no answer)."""
    result = node.run(bounded(["sh", "-c", LIMITS_PROGRAM], timeout_s))
    return parse_limits(result.stdout) if result.ok else None


class SubmitPace:
    """At most ``per_minute`` submits start in any 60 s (a sliding window, no burst beyond
    it): a site's "at most N submissions a minute" is kept exactly."""

    def __init__(
        self,
        per_minute: int | None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if per_minute is not None and (isinstance(per_minute, bool) or per_minute < 1):
            raise ValueError(
                f"max_submits_per_minute must be a positive whole number or None, "
                f"got {per_minute!r}"
            )
        self.per_minute = per_minute
        self._clock = clock
        self._sleep = sleep
        self._slots: deque[float] = deque()

    def reserve(self, now: float) -> float:
        """The earliest time at or after ``now`` a submit may start; it is taken."""
        if self.per_minute is None:
            return now
        while self._slots and self._slots[0] <= now - 60.0:
            self._slots.popleft()
        slot = now
        if len(self._slots) >= self.per_minute:
            slot = max(now, self._slots[-self.per_minute] + 60.0)
        self._slots.append(slot)
        return slot

    async def wait(self) -> None:
        now = self._clock()
        slot = self.reserve(now)
        if slot > now:
            await self._sleep(slot - now)
