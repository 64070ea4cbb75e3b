"""The run's use of the task cache: look a task up before its submit, store it once collected.

A run with a cache (a ``[cache]`` table in the plan, or ``altar run --cache DIR``) computes each
task's key (:mod:`altar.execution.cache.key`) when it first becomes ready: the image by digest
(pinned in the plan, or resolved by the backend's ``image_digest``), every input's digest (the
plan's; else the local source hashed once, through its verification record; else, for an input
another task writes, that task's key). A verified hit puts the entry's outputs at the task's
output uris, stages those a later task of the run reads onto the backend, and only then is
journaled as a success with ``cached`` set: a run killed in between looks the task up again.
A task whose outputs were collected is stored; a failure to store is said, never fatal.

Exactly once is unchanged: a hit is decided before any submit intent is journaled, and a
journaled hit is final like any success.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from altar.execution.backend import ExecutionBackend
from altar.execution.cache.key import TaskKey, UncacheableError, image_identity, task_key
from altar.execution.cache.settings import CacheSettings
from altar.execution.cache.store import CacheEntry, CacheStore, default_store_dir
from altar.execution.digest import recorded_digest, sha256_file, write_verification_record
from altar.execution.journal import SUCCEEDED, Journal, TaskRecord
from altar.execution.ledger import Ledger
from altar.execution.plan import Plan
from altar.execution.results import one_line
from altar.execution.types import Transfer
from altar.execution.uris import local_path_or_none

__all__ = ["KEYS_FILE", "RunCache", "read_keys", "source_digest"]

#: In the run directory: one JSON line per task keyed (its key's fields, or why it is not
#: cacheable), what ``altar cache explain`` compares with the store. Diagnostic only.
KEYS_FILE = "cache-keys.jsonl"


def source_digest(path: str) -> str:
    """The sha256 of a local file, read from its current verification record when it has one."""
    vouched = recorded_digest(path)
    if vouched is not None:
        return vouched
    before = os.stat(path)
    digest = sha256_file(path)
    write_verification_record(path, digest, before)  # the next run of the plan: one stat
    return digest


def read_keys(run_dir: Path) -> dict[str, dict[str, Any]]:
    """What :data:`KEYS_FILE` says of each task (the last line per task wins)."""
    found: dict[str, dict[str, Any]] = {}
    try:
        text = (run_dir / KEYS_FILE).read_text(encoding="utf-8")
    except FileNotFoundError:
        return found
    for raw in text.splitlines():
        with contextlib.suppress(ValueError, TypeError, KeyError):
            line = json.loads(raw)
            found[str(line["task"])] = line
    return found


class RunCache:
    """One run's lookups and stores (see the module docstring)."""

    def __init__(
        self,
        settings: CacheSettings,
        plan: Plan,
        backend: ExecutionBackend,
        ledger: Ledger,
        journal: Journal,
    ) -> None:
        self.settings = settings
        self.store = CacheStore(settings.store_dir or default_store_dir())
        self.plan = plan
        self.backend = backend
        self.ledger = ledger
        self.journal = journal
        self.specs = {task.id: task.spec for task in plan.tasks}
        self.cacheable = {task.id: task.cache for task in plan.tasks}
        self.writer = {t.logical_path: task.id for task in plan.tasks for t in task.spec.outputs}
        self.readers = {t.logical_path for task in plan.tasks for t in task.spec.inputs}
        self.keys: dict[str, TaskKey | None] = {}
        self.why: dict[str, str] = {}
        self.looked: set[str] = set()
        self.stored: set[str] = set()
        self.waiting: set[str] = set()  # tasks another run is computing (said once)
        self.claims: dict[str, str] = {}  # task id -> key this run has claimed
        self._images: dict[str, str] = {}

    # -- keys --------------------------------------------------------------------------------

    async def key_of(self, task_id: str) -> TaskKey | None:
        """The task's key, computed once; None (reason in ``why``) if it cannot be cached."""
        if task_id in self.keys:
            return self.keys[task_id]
        key: TaskKey | None = None
        try:
            key = await self._make_key(task_id)
        except (UncacheableError, OSError, ValueError) as error:
            self.why[task_id] = (
                str(error) if isinstance(error, UncacheableError) else one_line(error)
            )
        self.keys[task_id] = key
        line: dict[str, Any] = {"task": task_id}
        if key is None:
            line["uncacheable"] = self.why[task_id]
        else:
            line.update(key=key.digest, fields=dict(key.fields))
        self._note(line)
        return key

    def _note(self, line: Mapping[str, Any]) -> None:
        """Append one line to the run's :data:`KEYS_FILE` (small: one write, no fsync)."""
        path = self.journal.run_dir / KEYS_FILE
        # a diagnostic: a failure to write it is never a reason to stop the run
        with contextlib.suppress(OSError), open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(line, sort_keys=True) + "\n")

    async def _make_key(self, task_id: str) -> TaskKey:
        spec = self.specs[task_id]
        if not self.cacheable[task_id]:
            raise UncacheableError("the plan says cache = false")
        digests: dict[str, str] = {}
        for transfer in spec.inputs:
            digests[transfer.logical_path] = await self._input_digest(task_id, transfer)
        image = await self._image(spec.image)
        return task_key(spec, image=image, inputs=digests, cache_version=self.settings.version)

    async def _input_digest(self, task_id: str, transfer: Transfer) -> str:
        producer = self.writer.get(transfer.logical_path)
        if producer is not None and producer != task_id:
            upstream = await self.key_of(producer)
            if upstream is None:
                raise UncacheableError(
                    f"it reads {transfer.logical_path} from {producer}, "
                    f"which is not cached ({self.why.get(producer)})"
                )
            return f"task:{upstream.digest}"
        if transfer.digest is not None:
            return transfer.digest
        path = local_path_or_none(transfer.uri)
        if path is None:
            raise UncacheableError(
                f"input {transfer.logical_path} has no digest and is not a local file: "
                "declare its digest to cache the task"
            )
        return await asyncio.to_thread(source_digest, path)

    async def _image(self, image: str) -> str:
        if image not in self._images:
            # a pinned reference is its own digest, a trusted tag its text: nothing to ask
            asks = "@" not in image and not self.settings.trust_tags
            resolved = await self.backend.image_digest(image) if asks else None
            self._images[image] = image_identity(
                image, resolved, trust_tags=self.settings.trust_tags
            )
        return self._images[image]

    # -- hits --------------------------------------------------------------------------------

    async def serve(self, ready: list[TaskRecord]) -> list[TaskRecord]:
        """Serve from the cache what it holds; return the ready tasks still to submit.

        A miss is claimed for this run before it is submitted; a task another live run has
        claimed waits (it is looked up again each tick) and is served once that run stored it.
        """
        rest = []
        for record in ready:
            if record.id in self.looked or record.attempts:
                rest.append(record)  # looked up before, or already run once: submit
                continue
            key = await self.key_of(record.id)
            if key is None:
                self.looked.add(record.id)
                rest.append(record)
                continue
            entry, problems = await asyncio.to_thread(self.store.lookup, key)
            for problem in problems:
                self.ledger.emit("cache_miss", f"{record.id}: cached entry dropped: {problem}")
            if entry is not None and await self._use(record, entry):
                self.looked.add(record.id)
                continue
            holder = await asyncio.to_thread(self.store.claim, key.digest, self.journal.run_id)
            if holder is not None and entry is None:
                if record.id not in self.waiting:  # said once per task
                    self.waiting.add(record.id)
                    who = holder.get("run_id", "another run")
                    self.ledger.emit(
                        "cache_wait",
                        f"{record.id} waits: run {who} is computing the same task; it is "
                        "served from the cache once stored",
                        record,
                    )
                continue
            self.looked.add(record.id)
            self.claims[record.id] = key.digest
            rest.append(record)
        return rest

    async def release_finished(self) -> None:
        """Refresh the claims of tasks still running; drop those of tasks that are final."""
        for task_id, key in list(self.claims.items()):
            record = self.journal.tasks[task_id]
            if record.final and (record.state != SUCCEEDED or task_id in self.stored):
                await asyncio.to_thread(self.store.release, key, self.journal.run_id)
                del self.claims[task_id]
            else:
                await asyncio.to_thread(self.store.refresh, key)

    async def _use(self, record: TaskRecord, entry: CacheEntry) -> bool:
        spec = self.specs[record.id]
        places: dict[str, Path] = {}
        for transfer in spec.outputs:
            path = local_path_or_none(transfer.uri)
            if path is None or transfer.logical_path not in entry.outputs:
                return False  # an output we cannot put in place: run the task
            places[transfer.logical_path] = Path(path)
        try:
            await asyncio.to_thread(self.store.materialize, entry, places)
            shared = [
                Transfer(
                    str(places[t.logical_path]),
                    t.logical_path,
                    digest=entry.outputs[t.logical_path],
                )
                for t in spec.outputs
                if t.logical_path in self.readers
            ]
            if shared:  # later tasks read these on the backend's volume
                await self.backend.stage_inputs(shared)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            self.ledger.emit(
                "cache_miss",
                f"{record.id}: serving its cached outputs failed: {one_line(error)}; running it",
            )
            return False
        record.cached = {**entry.origin, "key": entry.key}
        record.outputs_collected = True
        self.stored.add(record.id)
        self.ledger.set_state(record, SUCCEEDED)
        self.ledger.changed(record)
        self.ledger.flush()
        origin = entry.origin.get("run_id", "an earlier run")
        self.ledger.emit("cached", f"{record.id} served from the cache (from {origin})", record)
        return True

    # -- stores ------------------------------------------------------------------------------

    async def store_collected(self) -> None:
        """Store every success whose outputs are collected and not yet in the store."""
        for record in self.journal.tasks.values():
            if (
                record.id in self.stored
                or record.state != SUCCEEDED
                or not record.outputs_collected
                or record.cached
            ):
                continue
            self.stored.add(record.id)
            key = await self.key_of(record.id)
            if key is None:
                continue
            try:
                await asyncio.to_thread(self._put, record, key)
            except Exception as error:
                self.ledger.emit(
                    "cache_store_failed",
                    f"{record.id}: not stored in the cache: {one_line(error)}",
                    record,
                )

    def _put(self, record: TaskRecord, key: TaskKey) -> None:
        if self.store.get(key) is not None:
            return
        outputs: dict[str, tuple[Path, str]] = {}
        for transfer in self.specs[record.id].outputs:
            path = local_path_or_none(transfer.uri)
            if path is None:
                raise ValueError(f"output {transfer.logical_path} is not a local file")
            outputs[transfer.logical_path] = (Path(path), transfer.digest or sha256_file(path))
        origin: Mapping[str, Any] = {
            "run_id": self.journal.run_id,
            "run_dir": str(self.journal.run_dir),
            "task_id": record.id,
            "backend": self.backend.name,
        }
        self.store.put(key, outputs, origin)
