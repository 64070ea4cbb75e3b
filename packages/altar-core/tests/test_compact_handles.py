"""Handles held compact by the journal's attempts, and given back equal (issue 24: memory)."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from typing import Any

import pytest
from altar.execution.run import cancelling
from altar.execution.run.runner import run_plan, run_status
from altar.execution.state.changes import apply_changes, changes_since, print_of
from altar.execution.state.records import (
    Attempt,
    Context,
    TaskRecord,
    compact_handle,
    expand_handle,
)
from altar.execution.types import TaskHandle, TaskStatus

from .conftest import FakeBackend, FakeTask
from .runkit import FAST, simple_plan

#: Labels a provider may hand back: altar.* ones the run did not set, the run's own with other
#: values, empty and multi-line values, non-ASCII names, in an order of the provider's.
HOSTILE = {
    "zz": "",
    "altar.run": "not-this-run",
    "altar.task\n": "x\ny",
    "é🙂": "\u0000\t\"'",
    "altar.submission": "sha256:" + "f" * 64,
    "a": "1",
}


def test_a_compact_handle_expands_to_an_equal_one_with_the_same_label_order():
    for identity in (None, {"image": "sha256:abc"}, ("tuple", 1)):
        handle = TaskHandle("fake", "id-1", dict(HOSTILE), identity)
        attempt = Attempt(1, handle=handle)
        back = attempt.handle
        assert type(back) is TaskHandle
        assert back == handle
        assert list(back.labels.items()) == list(HOSTILE.items())
        assert back.plugin_identity is identity
        assert type(attempt.handle_form) is tuple  # held compact
        assert dataclasses.replace(attempt) == attempt
        for copied in (pickle.loads(pickle.dumps(attempt)), copy.deepcopy(attempt)):
            assert copied == attempt
            assert type(copied.handle_form) is tuple
        assert attempt.handle_key == ("fake", "id-1")
        assert attempt.external_id == "id-1"
    empty = TaskHandle("fake", "id-2")
    assert expand_handle(compact_handle(empty)) == empty
    assert Attempt(1).handle is None
    assert Attempt(1).handle_key is None
    assert Attempt(1).external_id is None


def test_a_handle_that_is_not_a_plain_one_is_kept_as_it_is():
    @dataclasses.dataclass(frozen=True)
    class Special(TaskHandle):
        extra: str = "kept"

    special = Special("fake", "id-1", {"a": "1"})
    attempt = Attempt(1, handle=special)
    assert attempt.handle is special
    assert attempt.handle_key == ("fake", "id-1")
    odd = TaskHandle("fake", "id-2", labels=_Labels(a="1"))
    assert Attempt(1, handle=odd).handle is odd


class _Labels(dict[str, str]):
    """A mapping type of a provider's own (not a plain dict)."""


def test_the_journal_prints_compare_compact_handles():
    context = Context("run-1", "fake", derived_keys=True)
    record = TaskRecord("t", "fold", "sha256:0")
    record.attempts.append(Attempt(1, key="k"))
    old = print_of(record)
    handle = TaskHandle("fake", "id-1", dict(HOSTILE))
    record.attempts[0].handle = handle
    line = changes_since(record, old, context)
    assert line is not None
    assert "handle" in line["attempts"][0]
    earlier = TaskRecord("t", "fold", "sha256:0", attempts=[Attempt(1, key="k")])
    assert apply_changes(earlier, line, context).attempts[0].handle == handle
    # an equal handle set again (a new object) is no change
    record.attempts[0].handle = TaskHandle("fake", "id-1", dict(HOSTILE))
    assert changes_since(record, print_of(record), context) is None


class HostileBackend(FakeBackend):
    """Hands out handles with hostile labels; checks that every handle it is given back
    equals the one its submit returned, labels in the same order."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.returned: dict[str, TaskHandle] = {}
        self.given_back = 0

    def _handle(self, task: FakeTask) -> TaskHandle:
        labels = {**HOSTILE, **task.spec.labels, "altar.attempt": "hostile"}
        handle = TaskHandle(self.name, task.id, labels, {"identity": task.id})
        self.returned[task.id] = handle
        return handle

    def _check(self, handles: list[TaskHandle]) -> None:
        for handle in handles:
            submitted = self.returned[handle.external_id]
            assert handle == submitted
            assert list(handle.labels.items()) == list(submitted.labels.items())
            self.given_back += 1

    async def poll(self, handles: list[TaskHandle]) -> list[TaskStatus]:
        self._check(handles)
        return await super().poll(handles)

    async def cleanup(self, handles: list[TaskHandle]) -> None:
        self._check(handles)
        await super().cleanup(handles)


@pytest.mark.asyncio
async def test_a_backend_is_given_back_the_handles_its_submit_returned(tmp_path, provider):
    backend = HostileBackend(provider=provider)
    result = await run_plan(simple_plan("a", "b", "c"), backend, run_dir=tmp_path / "r", **FAST)
    assert [t.status for t in result.tasks] == ["succeeded"] * 3
    assert backend.given_back >= 6  # polled and cleaned up
    status = await run_status(tmp_path / "r")  # read back from the journal: the same labels
    assert {t.external_id for t in status.tasks} == set(backend.returned)


@pytest.mark.asyncio
async def test_cleanup_is_called_per_batch_of_handles(tmp_path, provider, monkeypatch):
    monkeypatch.setattr(cancelling, "CLEANUP_BATCH", 2)
    backend = FakeBackend(provider=provider)
    await run_plan(simple_plan(*"abcde"), backend, run_dir=tmp_path / "r", **FAST)
    calls = provider.cleanup_calls
    assert [len(call) for call in calls] == [2, 2, 1]
    assert sorted(h for call in calls for h in call) == sorted(provider.tasks)
    assert all(task.removed for task in provider.tasks.values())
