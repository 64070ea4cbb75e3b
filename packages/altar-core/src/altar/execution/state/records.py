"""What a run journal records per task: its attempts, their handles and keys, and its state.

Plain data with JSON forms; :mod:`altar.execution.state.journal` makes it durable.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from altar.execution.labels import (
    LABEL_ATTEMPT,
    LABEL_RUN,
    LABEL_SUBMISSION,
    LABEL_TASK,
    RESERVED_LABEL_PREFIX,
    submission_key,
)
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
    "Context",
    "TaskRecord",
    "compact_handle",
    "expand_handle",
    "handle_from_dict",
    "handle_to_dict",
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


#: The journal's encodings, each made once (``json.dumps`` with options builds an encoder per
#: call, a tenth of a 10,000-task run's lines and digests); same text as ``json.dumps`` with
#: these options. ``SPEC_JSON``: a spec's canonical text (a spec is a tree: no cycle check).
SPEC_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), check_circular=False)
#: ``JOURNAL_JSON``: snapshots and log lines.
JOURNAL_JSON = json.JSONEncoder(separators=(",", ":"), default=str)


def spec_digest(spec: ContainerTaskSpec) -> str:
    """``sha256:<hex>`` of the spec's canonical JSON (what a journal entry was made from)."""
    canonical = SPEC_JSON.encode(spec_to_dict(spec))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class Context:
    """What a journal knows that its handles need not repeat (journal version 3).

    ``derived_keys`` (journal version 4): an attempt whose key is the one
    :func:`~altar.execution.labels.submission_key` derives from the run id, task and number
    leaves it out, and one read without a key gets that one back.
    """

    run_id: str
    backend: str
    derived_keys: bool = False

    def derived_key(self, task_id: str, number: int) -> str | None:
        """The key an attempt left out (None where keys are not derived, or for no task)."""
        if not self.derived_keys or not task_id or number < 1:
            return None
        return submission_key(self.run_id, task_id, number)


#: Labels the runner derives (bit, name): a version 3 handle leaves them out and says so in
#: ``implied``, so a handle without them (an older one, an adopted one) reads back as it was.
#: The submission label is the attempt's key, written beside the handle.
_IMPLIED = ((1, LABEL_RUN), (2, LABEL_TASK), (4, LABEL_ATTEMPT), (8, LABEL_SUBMISSION))


def _implied_values(
    context: Context, task_id: str, number: int, key: str | None
) -> tuple[str, str, str, str | None]:
    return (context.run_id, task_id, str(number), key)


def handle_to_dict(
    handle: TaskHandle,
    task_id: str = "",
    number: int = 0,
    context: Context | None = None,
    key: str | None = None,
) -> dict[str, Any]:
    """A handle's JSON form; with ``context``, without what the run derives (and ``key``)."""
    identity = handle.plugin_identity
    to_dict = getattr(identity, "to_dict", None)
    labels = dict(handle.labels)
    data: dict[str, Any] = {}
    implied = 0
    if context is not None:
        values = _implied_values(context, task_id, number, key)
        for (bit, name), value in zip(_IMPLIED, values, strict=True):
            if value is not None and labels.get(name) == value:
                del labels[name]
                implied |= bit
    if context is None or handle.backend != context.backend:
        data["backend"] = handle.backend
    data["external_id"] = handle.external_id
    data["labels"] = labels
    if implied:
        data["implied"] = implied
    if identity is not None:  # left out when unset, like every default (see TaskRecord)
        data["plugin_identity"] = to_dict() if callable(to_dict) else identity
    return data


def handle_from_dict(
    data: dict[str, Any],
    task_id: str = "",
    number: int = 0,
    context: Context | None = None,
    key: str | None = None,
) -> TaskHandle:
    """Read :func:`handle_to_dict`'s form (and the full form of journal versions 1 and 2)."""
    implied = int(data.get("implied", 0))
    backend = data["backend"] if "backend" in data or context is None else context.backend
    labels: dict[str, str] = data.get("labels") or {}
    if implied:  # (one pass, no helper calls: 100,000 handles are read by `altar status`)
        if context is None or (implied & 8 and key is None):
            raise ValueError("a handle's implied labels, read without what implies them")
        # in the order the runner makes them: the plan's, the derived ones, the other altar.*
        rebuilt: dict[str, str] = {}
        ours: dict[str, str] = {}
        for name, value in labels.items():
            (ours if name.startswith(RESERVED_LABEL_PREFIX) else rebuilt)[name] = value
        if implied & 1:
            rebuilt[LABEL_RUN] = context.run_id
        if implied & 2:
            rebuilt[LABEL_TASK] = task_id
        if implied & 4:
            rebuilt[LABEL_ATTEMPT] = str(number)
        rebuilt.update(ours)
        if implied & 8:
            rebuilt[LABEL_SUBMISSION] = key  # type: ignore[assignment]  # checked above
        labels = rebuilt
    return TaskHandle(
        backend=backend,
        external_id=data["external_id"],
        labels=labels,
        plugin_identity=data.get("plugin_identity"),
    )


def failure_to_dict(failure: TaskFailure | None) -> dict[str, Any] | None:
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


@dataclass(slots=True)
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
    def handle_form(self) -> Any:
        """The handle as held (:func:`compact_handle`'s form): compared by the journal's prints
        without building a handle."""
        return _HANDLE_SLOT.__get__(self, Attempt)

    @property
    def handle_key(self) -> tuple[str, str] | None:
        """The handle's ``(backend, external_id)``, without building the handle (None if none)."""
        form = _HANDLE_SLOT.__get__(self, Attempt)
        if form is None:
            return None
        if type(form) is tuple:
            return (form[0], form[1])
        return (form.backend, form.external_id)

    @property
    def external_id(self) -> str | None:
        """The handle's external id, without building the handle (None while there is none)."""
        key = self.handle_key
        return key[1] if key is not None else None

    @property
    def duration_s(self) -> float | None:
        start = self.started_at or self.submitted_at
        if start is None or self.finished_at is None:
            return None
        return max(0.0, self.finished_at - start)

    def to_dict(
        self, task_id: str = "", context: Context | None = None, *, log: bool = False
    ) -> dict[str, Any]:
        """Its fields, those at their default left out (the reader fills them in again).

        ``context`` (the journal's run id and backend): the handle leaves out what they
        imply. ``log`` is kept for callers of journal version 2; it changes nothing now.
        Without ``context`` the key is left out when the handle's labels carry it.
        """
        data: dict[str, Any] = {"number": self.number, "state": self.state}
        if self.handle:
            data["handle"] = handle_to_dict(self.handle, task_id, self.number, context, self.key)
        if self.failure:
            data["failure"] = failure_to_dict(self.failure)
        for name in ("submitted_at", "started_at", "finished_at"):
            value = getattr(self, name)
            if value is not None:
                data[name] = value
        if context is not None and context.derived_keys:
            # version 4: a key the run derives is not stored (about 45 bytes a task, twice);
            # no key at all says so (an attempt of a journal from before keys)
            if self.key != context.derived_key(task_id, self.number):
                data["key"] = self.key
        elif self.key is not None and (
            context is not None  # version 3: the handle's submission label is implied instead
            or not (self.handle and self.handle.labels.get(LABEL_SUBMISSION) == self.key)
        ):
            data["key"] = self.key
        if self.reexecuted:
            data["reexecuted"] = self.reexecuted
        if self.adopted:
            data["adopted"] = True
        return data

    @classmethod
    def from_dict(
        cls,
        data: dict[str, Any],
        earlier: Attempt | None = None,
        task_id: str = "",
        context: Context | None = None,
    ) -> Attempt:
        """Read one; ``earlier``: the attempt a version 2 log line's ``"handle": 1`` means."""
        raw = data.get("handle")
        failure = data.get("failure")
        number = data["number"]
        if "key" in data or context is None:
            key = data.get("key")
        else:  # version 4 leaves out the key the run derives (version 3: there was none)
            key = context.derived_key(task_id, number)
        if raw == 1:
            if earlier is None or earlier.handle is None:
                raise ValueError(f"attempt {number}: its handle was never written")
            handle: TaskHandle | None = earlier.handle
        else:
            handle = handle_from_dict(raw, task_id, number, context, key) if raw else None
        if key is None and handle is not None:
            key = handle.labels.get(LABEL_SUBMISSION)
        get = data.get
        return cls(  # positionally, in field order: read 100,000 times by `altar status`
            number,
            data["state"],
            handle,
            TaskFailure(**failure) if failure else None,
            get("submitted_at"),
            get("started_at"),
            get("finished_at"),
            key,
            int(get("reexecuted", 0)),
            bool(get("adopted")),
        )


#: The slot ``handle`` is stored in; :attr:`Attempt.handle` is the property over it below.
_HANDLE_SLOT: Any = Attempt.__dict__["handle"]
#: Label names in order, one tuple per distinct order (a run's handles share a few).
_LABEL_NAMES: dict[tuple[str, ...], tuple[str, ...]] = {}


def compact_handle(handle: TaskHandle | None) -> Any:
    """``handle`` as a flat tuple: backend, external id, plugin identity, its label names (one
    shared tuple), then the label values (references, no copies): about 140 B instead of 425 B
    for a handle with six labels, held for every attempt of a 100,000-task run (issue 24).

    :func:`expand_handle` gives back a handle equal to it (same labels, same order). A handle
    that is not a plain ``TaskHandle`` with a dict of labels is kept as it is.
    """
    if type(handle) is not TaskHandle or type(handle.labels) is not dict:
        return handle
    labels = handle.labels
    names = tuple(labels)
    shared = _LABEL_NAMES.get(names)
    if shared is None:
        if len(_LABEL_NAMES) >= 1024:  # bounded: label names that vary per task are rare
            _LABEL_NAMES.clear()
        shared = _LABEL_NAMES[names] = names
    return (handle.backend, handle.external_id, handle.plugin_identity, shared, *labels.values())


def expand_handle(form: Any) -> TaskHandle | None:
    """The handle :func:`compact_handle` made ``form`` from (an equal one, a new object)."""
    if form is None or type(form) is not tuple:
        return form  # type: ignore[no-any-return]
    return TaskHandle(form[0], form[1], dict(zip(form[3], form[4:], strict=True)), form[2])


def _get_handle(attempt: Attempt) -> TaskHandle | None:
    return expand_handle(_HANDLE_SLOT.__get__(attempt, Attempt))


def _set_handle(attempt: Attempt, handle: TaskHandle | None) -> None:
    _HANDLE_SLOT.__set__(attempt, compact_handle(handle))


# what the dataclass's __init__, __eq__, __repr__ and replace() go through too
_HANDLE_DOC = "The attempt's handle (None while its submit is in doubt), held compact."
setattr(Attempt, "handle", property(_get_handle, _set_handle, doc=_HANDLE_DOC))  # noqa: B010


@dataclass(slots=True)
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

    def to_dict(self, context: Context | None = None, *, log: bool = False) -> dict[str, Any]:
        """Its fields, those at their default left out (the reader fills them in again).

        Compact since issue 24 (journal version 2): a log line per change of 100,000 tasks
        is most of what a run writes. ``log``: for a log line, which leaves out what never
        changes within a run (kind, spec digest: a run starts with a snapshot holding them).
        ``context``: handles leave out what the journal implies, and the last attempt its
        state when it is the task's (version 3).
        """
        data: dict[str, Any] = {"state": self.state}
        if not log:
            data = {"kind": self.kind, "spec_sha256": self.spec_sha256, **data}
        if self.attempts:
            attempts = data["attempts"] = [a.to_dict(self.id, context) for a in self.attempts]
            if context is not None and attempts[-1]["state"] == self.state:
                del attempts[-1]["state"]  # version 3: the last attempt's is the task's
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
        cls,
        task_id: str,
        data: dict[str, Any],
        earlier: TaskRecord | None = None,
        context: Context | None = None,
    ) -> TaskRecord:
        """Read one; ``earlier``: the record a log line replaces (what the line left out)."""
        get = data.get
        if earlier is None:
            kind, spec_sha256, before = data["kind"], data["spec_sha256"], None
        else:
            kind, spec_sha256 = get("kind", earlier.kind), get("spec_sha256", earlier.spec_sha256)
            before = {a.number: a for a in earlier.attempts}
        raw_attempts = get("attempts")
        if raw_attempts and "state" not in raw_attempts[-1]:  # the task's (see to_dict)
            raw_attempts = [*raw_attempts[:-1], {**raw_attempts[-1], "state": data["state"]}]
        attempts = (
            [
                Attempt.from_dict(
                    a, before.get(a["number"]) if before is not None else None, task_id, context
                )
                for a in raw_attempts
            ]
            if raw_attempts
            else []
        )
        return cls(  # positionally, in field order: read 100,000 times by `altar status`
            task_id,
            kind,
            spec_sha256,
            data["state"],
            attempts,
            get("detail"),
            bool(get("outputs_collected")),
            bool(get("cleaned")),
            int(get("in_doubt", 0)),
            int(get("retry_base", 0)),
            get("cached"),
        )
