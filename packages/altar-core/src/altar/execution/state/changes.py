"""Log lines that carry only what changed since a task's last line (journal version 3).

A task changes four or five times in a run (submitting, its handle, a state or two, outputs
collected), and a line that repeated the whole record each time was most of what a run of
100,000 tasks wrote. The journal keeps, per task still changing, a *print* of what it last made
durable (a tuple of references to the record's field values: no copies), and a line holds only
the fields that differ from it (``None`` for one back at its default); an attempt the print does
not hold is written whole. Replay applies a line onto the record before it, which is exactly
the state the print describes: the snapshot, then every earlier line.

The print compares values, not identities: ``TaskHandle`` and ``TaskFailure`` are frozen, and
``cached`` is replaced whole (:mod:`altar.execution.run.caching`), never changed in place.
"""

from __future__ import annotations

from typing import Any

from altar.execution.labels import LABEL_SUBMISSION
from altar.execution.state.records import (
    _HANDLE_SLOT,
    Attempt,
    Context,
    TaskRecord,
    expand_handle,
    failure_to_dict,
    handle_from_dict,
    handle_to_dict,
)
from altar.execution.types import TaskFailure

__all__ = ["Print", "apply_changes", "changes_since", "print_of"]

RECORD_FIELDS = (
    "kind",
    "spec_sha256",
    "state",
    "detail",
    "outputs_collected",
    "cleaned",
    "in_doubt",
    "retry_base",
    "cached",
)
ATTEMPT_FIELDS = (
    "state",
    "handle",
    "failure",
    "submitted_at",
    "started_at",
    "finished_at",
    "key",
    "reexecuted",
    "adopted",
)
#: The record's field values, then each attempt's number and field values, in one flat tuple
#: (one object per task: a print is kept for every task still changing).
Print = tuple[Any, ...]
_ATTEMPT_WIDTH = 1 + len(ATTEMPT_FIELDS)


def print_of(record: TaskRecord) -> Print:
    values: list[Any] = [
        record.kind,
        record.spec_sha256,
        record.state,
        record.detail,
        record.outputs_collected,
        record.cleaned,
        record.in_doubt,
        record.retry_base,
        record.cached,
    ]
    for a in record.attempts:
        # the handle as held (a tuple): compared without building a handle
        values += (a.number, a.state, a.handle_form, a.failure, a.submitted_at, a.started_at)
        values += (a.finished_at, a.key, a.reexecuted, a.adopted)
    return tuple(values)


def _attempts_of(values: Print) -> list[Print]:
    start = len(RECORD_FIELDS)
    return [values[i : i + _ATTEMPT_WIDTH] for i in range(start, len(values), _ATTEMPT_WIDTH)]


def _encode(name: str, value: Any, record: TaskRecord, attempt: Attempt, context: Context) -> Any:
    if value is None:
        return None
    if name == "handle":
        handle = expand_handle(value)
        assert handle is not None  # (None is returned above)
        return handle_to_dict(handle, record.id, attempt.number, context, attempt.key)
    if name == "failure":
        return failure_to_dict(value)
    return value


def changes_since(record: TaskRecord, old: Print, context: Context) -> dict[str, Any] | None:
    """The log line body for what changed in ``record`` since ``old``; None if nothing did."""
    line: dict[str, Any] = {}
    values = print_of(record)
    changed = {
        name: value
        for name, value, before in zip(RECORD_FIELDS, values, old, strict=False)
        if value != before
    }
    if changed:
        line["set"] = changed
    old_attempts = _attempts_of(old)
    before_attempts = {p[0]: p for p in old_attempts}
    numbers = [a.number for a in record.attempts]
    old_numbers = [p[0] for p in old_attempts]
    if numbers[: len(old_numbers)] != old_numbers:  # not only new ones appended: say which
        line["numbers"] = numbers
    entries = []
    for attempt, now in zip(record.attempts, _attempts_of(values), strict=True):
        before = before_attempts.get(attempt.number)
        if before is None:
            entries.append(attempt.to_dict(record.id, context))
            continue
        fields = {
            name: _encode(name, value, record, attempt, context)
            for name, value, was in zip(ATTEMPT_FIELDS, now[1:], before[1:], strict=True)
            if value != was
        }
        if fields:
            entries.append({"number": attempt.number, **fields})
    _share_state(
        record,
        line,
        entries,
        last_is_new=record.attempts[-1].number not in before_attempts if record.attempts else False,
    )
    if entries:
        line["attempts"] = entries
    return line or None


def _share_state(
    record: TaskRecord, line: dict[str, Any], entries: list[dict[str, Any]], *, last_is_new: bool
) -> None:
    """A task and its last attempt that change to one state say it once: ``"state"``.

    Most lines are such a change (``submitting``, ``pending``, ``succeeded``): it is written
    once instead of twice, in the line's top level, which means both.
    """
    changed = line.get("set", {})
    if "state" not in changed or not entries or not record.attempts:
        return
    last = entries[-1]
    if last["number"] != record.attempts[-1].number or last.get("state") != record.state:
        return
    del changed["state"]
    if not changed:
        del line["set"]
    del last["state"]
    if len(last) == 1 and not last_is_new:
        entries.pop()  # a change of its state alone: nothing else to say of it
    line["state"] = record.state


def _decoded(
    name: str, value: Any, task_id: str, attempt: tuple[int, str | None], context: Context
) -> Any:
    if name == "handle":
        if value is None:
            return None
        return handle_from_dict(value, task_id, attempt[0], context, attempt[1])
    if name == "failure":
        return TaskFailure(**value) if value is not None else None
    if name == "reexecuted":
        return int(value or 0)
    if name == "adopted":
        return bool(value)
    return value


_RECORD_DECODERS: dict[str, Any] = {
    "kind": str,
    "spec_sha256": str,
    "state": str,
    "detail": lambda v: v,
    "outputs_collected": bool,
    "cleaned": bool,
    "in_doubt": lambda v: int(v or 0),
    "retry_base": lambda v: int(v or 0),
    "cached": lambda v: v,
}


def apply_changes(earlier: TaskRecord, line: dict[str, Any], context: Context) -> TaskRecord:
    """The record after ``line`` (from :func:`changes_since`); ``earlier`` is left as it was.

    A malformed line raises ValueError, KeyError or TypeError before anything is applied.
    """
    fields = {name: _RECORD_DECODERS[name](value) for name, value in line.get("set", {}).items()}
    shared = line.get("state")  # the task's state and its last attempt's (_share_state)
    if shared is not None:
        fields["state"] = str(shared)
    by_number = {a.number: a for a in earlier.attempts}
    updated: dict[int, Attempt] = {}
    for entry in line.get("attempts", []):
        number = int(entry["number"])
        before = by_number.get(number)
        if before is None:
            whole = entry if "state" in entry or shared is None else {**entry, "state": shared}
            updated[number] = Attempt.from_dict(whole, None, earlier.id, context)
            continue
        key = entry.get("key", before.key)
        changes = {
            name: _decoded(name, value, earlier.id, (number, key), context)
            for name, value in entry.items()
            if name != "number"
        }
        unknown = set(changes) - set(ATTEMPT_FIELDS)
        if unknown:
            raise ValueError(f"unknown attempt fields {sorted(unknown)}")
        attempt = _copy(before, changes)
        if attempt.key is None and attempt.handle is not None:
            attempt.key = attempt.handle.labels.get(LABEL_SUBMISSION)
        updated[number] = attempt
    # by default the attempts before, then the new ones in the line
    numbers = (
        line["numbers"]
        if "numbers" in line
        else [*by_number, *(n for n in updated if n not in by_number)]
    )
    attempts = [updated.get(n) or by_number[n] for n in numbers]
    if shared is not None:
        if not attempts:
            raise ValueError("a shared state with no attempt")
        attempts[-1] = _copy(attempts[-1], {"state": fields["state"]})
    record: TaskRecord = _copy(earlier, fields)
    record.attempts = attempts
    return record


def _copy(obj: Any, changes: dict[str, Any]) -> Any:
    """A shallow copy of a record or attempt with ``changes`` set (no __post_init__ to run)."""
    copy = object.__new__(type(obj))
    for name in obj.__dataclass_fields__:
        if name == "handle" and name not in changes:
            _HANDLE_SLOT.__set__(copy, obj.handle_form)  # as held: no handle built and undone
            continue
        setattr(copy, name, changes[name] if name in changes else getattr(obj, name))
    return copy
