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
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from altar.execution.backend import ExecutionBackend
from altar.execution.cache.key import TaskKey, UncacheableError, image_identity, task_key
from altar.execution.cache.settings import CacheSettings
from altar.execution.cache.store import CacheEntry, CacheStore, default_store_dir
from altar.execution.digests.digest import recorded_digest, sha256_file, write_verification_record
from altar.execution.plans.plan import Plan
from altar.execution.run.ledger import Ledger
from altar.execution.run.results import one_line
from altar.execution.state.bulk import collector_paused
from altar.execution.state.journal import SUCCEEDED, Journal, TaskRecord
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
        readers = {t.logical_path for task in plan.tasks for t in task.spec.inputs}
        #: outputs a later task reads, by task (staged onto the backend when served)
        self.shared = {
            task.id: paths
            for task in plan.tasks
            if (paths := [t.logical_path for t in task.spec.outputs if t.logical_path in readers])
        }
        self._place: dict[str, dict[str, str] | None] = {}
        self.keys: dict[str, TaskKey | None] = {}
        self.why: dict[str, str] = {}
        self.looked: set[str] = set()
        self.stored: set[str] = set()
        self.waiting: set[str] = set()  # tasks another run is computing (said once)
        self.claims: dict[str, str] = {}  # task id -> key this run has claimed
        self._images: dict[str, str] = {}
        #: each local input's digest (or why it has none), read once per run for all its
        #: readers, as the run stages each input once
        self._sources: dict[str, str | OSError | ValueError] = {}
        self._notes: list[str] = []  # KEYS_FILE lines not yet written
        self._scanned = False  # store_collected has looked at every task once

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
        task = json.dumps(task_id)
        if key is None:
            why = json.dumps(self.why[task_id])
            self._notes.append(f'{{"task":{task},"uncacheable":{why}}}\n')
        else:  # the key's own canonical text: a key is encoded once
            self._notes.append(f'{{"fields":{key.canonical},"key":"{key.digest}","task":{task}}}\n')
        return key

    def _flush_notes(self) -> None:
        """Append the queued lines in one write (no fsync: a diagnostic, kept if it can be)."""
        if not self._notes:
            return
        text, self._notes = "".join(self._notes), []
        path = self.journal.run_dir / KEYS_FILE
        # a failure to write it is never a reason to stop the run
        with contextlib.suppress(OSError), open(path, "a", encoding="utf-8") as handle:
            handle.write(text)

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
        if path not in self._sources:
            await asyncio.to_thread(self._read_sources, [path])
        found = self._sources[path]
        if not isinstance(found, str):
            raise found
        return found

    def _source_paths(self, task_ids: list[str]) -> list[str]:
        """The local inputs without a digest the tasks' keys need and no one has read yet."""
        paths: dict[str, None] = {}
        for task_id in task_ids:
            if task_id in self.keys or not self.cacheable[task_id]:
                continue
            for transfer in self.specs[task_id].inputs:
                producer = self.writer.get(transfer.logical_path)
                if transfer.digest is not None or producer not in (None, task_id):
                    continue  # its digest is declared, or it is another task's key
                path = local_path_or_none(transfer.uri)
                if path is not None and path not in self._sources:
                    paths[path] = None
        return list(paths)

    def _read_sources(self, paths: list[str]) -> None:
        """In a thread: each local input's digest (a stat and its record), or why not."""
        for path in paths:
            try:
                self._sources[path] = source_digest(path)
            except (OSError, ValueError) as error:  # what key_of says and goes on from
                self._sources[path] = error

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
        The tick's lookups and links run in one thread call and its hits share one journal
        write: a 10,000-task plan fully cached costs about what reading its run back does.
        """
        # A batch builds a few objects per ready task, all kept to the tick's end: the cyclic
        # collector would walk the run's plan and journal again and again (a third of a
        # 10,000-task cached run's time). Paused for the tick, it collects after.
        with collector_paused():
            return await self._serve(ready)

    async def _serve(self, ready: list[TaskRecord]) -> list[TaskRecord]:
        rest: list[TaskRecord] = []
        candidates: list[tuple[TaskRecord, TaskKey, dict[str, str] | None]] = []
        fresh = [r.id for r in ready if r.id not in self.looked and not r.attempts]
        sources = self._source_paths(fresh)
        if sources:  # the tick's inputs, in one thread call (one hop, not one per input)
            await asyncio.to_thread(self._read_sources, sources)
        for record in ready:
            if record.id in self.looked or record.attempts:
                rest.append(record)  # looked up before, or already run once: submit
                continue
            key = await self.key_of(record.id)
            if key is None:
                self.looked.add(record.id)
                rest.append(record)
                continue
            candidates.append((record, key, self._places(record.id)))
        if not candidates:
            self._flush_notes()
            return rest
        looks = await asyncio.to_thread(self._look, candidates)
        self._flush_notes()
        served = await self._stage_shared([(rec, e) for rec, _, e, _, _ in looks if e])
        for record, key, entry, problems, holder in looks:
            for problem in problems:
                self.ledger.emit("cache_miss", f"{record.id}: {problem}")
            if entry is not None and record.id in served:
                self.looked.add(record.id)
                self._journal_hit(record, entry)
                continue
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
            if entry is None:  # claimed in _look; an entry whose staging failed was not
                self.claims[record.id] = key.digest
            rest.append(record)
        if served:
            self.ledger.flush()  # the tick's hits, journaled together, after their outputs
            for record, _, entry, _, _ in looks:
                if entry is not None and record.id in served:
                    origin = entry.origin.get("run_id", "an earlier run")
                    self.ledger.emit(
                        "cached", f"{record.id} served from the cache (from {origin})", record
                    )
        return rest

    def _places(self, task_id: str) -> dict[str, str] | None:
        """Where each output goes on this machine, by logical path; None if one is remote."""
        if task_id not in self._place:
            places: dict[str, str] = {}
            for transfer in self.specs[task_id].outputs:
                path = local_path_or_none(transfer.uri)
                if path is None:
                    self._place[task_id] = None  # an output we cannot put in place: run it
                    break
                places[transfer.logical_path] = path
            else:
                self._place[task_id] = places
        return self._place[task_id]

    def _look(
        self, candidates: list[tuple[TaskRecord, TaskKey, dict[str, str] | None]]
    ) -> list[tuple[TaskRecord, TaskKey, CacheEntry | None, list[str], dict[str, Any] | None]]:
        """In a thread: each candidate's verified entry put in place, or its claim (a miss).

        Returns (record, key, entry served or None, problems to say, live holder or None).
        """
        looks = []
        for record, key, places in candidates:
            entry, dropped = self.store.lookup(key)
            problems = [f"cached entry dropped: {problem}" for problem in dropped]
            if entry is not None and (places is None or not places.keys() <= entry.outputs.keys()):
                entry = None
            if entry is not None and places is not None:
                try:
                    self.store.materialize(entry, places)
                except Exception as error:
                    problems.append(f"serving its cached outputs failed: {one_line(error)}")
                    entry = None
            holder = None
            if entry is None:
                holder = self.store.claim(key.digest, self.journal.run_id)
            looks.append((record, key, entry, problems, holder))
        self.store.flush_index()  # the tick's index rows learned and dropped: one write each
        return looks

    async def _stage_shared(self, hits: list[tuple[TaskRecord, CacheEntry]]) -> set[str]:
        """Stage the hits' outputs later tasks read onto the backend; the task ids served."""
        shared: list[Transfer] = []
        for record, entry in hits:
            if record.id in self.shared:
                places = self._places(record.id) or {}
                shared += [
                    Transfer(places[path], path, digest=entry.outputs[path])
                    for path in self.shared[record.id]
                ]
        try:
            if shared:  # later tasks read these on the backend's volume
                await self.backend.stage_inputs(shared)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            for record, _ in hits:
                self.ledger.emit(
                    "cache_miss",
                    f"{record.id}: staging its cached outputs failed: {one_line(error)}; "
                    "running it",
                )
            return set()
        return {record.id for record, _ in hits}

    def _journal_hit(self, record: TaskRecord, entry: CacheEntry) -> None:
        """Mark a served hit as a success (durable at the tick's one flush)."""
        record.cached = {**entry.origin, "key": entry.key}
        self.stored.add(record.id)
        self.ledger.set_state(record, SUCCEEDED)
        self.ledger.collected(record)
        self.ledger.changed(record)

    async def release_finished(self) -> None:
        """Refresh the claims of tasks still running; drop those of tasks that are final."""
        for task_id, key in list(self.claims.items()):
            record = self.journal.tasks[task_id]
            if record.final and (record.state != SUCCEEDED or task_id in self.stored):
                await asyncio.to_thread(self.store.release, key, self.journal.run_id)
                del self.claims[task_id]
            else:
                await asyncio.to_thread(self.store.refresh, key)

    # -- stores ------------------------------------------------------------------------------

    async def store_collected(self, collected: Iterable[TaskRecord] | None = None) -> None:
        """Store the successes whose outputs are collected and not yet in the store.

        ``collected``: the tasks collected since the last call; the first call (and one given
        None) looks at every task, so a success an earlier process collected is stored too.
        """
        if collected is None or not self._scanned:
            collected = self.journal.tasks.values()
            self._scanned = True
        for record in collected:
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
        # what earlier ticks stored, a second old now: recorded and indexed for the next run
        if self.store.unsealed:
            await asyncio.to_thread(self._seal)
        self._flush_notes()

    def _seal(self) -> None:
        with contextlib.suppress(OSError):  # records and rows only spare a later run work
            self.store.seal()
            self.store.flush_index()

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
