"""Exactly once on Modal: sandboxes carry the submission labels, a resubmit adopts its sandbox."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from altar.backends.modal import ModalExecutionBackend
from altar.backends.modal.fake import FakeModalRuntime
from altar.execution import BackendUnavailableError, ContainerTaskSpec, TaskState, Transfer
from altar.execution.labels import submission_labels

RUN = "0123456789abcdef0123456789abcdef"


def _spec(task: str = "fold-0", attempt: int = 1, run: str = RUN, **changes: object):
    labels = {"job_id": "J", **submission_labels(run, task, attempt)}
    fields: dict[str, object] = {
        "kind": "score",
        "image": "busybox:1.36",
        "command": ["sh", "-c", "echo hi"],
        "labels": labels,
    }
    fields.update(changes)
    return ContainerTaskSpec(**fields)  # type: ignore[arg-type]


def _backend(fake: FakeModalRuntime) -> ModalExecutionBackend:
    return ModalExecutionBackend(runtime=fake, app_name="app", volume_name="vol")


def test_modal_does_not_promise_to_adopt_finished_sandboxes() -> None:
    assert ModalExecutionBackend.adopts_submissions is False


@pytest.mark.asyncio
async def test_sandboxes_carry_the_submission_labels_as_tags_and_the_key_as_name() -> None:
    fake = FakeModalRuntime()
    spec = _spec()
    handle = await _backend(fake).submit(spec)
    request = fake.sandboxes[handle.external_id].request
    assert request.tags == spec.labels
    assert {k: request.tags[k] for k in ("altar.run", "altar.task", "altar.attempt")} == {
        "altar.run": RUN,
        "altar.task": "fold-0",
        "altar.attempt": "1",
    }
    assert request.name == "altar-" + spec.labels["altar.submission"]
    assert handle.labels == spec.labels


@pytest.mark.asyncio
async def test_killed_after_modal_accepted_the_create_the_resubmit_adopts_it() -> None:
    fake = FakeModalRuntime()
    fake.drop_create_answers = 1  # Modal creates the sandbox; the answer never arrives
    spec = _spec()
    with pytest.raises(BackendUnavailableError):
        await _backend(fake).submit(spec)
    (created,) = fake.sandboxes
    # the runner restarts: a new backend, the journaled key, the same spec
    handle = await _backend(FakeModalRuntimeView(fake)).submit(spec)
    assert handle.external_id == created
    assert list(fake.sandboxes) == [created]
    assert Counter(fake.rpcs)["SandboxCreate"] == 1
    (status,) = await _backend(fake).poll([handle])
    assert status.state is TaskState.RUNNING


class FakeModalRuntimeView(FakeModalRuntime):
    """Another process's runtime on the same Modal: shares the sandboxes, not the caches."""

    def __init__(self, modal: FakeModalRuntime) -> None:
        super().__init__(clock=modal.clock)
        self.sandboxes = modal.sandboxes
        self.volumes = modal.volumes
        self.rpcs = modal.rpcs


@pytest.mark.asyncio
async def test_an_adopted_sandbox_keeps_the_outputs_it_already_wrote() -> None:
    fake = FakeModalRuntime()
    output = Transfer("/tmp/unused/out.tsv", "jobs/J/out.tsv")
    spec = _spec(outputs=[output])
    handle = await _backend(fake).submit(spec)
    fake.put("vol", "jobs/J/out.tsv", b"half of the scores\n")
    again = await _backend(fake).submit(spec)
    assert again.external_id == handle.external_id
    assert fake.volumes["vol"]["jobs/J/out.tsv"].data == b"half of the scores\n"


@pytest.mark.asyncio
async def test_a_create_that_collides_with_a_running_namesake_adopts_it() -> None:
    fake = FakeModalRuntime()
    spec = _spec()
    first = await _backend(fake).submit(spec)

    class LookupMisses(FakeModalRuntimeView):
        """A name lookup that misses once (the sandbox became visible only afterwards)."""

        misses = 1

        async def sandbox_by_name(self, app_name: str, name: str) -> str | None:
            if self.misses:
                self.misses -= 1
                await self._rpc("SandboxGetFromName")
                return None
            return await super().sandbox_by_name(app_name, name)

    second = await _backend(LookupMisses(fake)).submit(spec)
    assert second.external_id == first.external_id
    assert len(fake.sandboxes) == 1
    assert Counter(fake.rpcs)["SandboxCreate"] == 2  # the second one was refused by name


@pytest.mark.asyncio
async def test_other_keys_and_specs_without_a_key_get_their_own_sandboxes() -> None:
    fake = FakeModalRuntime()
    backend = _backend(fake)
    first = await backend.submit(_spec(attempt=1))
    retry = await backend.submit(_spec(attempt=2))
    other_task = await backend.submit(_spec(task="fold-1"))
    plain = ContainerTaskSpec(kind="k", image="busybox:1.36", command=["true"])
    unkeyed = [await backend.submit(plain) for _ in range(2)]
    ids = {h.external_id for h in (first, retry, other_task, *unkeyed)}
    assert len(ids) == len(fake.sandboxes) == 5
    assert [fake.sandboxes[h.external_id].request.name for h in unkeyed] == [None, None]


@pytest.mark.asyncio
async def test_a_finished_in_doubt_sandbox_cannot_be_found_so_the_task_runs_again() -> None:
    # The window docs/backends/modal.md states: Modal finds sandboxes by name or listing only
    # while they run, and an in-doubt create never returned the id.
    fake = FakeModalRuntime()
    fake.drop_create_answers = 1
    spec = _spec()
    with pytest.raises(BackendUnavailableError):
        await _backend(fake).submit(spec)
    (first,) = fake.sandboxes
    fake.finish(first, 0)
    handle = await _backend(fake).submit(spec)
    assert handle.external_id != first
    assert len(fake.sandboxes) == 2


@pytest.mark.asyncio
async def test_list_submissions_returns_the_runs_running_sandboxes_with_their_labels() -> None:
    fake = FakeModalRuntime()
    backend = _backend(fake)
    mine = [await backend.submit(_spec(task=f"t{i}")) for i in range(3)]
    other = await backend.submit(_spec(task="t0", run="f" * 32))
    fake.finish(mine[2].external_id, 0)
    listed = await _backend(fake).list_submissions(RUN)
    assert listed is not None
    assert sorted(h.external_id for h in listed) == sorted(h.external_id for h in mine[:2])
    by_id = {h.external_id: h for h in listed}
    for handle in mine[:2]:
        assert by_id[handle.external_id].labels == handle.labels
        assert by_id[handle.external_id].backend == "modal"
    assert other.external_id not in by_id
    await backend.cleanup(listed)
    assert await backend.list_submissions(RUN) == []


@pytest.mark.asyncio
async def test_list_submissions_when_modal_is_unreachable_is_transient() -> None:
    fake = FakeModalRuntime()
    fake.unreachable = True
    with pytest.raises(BackendUnavailableError):
        await _backend(fake).list_submissions(RUN)


class NoWorkerYet(FakeModalRuntime):
    """Modal accepted the create but finds no worker: the wait for scheduling never ends."""

    def __init__(self) -> None:
        super().__init__()
        self.scheduling = asyncio.Event()
        self.blocked = True

    async def _rpc(self, rpc: str) -> None:
        await super()._rpc(rpc)
        if rpc == "SandboxGetTaskId" and self.blocked:
            self.scheduling.set()
            await asyncio.Event().wait()


@pytest.mark.asyncio
async def test_a_submit_cancelled_while_modal_schedules_terminates_its_sandbox() -> None:
    # The SDK's behaviour (tests/test_wire.py checks it on the wire): a cancelled create
    # terminates the sandbox, so a later resubmit rightly creates a fresh one.
    fake = NoWorkerYet()
    backend = _backend(fake)
    spec = _spec()
    submit = asyncio.ensure_future(backend.submit(spec))
    await fake.scheduling.wait()
    submit.cancel()
    with pytest.raises(asyncio.CancelledError):
        await submit
    (first,) = fake.sandboxes
    assert fake.sandboxes[first].result.status.value == "terminated"
    fake.blocked = False
    again = await backend.submit(spec)
    assert again.external_id != first
