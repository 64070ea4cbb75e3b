"""``SlurmExecutionBackend``: each task one Slurm batch job running one container."""

from __future__ import annotations

import asyncio
import hashlib
import os
import posixpath
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from typing import ClassVar

from altar.backends.slurm import adoption, commands, lifecycle, options
from altar.backends.slurm.adoption import EXTERNAL_ID, job_order, run_tag
from altar.backends.slurm.batching import (
    DEFAULT_ARRAY_MAX,
    DEFAULT_ARRAY_WINDOW_S,
    ArraySubmitter,
)
from altar.backends.slurm.completion import (
    DEFAULT_EXIT_READ_TIMEOUT_S,
    DEFAULT_QUEUE_INTERVAL_S,
    Tracker,
    status_of,
)
from altar.backends.slurm.images import ImagePins
from altar.backends.slurm.limits import SubmitPace
from altar.backends.slurm.options import DATA_ROOT_ENV
from altar.backends.slurm.preflight import Preflight
from altar.backends.slurm.reachability import DEFAULT_UNREACHABLE_AFTER_S, Reachability
from altar.backends.slurm.render import (
    ContainerRuntime,
    JobLayout,
    SlurmPlacement,
    batch_script,
    runtime_command,
    spec_hash,
)
from altar.backends.slurm.room import SubmitRoom
from altar.backends.slurm.runtime import LoginNode
from altar.backends.slurm.sdk_runtime import LocalLoginNode, SshLoginNode
from altar.execution import (
    CONTAINER_MOUNT_ROOT,
    LABEL_RUN,
    LABEL_SUBMISSION,
    Capacity,
    ContainerTaskSpec,
    ExecutionBackend,
    PathResolver,
    TaskHandle,
    TaskLogs,
    TaskStatus,
    Transfer,
)
from altar.execution.handles import mint_handle
from altar.execution.uris import local_path

__all__ = [
    "DATA_ROOT_ENV",
    "DEFAULT_MAX_SUBMITS_PER_MINUTE",
    "DEFAULT_UNREACHABLE_AFTER_S",
    "LOG_TAIL_LINES",
    "SCRATCH_DIR",
    "SlurmExecutionBackend",
]

LOG_TAIL_LINES = 20
#: Per-job directories (script, stdout, stderr) under the data root.
SCRATCH_DIR = ".altar-slurm/jobs"
#: Where ``cleanup`` keeps a finished job's stdout, stderr and exit record.
LOGS_DIR = ".altar-slurm/logs"
#: The default pace of sbatch calls: one a second on average, a burst of 60 at most. Each
#: sbatch is a controller RPC that takes its write lock; sites ask for arrays or a pace
#: (some allow 10 a minute), and a faster pace gains nothing where jobs start at about this
#: rate anyway.
DEFAULT_MAX_SUBMITS_PER_MINUTE = 60


class SlurmExecutionBackend(ExecutionBackend):
    """Runs each task as one Slurm batch job that runs one container.

    Options (keyword-only; ``[backend] options`` in a plan):

    - ``ssh_host`` (+ ``ssh_port``, ``ssh_user``, ``ssh_config``, ``ssh_identity_file``): the
      login node to reach over ssh; without it ``sbatch`` and friends run on this machine;
    - ``partition``, ``account``, ``qos``: where jobs are queued (cluster defaults otherwise);
    - ``extra_directives``: more ``#SBATCH`` options from :data:`~.render.ALLOWED_DIRECTIVES`,
      as ``{"--constraint": "avx2", "--exclusive": True}`` (True or None: no value);
    - ``data_root``: a directory on the cluster's shared filesystem, bound at ``/mnt/volume``
      (default ``$ALTAR_SLURM_DATA_ROOT``, else ``./.altar-slurm-data`` on this machine);
    - ``container_runtime``: ``apptainer`` (default), ``podman`` or ``docker``;
      ``runtime_options``: words between the runtime and its subcommand (``["-H", url]``);
      ``runtime_env``: environment of the runtime process only (``CONTAINERS_CONF``), never
      forwarded into the container;
    - ``shared_engine`` (docker/podman): the nodes run containers on the engine the login
      node reaches (one machine, one remote daemon), so the task cache may key a tag by its
      image id and pin the jobs to it (see :mod:`.images`); default False;
    - ``container_user`` (docker/podman): None runs as the job's uid:gid, "" as the image's;
    - ``network`` (docker/podman): default ``"none"``;
    - ``gpu_types``: GPU pool -> Slurm GRES type (True or None: any type); default
      ``{"gpu": True}``;
    - ``trust_verification_records``: the in-task digest check accepts current records;
    - ``login_environment``: jobs load the user's login environment (``--export=NONE``, e.g.
      for ``module load`` in a profile; a login shell per job); default: a clean environment;
    - ``cancel_wait_s``: how long ``cancel`` waits for Slurm to end the job (default 15);
    - ``query_timeout_s``: how long squeue/sacct/scontrol/scancel may take before the poll
      raises ``BackendUnavailableError`` (default 20; None: no bound);
    - ``queue_interval_s``: a poll reads the jobs' own start and exit records every time, and
      asks ``squeue`` about the jobs no record explains at most this often (default 60);
    - ``exit_read_timeout_s``: how long a job that ended normally may keep its exit record
      out of sight (a network filesystem's cache) before accounting decides (default 45);
    - ``max_submits_per_minute``: at most this many submits start in any minute (default
      :data:`DEFAULT_MAX_SUBMITS_PER_MINUTE`; None: unpaced);
    - ``unreachable_after_s``: how long the login node may stay unreachable (ssh fails)
      before a run stops instead of retrying (default 300; None: retry for ever); a name
      that does not resolve stops it at once. Slurm's own outages stay transient;
    - ``arrays``: keyed tasks submitted together with equal directives go as one
      ``sbatch --array`` (default True; see :mod:`.arrays`); ``array_max``: at most this
      many tasks an array (default 1000, and never more than the cluster's MaxArraySize);
    - ``runtime``: a :class:`~altar.backends.slurm.runtime.LoginNode` (tests pass a fake);
      ``clock``: the monotonic clock that paces queue queries (tests pass a fake one).

    See :mod:`.completion` for how a poll learns that jobs started and ended.
    """

    name: ClassVar[str] = "slurm"
    input_digest_verification = "task"
    adopts_submissions: ClassVar[bool] = True
    # A poll reads the jobs' records (one command for every handle); squeue is paced apart
    # (queue_interval_s), so the runner may poll often and notice an end within 2 s.
    poll_interval_s: ClassVar[float] = 0.5
    max_poll_interval_s: ClassVar[float | None] = 2.0
    # Submits are adopted by key, so the runner may keep a whole array's worth in flight: one
    # sbatch then answers them all (an instance with arrays sets its array_max, or None).
    submit_window: ClassVar[int | None] = DEFAULT_ARRAY_MAX

    def __init__(
        self,
        *,
        ssh_host: str | None = None,
        ssh_port: int | None = None,
        ssh_user: str | None = None,
        ssh_config: str | None = None,
        ssh_identity_file: str | None = None,
        partition: str | None = None,
        account: str | None = None,
        qos: str | None = None,
        extra_directives: Mapping[str, str | bool | None] | None = None,
        data_root: str | os.PathLike[str] | None = None,
        container_runtime: ContainerRuntime = "apptainer",
        runtime_options: list[str] | tuple[str, ...] = (),
        runtime_env: Mapping[str, str] | None = None,
        shared_engine: bool = False,
        container_user: str | None = None,
        network: str = "none",
        gpu_types: Mapping[str, str | bool | None] | None = None,
        trust_verification_records: bool = True,
        login_environment: bool = False,
        cancel_wait_s: float = 15.0,
        query_timeout_s: float | None = commands.DEFAULT_QUERY_TIMEOUT_S,
        queue_interval_s: float = DEFAULT_QUEUE_INTERVAL_S,
        exit_read_timeout_s: float = DEFAULT_EXIT_READ_TIMEOUT_S,
        max_submits_per_minute: int | None = DEFAULT_MAX_SUBMITS_PER_MINUTE,
        unreachable_after_s: float | None = DEFAULT_UNREACHABLE_AFTER_S,
        arrays: bool = True,
        array_max: int = DEFAULT_ARRAY_MAX,
        runtime: LoginNode | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.runtime_options, self.runtime_env = options.runtime_words(
            container_runtime, runtime_options, runtime_env
        )
        if runtime is None:
            runtime = (
                SshLoginNode(
                    ssh_host,
                    user=ssh_user,
                    port=ssh_port,
                    ssh_config=ssh_config,
                    identity_file=ssh_identity_file,
                )
                if ssh_host
                else LocalLoginNode()
            )
        self.node: LoginNode = runtime
        self.data_root = options.data_root(data_root, remote=self.node.remote)
        self.placement = SlurmPlacement(
            partition=partition,
            account=account,
            qos=qos,
            extra_directives=options.extra_directives(extra_directives),
            gpu_types=options.gpu_types(gpu_types),
            login_environment=login_environment,
        )
        self.container_runtime: ContainerRuntime = container_runtime
        self.images = ImagePins(
            runtime=container_runtime,
            runtime_options=self.runtime_options,
            runtime_env=self.runtime_env,
            shared_engine=bool(shared_engine),
        )
        self.container_user = container_user
        self.network = network
        self.trust_verification_records = trust_verification_records
        self.cancel_wait_s = cancel_wait_s
        if query_timeout_s is not None and not query_timeout_s > 0:
            raise ValueError(f"query_timeout_s must be positive or None, got {query_timeout_s!r}")
        self.query_timeout_s = query_timeout_s
        self.queue_interval_s = options.seconds("queue_interval_s", queue_interval_s)
        self.exit_read_timeout_s = options.seconds("exit_read_timeout_s", exit_read_timeout_s)
        self.scratch = f"{self.data_root}/{SCRATCH_DIR}"
        self.tracker = Tracker(
            self.node,
            self.scratch,
            queue_interval_s=self.queue_interval_s,
            exit_read_timeout_s=self.exit_read_timeout_s,
            query_timeout_s=query_timeout_s,
            clock=clock or time.monotonic,
        )
        self.preflight = Preflight(
            self.node,
            self.placement,
            container_runtime=container_runtime,
            query_timeout_s=query_timeout_s,
        )
        self.reach = Reachability(unreachable_after_s)
        #: Jobs whose scancel Slurm accepted (poll reads them cancelled at once).
        self.cancelled: set[str] = set()
        self.pace = SubmitPace(max_submits_per_minute)
        self.room = SubmitRoom(self.node, self.placement, query_timeout_s=query_timeout_s)
        self.arrays = bool(arrays)
        self.batcher = ArraySubmitter(self, array_max=array_max, window_s=DEFAULT_ARRAY_WINDOW_S)
        window = array_max if self.arrays else None  # singles: the runner's own window
        setattr(self, "submit_window", window)  # noqa: B010 (a ClassVar of the contract)

    def __repr__(self) -> str:
        return f"SlurmExecutionBackend(node={self.node!r}, data_root={self.data_root!r})"

    def path_resolver(self) -> PathResolver:
        return PathResolver(CONTAINER_MOUNT_ROOT)

    # -- identity -----------------------------------------------------------------------------

    def _layout(self, token: str) -> JobLayout:
        return JobLayout(self.data_root, f"{self.scratch}/{token}")

    def _ours(self, work_dir: str) -> str | None:
        """The token of a job whose working directory is one of this data root's job dirs."""
        parent, token = posixpath.split(work_dir.rstrip("/"))
        if parent != self.scratch or not EXTERNAL_ID.fullmatch(f"0:{token}"):
            return None
        return token

    def _handle(self, job_id: str, token: str, spec: ContainerTaskSpec) -> TaskHandle:
        return mint_handle(self.name, spec, f"{job_id}:{token}")

    # -- submission ---------------------------------------------------------------------------

    def render(self, spec: ContainerTaskSpec, token: str) -> str:
        """The batch script for ``spec`` in job directory ``token`` (pure, but for the image:
        a tag the task cache resolved runs by its pinned reference)."""
        spec = self.images.pinned(spec)
        layout = self._layout(token)
        command = runtime_command(
            spec,
            runtime=self.container_runtime,
            layout=layout,
            runtime_options=self.runtime_options,
            runtime_env=self.runtime_env,
            container_user=self.container_user,
            network=self.network,
        )
        return batch_script(
            spec,
            layout=layout,
            placement=self.placement,
            command=command,
            runtime=self.container_runtime,
            trust_records=self.trust_verification_records,
        )

    async def check_backend(self) -> list[tuple[str, str]]:
        """The login node answers, the partition exists, the container runtime is there.

        An unreachable login node is one problem, and a named partition is reported as not
        checked (so a wrong one is not taken for a good one); each task is still checked for
        what needs no Slurm (its time limit, GPU pool, directives)."""
        return await asyncio.to_thread(self.preflight.check_backend)

    def _prepare(self, spec: ContainerTaskSpec) -> tuple[str, str, str]:
        """(spec hash, job token, batch script), or the refusal :meth:`submit` would meet.

        The one validation both :meth:`check_spec` and :meth:`submit` run, so they cannot
        drift: the script renders (exact argv/env, GPU pool, directives) and the time limit
        fits the partition (one read-only ``scontrol``).
        """
        digest = spec_hash(spec)
        # A keyed submission always gets the same directory under this data root, so the retry
        # of a submit that met an outage reuses the one it left instead of leaving it behind.
        # The data root is part of it: the token also names Docker/Podman containers, which an
        # engine shared by several data roots must not see twice.
        key = spec.labels.get(LABEL_SUBMISSION)
        unique = (
            hashlib.sha256(f"{self.scratch}\0{key}".encode()).hexdigest()[:8]
            if key
            else secrets.token_hex(4)
        )
        token = f"{run_tag(spec.labels.get(LABEL_RUN))}-{digest[:16]}-{unique}"
        script = self.render(spec, token)  # refuses what cannot be represented, first
        self.preflight.check_timeout(spec)
        return digest, token, script

    async def image_digest(self, image: str) -> str | None:
        """The image id the jobs will run ``image`` as, pinned for them (see :mod:`.images`)."""
        return await asyncio.to_thread(self.images.resolve, self.node, image)

    async def check_spec(self, spec: ContainerTaskSpec) -> None:
        """Refuse what :meth:`submit` would (see :meth:`_prepare`), and a GPU request the
        partition's nodes have no GRES for; creates nothing."""
        unreachable = self.preflight.unreachable
        if unreachable is None:
            await asyncio.to_thread(lambda: self._prepare(spec))
            await asyncio.to_thread(self.preflight.check_gres, spec)
            return
        # check_backend found Slurm unreachable: refuse what needs no Slurm, without waiting.
        self.render(spec, "check")
        raise unreachable

    def _submit(self, spec: ContainerTaskSpec) -> TaskHandle:
        digest, token, script = self._prepare(spec)
        existing = adoption.earlier(self, spec, digest, token)
        if existing is not None:
            self.tracker.submitted(existing[0])
            return self._handle(*existing, spec)
        return self._submit_job(spec, token, script)

    def _submit_job(self, spec: ContainerTaskSpec, token: str, script: str) -> TaskHandle:
        """One sbatch for one task (prepared by :meth:`_prepare`)."""
        job_id = commands.submit(
            self.node,
            self._layout(token).job_dir,
            script,
            gpu=spec.resources.gpu is not None,
            submit_limited=self.room.limit() is not None,
        )
        self.tracker.submitted(job_id)
        return self._handle(job_id, token, spec)

    async def submit(self, spec: ContainerTaskSpec) -> TaskHandle:
        """Submit (or adopt) the task's job, at the pace ``max_submits_per_minute`` allows.

        A refusal for now (a submit limit, a controller taking no jobs) raises
        :class:`~altar.execution.ProviderLimitError`: nothing was submitted, no retry is due.
        """
        if self.arrays and self.batcher.applies(spec):
            size = await self.reach.watched(self.batcher.size)
            if size > 1:
                handle = await self.batcher.submit(spec)
                self._count_live(handle)
                return handle
        await self.pace.wait()
        handle = await self.reach.watched(lambda: self._submit(spec))
        self._count_live(handle)
        return handle

    def _count_live(self, handle: TaskHandle) -> None:
        match = EXTERNAL_ID.fullmatch(handle.external_id)
        if match is not None:  # counted here, in the loop's thread, as capacity() reads it
            self.room.live(match.group(1))

    # -- observation --------------------------------------------------------------------------

    async def poll(self, handles: list[TaskHandle]) -> list[TaskStatus]:
        matches = [m for h in handles if (m := EXTERNAL_ID.fullmatch(h.external_id))]
        jobs = {
            m.group(1): m.group(2) for m in sorted(matches, key=lambda m: job_order(m.group(1)))
        }
        observations = (
            await self.reach.watched(lambda: self.tracker.observe(jobs), poll=True) if jobs else {}
        )
        statuses = [
            status_of(h, m and observations[m.group(1)], cancelled=self.cancelled)
            for h in handles
            for m in [EXTERNAL_ID.fullmatch(h.external_id)]
        ]
        self.room.seen(
            live=[j for s in statuses if not s.state.is_terminal and (j := _job_id(s.handle))],
            ended=[j for s in statuses if s.state.is_terminal and (j := _job_id(s.handle))],
        )
        return statuses

    async def capacity(self) -> Capacity:
        """What the site's submit limit leaves (``sacctmgr``, read once; the live jobs counted
        from this backend's own submits and polls), the same for every pool. Unknown (empty)
        when no limit applies: Slurm queues what it cannot start yet. Raises
        :class:`LoginNodeLostError` once the login node is lost (see :mod:`.reachability`)."""
        self.reach.raise_if_lost()  # the runner asks before each submit: a lost node stops it
        if self.room.due():  # a read of the login node: it counts for its reachability
            limit = await self.reach.watched(self.room.limit)
        else:  # the cached limits: no answer from the node, so none to count
            limit = self.room.limit()
        if limit is None:
            return Capacity()
        free = self.room.free() or 0
        return Capacity({pool: free for pool in ("cpu", *self.placement.gpu_types)})

    # -- logs ---------------------------------------------------------------------------------

    async def failure_detail(self, handle: TaskHandle) -> str | None:
        match = EXTERNAL_ID.fullmatch(handle.external_id)
        if match is None:
            return None
        layout = self._layout(match.group(2))
        text = await asyncio.to_thread(
            lambda: commands.tail(self.node, [layout.stdout, layout.stderr], LOG_TAIL_LINES)
        )
        lines = text.splitlines()[-LOG_TAIL_LINES:]
        return "\n".join(lines) if lines else None

    def _logs_dir(self, token: str) -> str:
        return f"{self.data_root}/{LOGS_DIR}/{token}"

    def _task_logs(self, token: str) -> TaskLogs | None:
        for directory in (self._layout(token).job_dir, self._logs_dir(token)):
            stdout = commands.read_text(self.node, f"{directory}/stdout")
            stderr = commands.read_text(self.node, f"{directory}/stderr")
            if stdout is not None or stderr is not None:
                return TaskLogs(stdout or "", stderr or "")
        return None

    async def task_logs(self, handle: TaskHandle) -> TaskLogs | None:
        """The job's whole stdout and stderr: from its job directory while it runs, from
        the logs ``cleanup`` kept after it ended; None when neither exists."""
        match = EXTERNAL_ID.fullmatch(handle.external_id)
        if match is None:
            return None
        token = match.group(2)
        return await asyncio.to_thread(lambda: self._task_logs(token))

    async def list_submissions(self, run: str) -> list[TaskHandle] | None:
        """One handle per job of ``run`` that this data root's jobs directory holds."""
        return await self.reach.watched(lambda: adoption.list_jobs(self, run))

    # -- lifecycle ----------------------------------------------------------------------------

    async def cancel(self, handle: TaskHandle) -> None:
        match = EXTERNAL_ID.fullmatch(handle.external_id)
        if match is not None:
            await asyncio.to_thread(lifecycle.cancel_job, self, match.group(1), match.group(2))

    async def cleanup(self, handles: list[TaskHandle]) -> None:
        """Remove the job directories of finished tasks (never a running job's, nor others')."""
        await lifecycle.cleanup(self, handles)

    # -- data ---------------------------------------------------------------------------------

    def _host_path(self, logical_path: str) -> str:
        return self._layout("-").host_path(logical_path)

    async def stage_inputs(self, transfers: list[Transfer]) -> None:
        """Copy inputs to the data root (rsync over ssh: only what differs).

        Digests are not checked here: each job checks its own inputs on the cluster.
        """
        moves = _unique(
            (local_path(t.uri, backend=self.name), self._host_path(t.logical_path))
            for t in transfers
        )
        for source, destination in moves:
            await asyncio.to_thread(lambda s=source, d=destination: self.node.push(s, d))  # type: ignore[misc]

    async def collect_outputs(self, transfers: list[Transfer]) -> None:
        for transfer in transfers:
            source = self._host_path(transfer.logical_path)
            destination = local_path(transfer.uri, backend=self.name)
            await asyncio.to_thread(lambda s=source, d=destination: self.node.pull(s, d))  # type: ignore[misc]


def _job_id(handle: TaskHandle) -> str:
    match = EXTERNAL_ID.fullmatch(handle.external_id)
    return "" if match is None else match.group(1)


def _unique(moves: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    seen: dict[str, str] = {}
    for source, destination in moves:
        known = seen.setdefault(destination, source)
        if os.path.abspath(known) != os.path.abspath(source):
            raise ValueError(f"two inputs claim {destination!r}: {known!r} and {source!r}")
    return [(s, d) for d, s in seen.items()]
