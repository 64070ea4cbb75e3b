"""What a run journal records per task: its attempts, their handles and keys, and its state.

Plain data with JSON forms; :mod:`altar.execution.state.journal` makes it durable.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from altar.execution.labels import LABEL_SUBMISSION
from altar.execution.types import ContainerTaskSpec, TaskFailure, TaskHandle, spec_to_dict

__all__ = [
    "CANCELLED",
    "FAILED",
    "FINAL_STATES",
    "IN_DOUBT",
    "PENDING",
    "QUEUED",
    "RUNNING",
    "SKIPPED",
    "SUBMITTING",
    "SUBMIT_FAILURES",
    "SUCCEEDED",
    "Attempt",
    "TaskRecord",
    "spec_digest",
]

#: Task states of a run (the backend's states plus the runner's own).
QUEUED, SUBMITTING, PENDING, RUNNING = "queued", "submitting", "pending", "running"
SUCCEEDED, FAILED, SKIPPED, CANCELLED = "succeeded", "failed", "skipped", "cancelled"
FINAL_STATES = frozenset({SUCCEEDED, FAILED, SKIPPED, CANCELLED})
#: An attempt whose submit never answered (the runner died or gave up waiting), to submit again
#: with its journaled key; its task is ``queued`` meanwhile.
IN_DOUBT = "in_doubt"
#: Failure reasons of an attempt whose ``submit`` raised: the backend started nothing.
SUBMIT_FAILURES = frozenset({"submit_rejected", "submit_failed"})


def spec_digest(spec: ContainerTaskSpec) -> str:
    """``sha256:<hex>`` of the spec's canonical JSON (what a journal entry was made from)."""
    canonical = json.dumps(spec_to_dict(spec), sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def _handle_to_dict(handle: TaskHandle) -> dict[str, Any]:
    identity = handle.plugin_identity
    to_dict = getattr(identity, "to_dict", None)
    data: dict[str, Any] = {
        "backend": handle.backend,
        "external_id": handle.external_id,
        "labels": dict(handle.labels),
    }
    if identity is not None:  # left out when unset, like every default (see TaskRecord)
        data["plugin_identity"] = to_dict() if callable(to_dict) else identity
    return data


def _failure_to_dict(failure: TaskFailure | None) -> dict[str, Any] | None:
    if failure is None:
        return None
    data: dict[str, Any] = {
        "reason": failure.reason,
        "detail": failure.detail,
        "deterministic": failure.deterministic,
        "exit_code": failure.exit_code,
    }
    if failure.provider_ending is not None:  # written only when set: older journals unchanged
        data["provider_ending"] = failure.provider_ending
    return data


@dataclass
class Attempt:
    """One submission of a task. ``handle`` is None while the submit is in doubt.

    ``key`` is the submission key (``altar.submission``), journaled before ``submit`` is
    called; ``reexecuted`` counts the times it was submitted again after an in-doubt submit
    with no way to know that the provider had not started it (so it may have run twice);
    ``adopted`` says its handle came from the provider's listing, not from ``submit``.
    """

    number: int
    state: str = SUBMITTING
    handle: TaskHandle | None = None
    failure: TaskFailure | None = None
    submitted_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    key: str | None = None
    reexecuted: int = 0
    adopted: bool = False
    #: the handle the journal last wrote in full (a log line then writes ``"handle": 1``)
    logged_handle: TaskHandle | None = field(default=None, repr=False, compare=False)

    @property
    def executions(self) -> int:
        """How many times this attempt may have run on the provider.

        A submit that raised (``submit_rejected``/``submit_failed``) started nothing: the
        contract says a submit either returns a handle or leaves nothing running.
        """
        refused = (
            self.handle is None
            and self.failure is not None
            and self.failure.reason in SUBMIT_FAILURES
        )
        return (0 if refused else 1) + self.reexecuted

    @property
    def duration_s(self) -> float | None:
        start = self.started_at or self.submitted_at
        if start is None or self.finished_at is None:
            return None
        return max(0.0, self.finished_at - start)

    def to_dict(self, *, log: bool = False) -> dict[str, Any]:
        """Its fields, those at their default left out (the reader fills them in again).

        ``log``: for a log line, where a handle already written (in the snapshot or an
        earlier line) is ``1``, and the key, when the handle's labels carry it, is left out.
        """
        data: dict[str, Any] = {"number": self.number, "state": self.state}
        if self.handle and log and self.handle is self.logged_handle:
            data["handle"] = 1
        elif self.handle:
            data["handle"] = _handle_to_dict(self.handle)
        if self.failure:
            data["failure"] = _failure_to_dict(self.failure)
        for name in ("submitted_at", "started_at", "finished_at"):
            value = getattr(self, name)
            if value is not None:
                data[name] = value
        if self.key is not None and not (
            self.handle and self.handle.labels.get(LABEL_SUBMISSION) == self.key
        ):
            data["key"] = self.key
        if self.reexecuted:
            data["reexecuted"] = self.reexecuted
        if self.adopted:
            data["adopted"] = True
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], earlier: Attempt | None = None) -> Attempt:
        """Read one; ``earlier``: the attempt a log line's ``"handle": 1`` refers to."""
        raw = data.get("handle")
        failure = data.get("failure")
        if raw == 1:
            if earlier is None or earlier.handle is None:
                raise ValueError(f"attempt {data['number']}: its handle was never written")
            handle: TaskHandle | None = earlier.handle
        else:
            handle = TaskHandle(**raw) if raw else None
        key = data.get("key")
        if key is None and handle is not None:
            key = handle.labels.get(LABEL_SUBMISSION)
        attempt = cls(
            number=data["number"],
            state=data["state"],
            handle=handle,
            failure=TaskFailure(**failure) if failure else None,
            submitted_at=data.get("submitted_at"),
            started_at=data.get("started_at"),
            finished_at=data.get("finished_at"),
            key=key,
            reexecuted=int(data.get("reexecuted", 0)),
            adopted=bool(data.get("adopted")),
        )
        attempt.logged_handle = handle
        return attempt


@dataclass
class TaskRecord:
    """Everything the journal knows about one task of the plan."""

    id: str
    kind: str
    spec_sha256: str
    state: str = QUEUED
    attempts: list[Attempt] = field(default_factory=list)
    detail: str | None = None
    outputs_collected: bool = False
    cleaned: bool = False
    in_doubt: int = 0
    #: attempts made before ``altar run --retry-failed`` reopened the task: the retry budget
    #: counts the attempts after them
    retry_base: int = 0
    #: served from the task cache: the entry's origin (run_id, task_id, ...) and key
    cached: dict[str, Any] | None = None

    @property
    def last(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def editable(self) -> bool:
        """Queued with no attempt since it was (re)opened: its plan entry may still change."""
        return self.state == QUEUED and len(self.attempts) <= self.retry_base

    def to_dict(self, *, log: bool = False) -> dict[str, Any]:
        """Its fields, those at their default left out (the reader fills them in again).

        Compact since issue 24 (journal version 2): a log line per change of 100,000 tasks
        is most of what a run writes. ``log``: for a log line, which leaves out what never
        changes within a run (kind, spec digest: a run starts with a snapshot holding them)
        and handles already written (see :meth:`Attempt.to_dict`).
        """
        data: dict[str, Any] = {"state": self.state}
        if not log:
            data = {"kind": self.kind, "spec_sha256": self.spec_sha256, **data}
        if self.attempts:
            data["attempts"] = [a.to_dict(log=log) for a in self.attempts]
        if self.detail is not None:
            data["detail"] = self.detail
        for name in ("outputs_collected", "cleaned"):
            if getattr(self, name):
                data[name] = True
        for name in ("in_doubt", "retry_base"):
            if getattr(self, name):
                data[name] = getattr(self, name)
        if self.cached:
            data["cached"] = self.cached
        return data

    @classmethod
    def from_dict(
        cls, task_id: str, data: dict[str, Any], earlier: TaskRecord | None = None
    ) -> TaskRecord:
        """Read one; ``earlier``: the record a log line replaces (what the line left out)."""
        before = {a.number: a for a in earlier.attempts} if earlier is not None else {}
        return cls(
            id=task_id,
            kind=data["kind"] if "kind" in data or earlier is None else earlier.kind,
            spec_sha256=(
                data["spec_sha256"]
                if "spec_sha256" in data or earlier is None
                else earlier.spec_sha256
            ),
            state=data["state"],
            attempts=[
                Attempt.from_dict(a, before.get(a["number"])) for a in data.get("attempts", [])
            ],
            detail=data.get("detail"),
            outputs_collected=bool(data.get("outputs_collected")),
            cleaned=bool(data.get("cleaned")),
            in_doubt=int(data.get("in_doubt", 0)),
            retry_base=int(data.get("retry_base", 0)),
            cached=data.get("cached"),
        )
