"""``LocalDockerExecutionBackend``: container tasks on a Docker engine reachable from this host."""

from __future__ import annotations

import asyncio
import os
import re
import sys
import time
from collections.abc import Callable
from typing import ClassVar, TypeVar

from altar.backends.local.checks import check_request
from altar.backends.local.classify import DEADLINE_SLACK_S, start_unknown_failure
from altar.backends.local.events import EventFollower
from altar.backends.local.launch import Launcher
from altar.backends.local.logs import LOG_DIR, LogKeeper
from altar.backends.local.poller import Observation, Poller, missing
from altar.backends.local.render import (
    BACKEND_LABEL,
    BACKEND_LABEL_VALUE,
    RESERVED_LABELS,
    RUN_LABEL,
    contained_host_path,
    host_path,
    render_request,
)
from altar.backends.local.runtime import (
    ContainerNotFoundError,
    DockerRuntime,
    EngineRefusedError,
)
from altar.backends.local.staging import StageAction, Stager, local_path
from altar.backends.local.watchdog import Watchdog
from altar.execution import (
    CONTAINER_MOUNT_ROOT,
    Capacity,
    ContainerTaskSpec,
    ExecutionBackend,
    PathResolver,
    TaskFailure,
    TaskHandle,
    TaskLogs,
    TaskState,
    TaskStatus,
    Transfer,
    UnsupportedCapabilityError,
    gather_bounded,
    mint_handle,
)

__all__ = [
    "DATA_ROOT_ENV",
    "LOG_DIR",
    "LOG_TAIL_LINES",
    "LocalDockerExecutionBackend",
    "tail_lines",
]

DATA_ROOT_ENV = "ALTAR_LOCAL_DATA_ROOT"
LOG_TAIL_LINES = 20
_CONTAINER_ID = re.compile(r"[0-9a-f]{12,64}")
# How engines word a device request they cannot satisfy ('could not select device driver ""
# with capabilities: [[gpu]]', 'nvidia-container-cli: device error: ...'); a GPU task refused
# for anything else (a missing image, a CPU quota) is reported as that.
_GPU_REFUSAL = re.compile(r"gpu|nvidia", re.IGNORECASE)
_T = TypeVar("_T")


def _default_user(data_root: str) -> str | None:
    """On Linux, run as the data root's owner so files tasks write stay the caller's."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        st = os.stat(data_root)
        return f"{st.st_uid}:{st.st_gid}"
    except OSError:
        return f"{os.getuid()}:{os.getgid()}"


def _sdk_runtime(docker_host: str | None) -> DockerRuntime:
    """The real runtime; the docker SDK is imported here, not when this module is."""
    from altar.backends.local.sdk_runtime import DockerSdkRuntime

    return DockerSdkRuntime(docker_host)


class LocalDockerExecutionBackend(ExecutionBackend):
    """Runs each task as one Docker container, through the Docker Engine API.

    Options (keyword-only; ``[backend] options`` in a plan):

    - ``data_root``: host directory mounted at ``/mnt/volume`` (default ``$ALTAR_LOCAL_DATA_ROOT``,
      else ``./.altar-local-data``), made absolute;
    - ``slots``: parallel tasks this host offers (``capacity()``), default 4;
    - ``container_user``: ``uid:gid`` for containers; default on Linux: the data root's owner;
      ``""`` keeps the image's user;
    - ``network``: Docker network mode, default ``"none"`` (no network); e.g. ``"bridge"``;
    - ``docker_host``: engine URL (default ``$DOCKER_HOST``, as the docker CLI reads it);
    - ``gpu_devices``: GPUs this host has, if known; larger requests are refused at submit;
    - ``trust_verification_records``: accept verification records and the staging index
      instead of hashing (default True); False hashes every digest-bearing input every time;
    - ``use_events``: follow the engine's event stream from the first submit or poll on, for
      exit codes, OOM kills and start times as they happen (default True); False inspects each
      finished container;
    - ``watchdog``: also kill containers at their deadline between polls (default True);
    - ``keep_logs``: before ``cleanup`` removes a container, save its stdout and stderr under
      ``<data_root>/.altar-logs/<container id>/`` for :meth:`task_logs` (default True);
    - ``runtime``: a :class:`~altar.backends.local.runtime.DockerRuntime` (tests pass a fake).
    """

    name: ClassVar[str] = "local"
    requires: ClassVar[tuple[str, ...]] = ("docker",)
    stages_directories: ClassVar[bool] = False  # the stager copies single files
    input_digest_verification = "staging"
    #: A resubmit with the same ``altar.submission`` key adopts its container (issue 13).
    adopts_submissions: ClassVar[bool] = True
    # One list request covers every handle, so polling often is cheap; short tasks are then
    # noticed (and their slots refilled) within 50 ms instead of 200 ms.
    poll_interval_s: ClassVar[float] = 0.05

    def __init__(
        self,
        *,
        data_root: str | os.PathLike[str] | None = None,
        slots: int = 4,
        container_user: str | None = None,
        network: str = "none",
        docker_host: str | None = None,
        gpu_devices: int | None = None,
        trust_verification_records: bool = True,
        use_events: bool = True,
        watchdog: bool = True,
        keep_logs: bool = True,
        runtime: DockerRuntime | None = None,
    ) -> None:
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
            raise ValueError(f"slots must be a positive integer, got {slots!r}")
        if gpu_devices is not None and (
            isinstance(gpu_devices, bool) or not isinstance(gpu_devices, int) or gpu_devices < 0
        ):
            raise ValueError(f"gpu_devices must be a non-negative integer, got {gpu_devices!r}")
        if not isinstance(network, str) or not network:
            raise ValueError(f"network must name a Docker network mode, got {network!r}")
        root = data_root if data_root is not None else os.environ.get(DATA_ROOT_ENV)
        self.data_root = os.path.abspath(os.fspath(root or ".altar-local-data"))
        self.slots = slots
        self.container_user = (
            _default_user(self.data_root) if container_user is None else container_user or None
        )
        self.network = network
        self.gpu_devices = gpu_devices
        self.trust_verification_records = trust_verification_records
        self.keep_logs = keep_logs
        self.runtime: DockerRuntime = runtime or _sdk_runtime(docker_host)
        self._poller = Poller(self.runtime, use_events=use_events)
        # Followed from the first submit or poll on (not from here: constructing a backend, as
        # `altar check` does, must not touch the engine).
        self._follower = (
            EventFollower(
                self.runtime, f"{BACKEND_LABEL}={BACKEND_LABEL_VALUE}", self._poller.engine_now
            )
            if use_events
            else None
        )
        self._poller.follower = self._follower
        self._stager = Stager(self.data_root, trust_records=trust_verification_records)
        self._watchdog = Watchdog(self.runtime.kill) if watchdog else None
        self.last_staging: list[tuple[Transfer, StageAction]] = []
        self._launcher = Launcher(self.runtime, self.data_root, self._prepare_outputs)
        self._logs = LogKeeper(self.runtime, self.data_root)

    def __repr__(self) -> str:
        return f"LocalDockerExecutionBackend(data_root={self.data_root!r})"

    @staticmethod
    async def _thread(call: Callable[[], _T]) -> _T:
        return await asyncio.to_thread(call)

    # -- submission ---------------------------------------------------------------------------

    def path_resolver(self) -> PathResolver:
        return PathResolver(CONTAINER_MOUNT_ROOT)

    def _prepare_outputs(self, spec: ContainerTaskSpec) -> None:
        """Remove stale output files, so an earlier run's result is never taken for this one's.

        Output directories are the task's to make, as on every other backend.
        """
        os.makedirs(self.data_root, exist_ok=True)
        for transfer in spec.outputs:
            path = contained_host_path(self.data_root, transfer.logical_path)
            if os.path.islink(path) or os.path.isfile(path):
                os.unlink(path)

    async def submit(self, spec: ContainerTaskSpec) -> TaskHandle:
        """Create and start the spec's container, or adopt the one its submission key names.

        A spec carrying the runner's ``altar.submission`` key gets the container name
        ``altar-<key>``: a second submit of the same key (the retry of an in-doubt submit)
        meets a name conflict and returns a handle to that container in whatever state it is,
        starting it if it was only created and never starting another (issue 13).
        """
        request = render_request(
            spec,
            data_root=self.data_root,
            user=self.container_user,
            network_mode=self.network,
            gpu_devices=self.gpu_devices,
        )
        if self._follower is not None:
            await self._thread(self._follower.ensure_started)  # before the create it must see
        try:
            container_id = await self._thread(lambda: self._launcher.launch(spec, request))
        except EngineRefusedError as error:
            if request.gpu_count and _GPU_REFUSAL.search(error.explanation):
                raise UnsupportedCapabilityError(
                    f"task {spec.kind!r} needs {request.gpu_count} GPU(s) (pool "
                    f"{spec.resources.gpu!r}) but the Docker engine cannot provide them: "
                    f"{error.explanation}. It is not run on CPU instead; run it on a host with "
                    "the NVIDIA container toolkit, or on a backend with GPUs",
                    capability="gpu",
                ) from error
            if error.status == 400:
                raise UnsupportedCapabilityError(
                    f"the Docker engine cannot run task {spec.kind!r} as specified: "
                    f"{error.explanation}"
                ) from error
            raise
        self._launcher.own(spec.labels)
        self._poller.note_exists(container_id, time.time())  # gone after a restart: lost
        if self._launcher.undecided(container_id):
            failure = start_unknown_failure(container_id)
            self._poller.remember(container_id, Observation(TaskState.FAILED, failure))
            return mint_handle(self.name, spec, container_id)
        if self._watchdog is not None and spec.timeout_s is not None:
            # Counted from now, after the container was created (and any image pulled), and a
            # little late: the watchdog must never kill before poll's deadline would.
            self._watchdog.watch(container_id, time.time() + spec.timeout_s + 2 * DEADLINE_SLACK_S)
        return mint_handle(self.name, spec, container_id)

    async def list_submissions(self, run: str) -> list[TaskHandle] | None:
        """One handle per container labelled ``altar.run == run`` (one list request), in any
        state, with its labels minus the backend's own; the runner adopts or removes each."""
        labels = [f"{BACKEND_LABEL}={BACKEND_LABEL_VALUE}", f"{RUN_LABEL}={run}"]
        found = await self._thread(lambda: self.runtime.list_labelled(labels))
        self._launcher.note_run(run)
        return [
            TaskHandle(
                backend=self.name,
                external_id=container.id,
                labels={k: v for k, v in container.labels.items() if k not in RESERVED_LABELS},
            )
            for container in sorted(found, key=lambda c: (c.created, c.id))
        ]

    # -- observation --------------------------------------------------------------------------

    async def poll(self, handles: list[TaskHandle]) -> list[TaskStatus]:
        ids = [h.external_id for h in handles if _CONTAINER_ID.fullmatch(h.external_id)]
        if ids and self._follower is not None:
            # A resumed runner's handles: follow from now on, without making this poll wait.
            self._follower.ensure_started(wait=False)
        observations = await self._thread(lambda: self._poller.observe(ids)) if ids else {}
        statuses = []
        for handle in handles:
            observation = observations.get(handle.external_id) or missing(
                handle.external_id, "not a Docker container id"
            )
            statuses.append(
                TaskStatus(
                    handle,
                    observation.state,
                    observation.failure,
                    started_at=observation.started_at,
                    finished_at=observation.finished_at,
                )
            )
        if self._watchdog is not None:
            self._watchdog.forget(s.handle.external_id for s in statuses if s.state.is_terminal)
        return statuses

    async def capacity(self) -> Capacity:
        """``slots`` minus this backend's started containers on the engine, orphans excepted.

        A container still ``created`` is a submit in flight (submit starts what it creates), and
        the driver already counts its own submits in flight: counting them here too kept a slot
        idle for the whole of each start. One being removed is not counted either. An orphan
        is a container of a run this instance serves (it submitted to it, or listed it) whose
        submission this instance never submitted or adopted: a killed runner's in-doubt
        submit, which the runner adopts (then it counts) or removes (issue 13). Containers
        of other runs and of 0.3.0 runners count as before: they use this host.
        """
        label = f"{BACKEND_LABEL}={BACKEND_LABEL_VALUE}"
        live = await self._thread(lambda: self.runtime.list_live(label))
        started = sum(1 for container in live if self._launcher.counts(container))
        return Capacity(pools={"cpu": max(0, self.slots - started)})

    async def failure_detail(self, handle: TaskHandle) -> str | None:
        """The last :data:`LOG_TAIL_LINES` lines: stdout's tail, then stderr's (issue 15).

        The streams are read apart because the engine orders them only by when it copied them,
        and a merged tail often missed the one error line on stderr; see :func:`tail_lines`.
        """
        if not _CONTAINER_ID.fullmatch(handle.external_id):
            return None
        try:
            tails = await self._thread(
                lambda: self.runtime.log_tails(handle.external_id, LOG_TAIL_LINES)
            )
        except ContainerNotFoundError:
            return None
        lines = tail_lines(tails.stdout.splitlines(), tails.stderr.splitlines(), LOG_TAIL_LINES)
        return "\n".join(lines) if lines else None

    async def task_logs(self, handle: TaskHandle) -> TaskLogs | None:
        """The container's whole stdout and stderr, apart (one logs request) while it exists;
        after ``cleanup`` removed it, what cleanup saved under the data root; else None."""
        container_id = handle.external_id
        if not _CONTAINER_ID.fullmatch(container_id):
            return None
        try:
            streams = await self._thread(lambda: self.runtime.logs(container_id))
        except ContainerNotFoundError:
            return await self._thread(lambda: self._logs.saved(container_id))
        return TaskLogs(streams.stdout, streams.stderr)

    # -- checks (``altar check``, ``altar run --dry-run``) -------------------------------------

    async def check_spec(self, spec: ContainerTaskSpec) -> None:
        """Refuse what :meth:`submit` would: reserved labels, a GPU count above
        ``gpu_devices``, a CPU quota below 0.01 or above the engine's CPUs (one info request,
        only for a spec with a CPU limit), a memory limit below Docker's 6 MB. Creates nothing.

        A GPU request on a host whose GPUs are unknown (``gpu_devices`` unset) is accepted:
        the engine says whether it can provide GPUs only when asked to start a container.
        """
        request = render_request(
            spec,
            data_root=self.data_root,
            user=self.container_user,
            network_mode=self.network,
            gpu_devices=self.gpu_devices,
        )
        await self._thread(lambda: check_request(spec, request, self.runtime.cpu_count))

    async def image_present(self, image: str) -> bool | None:
        """True when the engine has ``image`` (one image inspect), else None: submit pulls a
        missing image, and whether a registry has it is known only by pulling it."""
        present = await self._thread(lambda: self.runtime.image_present(image))
        return True if present else None

    async def image_digest(self, image: str) -> str | None:
        """The engine's image id for the task cache's key (None if the engine lacks it)."""
        return await self._thread(lambda: self.runtime.image_id(image))

    # -- lifecycle ----------------------------------------------------------------------------

    async def cancel(self, handle: TaskHandle) -> None:
        if not _CONTAINER_ID.fullmatch(handle.external_id):
            return
        await self._thread(lambda: self.runtime.remove(handle.external_id))
        if self._watchdog is not None:
            self._watchdog.forget([handle.external_id])
        if self._poller.cached(handle.external_id) is None:
            self._poller.remember(
                handle.external_id,
                Observation(
                    TaskState.FAILED,
                    TaskFailure("cancelled", f"container {handle.external_id} was cancelled"),
                ),
            )

    async def cleanup(self, handles: list[TaskHandle]) -> None:
        """Remove the containers of finished tasks (their outcomes stay known to this instance)."""
        statuses = await self.poll(handles)
        finished = [
            s.handle.external_id
            for s in statuses
            if s.state.is_terminal
            and not (s.failure is not None and s.failure.reason == "container_missing")
        ]
        if self.keep_logs:
            # Saved before the removal: killed in between, the next cleanup saves them again.
            await gather_bounded([asyncio.to_thread(self._logs.save, cid) for cid in finished], 8)
        await gather_bounded([asyncio.to_thread(self.runtime.remove, cid) for cid in finished], 8)
        if self._follower is not None:
            self._follower.forget(finished)

    # -- data ---------------------------------------------------------------------------------

    async def stage_inputs(self, transfers: list[Transfer]) -> None:
        """Copy inputs into the data root, verifying digests (see :mod:`.staging`).

        The engine is asked first: staging for tasks that cannot start is wasted, and an engine
        that cannot be reached is best reported before anything is copied.
        """
        await self._thread(self.runtime.ping)
        unique: dict[str, Transfer] = {}
        for transfer in transfers:
            # Keyed on the destination and the source file, not their spellings: "x", "/x"
            # and "./x" are one destination, and two sources for it would race.
            dest = host_path(self.data_root, transfer.logical_path)
            known = unique.setdefault(dest, transfer)
            if (local_path(known.uri), known.digest) != (local_path(transfer.uri), transfer.digest):
                spelled = (
                    ""
                    if known.logical_path == transfer.logical_path
                    else f" (also spelled {known.logical_path!r})"
                )
                raise ValueError(
                    f"two inputs claim logical path {transfer.logical_path!r}{spelled}: "
                    f"{known.uri!r} and {transfer.uri!r}"
                )
        await self._thread(lambda: os.makedirs(self.data_root, exist_ok=True))
        items = list(unique.values())
        try:
            actions = await gather_bounded(
                [asyncio.to_thread(self._stager.stage, t) for t in items], 4
            )
        finally:
            # Records of fresh copies, once their status-change second is over (core's rule).
            await self._thread(self._stager.settle_records)
        self.last_staging = list(zip(items, actions, strict=True))

    async def collect_outputs(self, transfers: list[Transfer]) -> None:
        await gather_bounded([asyncio.to_thread(self._stager.collect, t) for t in transfers], 4)

    def close(self) -> None:
        """Stop the watchdog and the event stream for good (containers keep running; poll
        still enforces deadlines and finds outcomes, with more requests).

        Optional: both threads are daemons, and the watchdog's ends by itself once nothing is
        left to watch.
        """
        if self._watchdog is not None:
            self._watchdog.stop()
        if self._follower is not None:
            self._follower.stop()

    async def wait_for_exit(self, handles: list[TaskHandle], timeout_s: float) -> bool:
        """Wait until one of ``handles``' containers has ended, or ``timeout_s``; True if one did.

        The engine pushes each ``die`` event through the followed stream, so the waiter wakes
        within milliseconds of an exit rather than at its next poll. False at once when events
        are not followed (``use_events=False``, or the stream is down): poll instead.
        """
        follower = self._follower
        ids = [h.external_id for h in handles]
        if follower is None or not follower.following or not ids:
            return False
        return await self._thread(lambda: follower.wait_for_exit(ids, timeout_s))

    async def await_completion(
        self,
        handles: list[TaskHandle],
        *,
        interval_s: float = 1.0,
        max_interval_s: float = 10.0,
        timeout_s: float | None = None,
    ) -> list[TaskStatus]:
        """As the contract's, but woken by each container's exit instead of sleeping.

        Between polls it waits for a ``die`` event of an open handle (at most ``interval_s``
        when the stream is down, ``max_interval_s`` otherwise), so an exit is noticed as it
        happens; deadlines are still enforced by the polls in between.
        """
        final: dict[int, TaskStatus] = {}
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            open_indexes = [i for i in range(len(handles)) if i not in final]
            if not open_indexes:
                return [final[i] for i in range(len(handles))]
            statuses = await self.poll([handles[i] for i in open_indexes])
            for index, status in zip(open_indexes, statuses, strict=True):
                if status.state.is_terminal:
                    final[index] = status
            if len(final) == len(handles):
                continue
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(
                    f"{len(handles) - len(final)} of {len(handles)} task(s) still open "
                    f"after {timeout_s} s"
                )
            pause = max_interval_s if left is None else min(max_interval_s, left)
            still_open = [handles[i] for i in range(len(handles)) if i not in final]
            if not await self.wait_for_exit(still_open, pause):
                await asyncio.sleep(min(interval_s, pause))


def tail_lines(stdout: list[str], stderr: list[str], budget: int) -> list[str]:
    """At most ``budget`` lines: stdout's last lines, then stderr's, stderr last.

    stderr (where errors go) keeps at least half the budget when both streams are long, and
    either stream takes what the other leaves unused.
    """
    n_err = min(len(stderr), max(budget - len(stdout), budget // 2))
    n_out = min(len(stdout), budget - n_err)
    return stdout[len(stdout) - n_out :] + stderr[len(stderr) - n_err :]
