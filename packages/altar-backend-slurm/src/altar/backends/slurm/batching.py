"""Gathering concurrent submits into job arrays (see :mod:`.arrays` for the array itself).

The runner calls ``submit`` concurrently for every task that is ready at once. Each keyed
submit here renders its task, joins the group of tasks with the same directives, and waits;
a group is submitted when no task joined it for ``window_s``, or when it is full (the
cluster's ``MaxArraySize``, ``array_max``). One sbatch then answers every task of it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from altar.backends.slurm import adoption, arrays, commands
from altar.backends.slurm.render import submission_key
from altar.backends.slurm.runtime import CommandResult
from altar.execution import (
    ContainerTaskSpec,
    ProviderLimitError,
    TaskHandle,
    UnsupportedCapabilityError,
)

if TYPE_CHECKING:
    from altar.backends.slurm.backend import SlurmExecutionBackend

__all__ = ["DEFAULT_ARRAY_MAX", "DEFAULT_ARRAY_WINDOW_S", "ArraySubmitter"]

#: At most this many tasks in one array (and never more than the cluster's MaxArraySize).
DEFAULT_ARRAY_MAX = 1000
#: A group is submitted once no task joined it for this long.
DEFAULT_ARRAY_WINDOW_S = 0.25

_Key = tuple[tuple[str, str | None], ...]
_Outcome = TaskHandle | BaseException


@dataclass
class _Task:
    spec: ContainerTaskSpec
    digest: str
    token: str
    script: str
    done: asyncio.Future[TaskHandle] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


@dataclass
class _Group:
    tasks: list[_Task] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None


class ArraySubmitter:
    """Submits keyed tasks of one backend in arrays; see the module docstring."""

    def __init__(self, backend: SlurmExecutionBackend, *, array_max: int, window_s: float):
        if isinstance(array_max, bool) or not isinstance(array_max, int) or array_max < 1:
            raise ValueError(f"array_max must be a whole number >= 1, got {array_max!r}")
        self.backend = backend
        self.array_max = array_max
        self.window_s = window_s
        self._size: int | None = None  # min(MaxArraySize, array_max), read once; 0: none
        self._reading = threading.Lock()
        self._groups: dict[_Key, _Group] = {}
        self._flushing: set[asyncio.Task[None]] = set()

    def size(self) -> int:
        """How many tasks one array may hold here (0 or 1: arrays are not used). Read once:
        the submits of a ready batch ask at the same time, and one ``scontrol`` answers all."""
        with self._reading:
            if self._size is None:
                cluster = arrays.max_array_size(
                    self.backend.node, timeout_s=self.backend.query_timeout_s
                )
                self._size = min(cluster, self.array_max)
            return self._size

    def applies(self, spec: ContainerTaskSpec) -> bool:
        """Only keyed submissions go in arrays: adoption by key is what keeps them once."""
        return submission_key(spec) is not None

    async def submit(self, spec: ContainerTaskSpec) -> TaskHandle:
        digest, token, script = await asyncio.to_thread(lambda: self.backend._prepare(spec))
        task = _Task(spec, digest, token, script)
        key = arrays.group_key(script)
        group = self._groups.setdefault(key, _Group())
        group.tasks.append(task)
        if group.timer is not None:
            group.timer.cancel()
        if len(group.tasks) >= max(1, self._size or 1):
            self._start(key)
        else:
            group.timer = asyncio.get_running_loop().call_later(self.window_s, self._start, key)
        return await task.done

    def _start(self, key: _Key) -> None:
        group = self._groups.pop(key, None)
        if group is None:
            return
        if group.timer is not None:
            group.timer.cancel()
        flush = asyncio.get_running_loop().create_task(self._flush(group.tasks))
        self._flushing.add(flush)
        flush.add_done_callback(self._flushing.discard)

    async def _flush(self, tasks: list[_Task]) -> None:
        try:
            await self.backend.pace.wait()  # one sbatch for the whole group
            outcomes = await self.backend.reach.watched(lambda: self._submit_all(tasks))
        except BaseException as error:  # every waiting submit learns why, none hangs
            outcomes = [error] * len(tasks)
        for task, outcome in zip(tasks, outcomes, strict=True):
            if task.done.done():
                continue
            if isinstance(outcome, BaseException):
                task.done.set_exception(outcome)
            else:
                task.done.set_result(outcome)

    # -- in a thread --------------------------------------------------------------------------

    def _submit_all(self, tasks: list[_Task]) -> list[_Outcome]:
        """Adopt what an earlier submit left in Slurm, then one array for the rest."""
        backend = self.backend
        outcomes: dict[int, _Outcome] = {}
        dirs = {i: backend._layout(t.token).job_dir for i, t in enumerate(tasks)}
        logs = {i: backend._logs_dir(t.token) for i, t in enumerate(tasks)}
        # Only a task whose directory exists can have been submitted before (a resume): one
        # command for all; Slurm is asked about those only.
        found = arrays.existing(backend.node, [*dirs.values(), *logs.values()])
        marked = {i: m for i, d in dirs.items() if (m := found.get(d)) is not None}
        ids = (
            arrays.array_ids(
                backend.node,
                sorted({name for name, _ in marked.values()}),
                timeout_s=backend.query_timeout_s,
            )
            if marked
            else {}
        )
        for i, task in enumerate(tasks):
            if i in marked and marked[i][0] in ids:
                job_id = f"{ids[marked[i][0]]}_{marked[i][1]}"
                outcomes[i] = backend._handle(job_id, task.token, task.spec)
            elif i not in marked and (dirs[i] in found or logs[i] in found):
                single = adoption.find_existing(backend, task.spec, task.digest)
                if single is not None:
                    outcomes[i] = backend._handle(*single, task.spec)
        fresh = [i for i in range(len(tasks)) if i not in outcomes]
        # (one fresh task goes as a single job: sbatch's own answer is the limit's)
        room = backend.room.free() if len(fresh) > 1 else None
        if room is not None and len(fresh) > max(1, room):
            held = fresh[max(1, room) :]
            fresh = fresh[: max(1, room)]
            for i in held:
                outcomes[i] = ProviderLimitError(
                    "the cluster's submit limit leaves no room for this task now",
                    limit="MaxSubmitJobsPerUser",
                )
        if len(fresh) == 1:
            one = tasks[fresh[0]]
            outcomes[fresh[0]] = _catch(
                lambda: backend._submit_job(one.spec, one.token, one.script)
            )
        elif fresh:
            outcomes.update(self._submit_array([(i, tasks[i]) for i in fresh]))
        for outcome in outcomes.values():
            if isinstance(outcome, TaskHandle):
                backend.tracker.submitted(outcome.external_id.split(":", 1)[0])
        return [outcomes[i] for i in range(len(tasks))]

    def _submit_array(self, items: list[tuple[int, _Task]]) -> dict[int, _Outcome]:
        backend = self.backend
        node = backend.node
        members = [
            arrays.ArrayTask(t.token, t.script, arrays.comment_of(t.script)) for _, t in items
        ]
        name = arrays.array_name([m.token for m in members])
        array_dir = f"{backend.data_root}/{arrays.ARRAYS_DIR}/{name}"
        script = arrays.array_script(
            name=name,
            array_dir=array_dir,
            jobs_dir=backend.scratch,
            shared=arrays.group_key(items[0][1].script),
            size=len(members),
        )
        arrays.write_tasks(node, backend.scratch, name, members)
        result = arrays.submit_array(node, array_dir, members, script)
        if not result.ok:
            error = _refusal(result, limited=backend.room.limit() is not None)
            if not _may_exist(error):  # refused outright: Slurm made no job of it
                commands.remove_dir(node, array_dir)
                for member in members:
                    commands.remove_dir(node, f"{backend.scratch}/{member.token}")
            return {i: error for i, _ in items}
        job_id = result.stdout.strip().split(";", 1)[0]
        if not job_id.isdigit():
            bad = commands.SlurmRefusedError(f"sbatch printed no job id: {result.stdout!r}")
            return {i: bad for i, _ in items}
        return {
            i: backend._handle(f"{job_id}_{index}", task.token, task.spec)
            for index, (i, task) in enumerate(items)
        }


def _catch(call: Callable[[], TaskHandle]) -> _Outcome:
    try:
        return call()
    except Exception as error:
        return error


def _may_exist(error: BaseException) -> bool:
    """After an outage the array may exist after all: its directories must stay."""
    return not isinstance(error, ProviderLimitError | UnsupportedCapabilityError)


def _refusal(result: CommandResult, *, limited: bool) -> BaseException:
    """What sbatch's refusal of the array means, as single submits read it."""
    limit = commands.submit_limit(result.stderr, submit_limited=limited)
    if limit is not None:
        return limit
    try:
        commands.raise_outage("sbatch", result)
    except Exception as error:
        return error
    message = result.stderr.strip() or f"exit status {result.returncode}"
    return UnsupportedCapabilityError(f"sbatch refused the array: {message}")
