"""``SlurmExecutionBackend``: each task one Slurm batch job running one container."""

from __future__ import annotations

import asyncio
import hashlib
import os
import posixpath
import re
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from typing import ClassVar, TypeVar

from altar.backends.slurm import arrays, commands
from altar.backends.slurm.batching import (
    DEFAULT_ARRAY_MAX,
    DEFAULT_ARRAY_WINDOW_S,
    ArraySubmitter,
)
from altar.backends.slurm.classify import ExitRecord, Observation, from_queue, missing
from altar.backends.slurm.completion import (
    DEFAULT_EXIT_READ_TIMEOUT_S,
    DEFAULT_QUEUE_INTERVAL_S,
    Tracker,
)
from altar.backends.slurm.images import ImagePins
from altar.backends.slurm.limits import SiteLimits, SubmitPace, read_limits
from altar.backends.slurm.render import (
    CONTAINER_RUNTIMES,
    ContainerRuntime,
    JobLayout,
    SlurmPlacement,
    batch_script,
    job_name,
    parse_comment,
    runtime_command,
    spec_hash,
    submission_key,
)
from altar.backends.slurm.runtime import (
    LoginNode,
    LoginNodeLostError,
    LoginNodeUnknownError,
    LoginNodeUnreachableError,
)
from altar.backends.slurm.sdk_runtime import LocalLoginNode, SshLoginNode
from altar.execution import (
    CONTAINER_MOUNT_ROOT,
    LABEL_RUN,
    LABEL_SUBMISSION,
    BackendUnavailableError,
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

DATA_ROOT_ENV = "ALTAR_SLURM_DATA_ROOT"
LOG_TAIL_LINES = 20
#: How long the login node may stay unreachable before a run stops (``unreachable_after_s``).
DEFAULT_UNREACHABLE_AFTER_S = 300.0
_T = TypeVar("_T")
#: Per-job directories (script, stdout, stderr) under the data root.
SCRATCH_DIR = ".altar-slurm/jobs"
#: Where ``cleanup`` keeps a finished job's stdout, stderr and exit record.
LOGS_DIR = ".altar-slurm/logs"
#: ``JOBID:token``; an array element's job id is ``ARRAYID_INDEX``.
_EXTERNAL_ID = re.compile(r"(\d+(?:_\d+)?):([0-9a-f]{16}-[0-9a-f]{16}-[0-9a-f]{8})")
#: The default pace of sbatch calls: one a second on average, a burst of 60 at most. Each
#: sbatch is a controller RPC that takes its write lock; sites ask for arrays or a pace
#: (some allow 10 a minute), and a faster pace gains nothing where jobs start at about this
#: rate anyway.
DEFAULT_MAX_SUBMITS_PER_MINUTE = 60
#: A job no poll has mentioned for this long no longer counts against the submit limit (its
#: handle was given up): a stale count must never hold the run back for ever.
_LIVE_HORIZON_S = 600.0
#: How soon ``capacity()`` asks sacctmgr again after it could not answer.
_LIMITS_RETRY_S = 300.0


def _run_tag(run: str | None) -> str:
    import hashlib

    return hashlib.sha256((run or "").encode()).hexdigest()[:16]


def _job_order(job_id: str) -> tuple[int, int]:
    """Sort key of a job id, ``12`` or an array element's ``12_3``."""
    base, _, index = job_id.partition("_")
    return int(base), int(index or -1)


def _directives(
    value: Mapping[str, str | bool | None] | Iterable[tuple[str, str | bool | None]] | None,
) -> tuple[tuple[str, str | None], ...]:
    """``{"--constraint": "avx2", "--exclusive": true}``: ``true`` (TOML has no null) or None
    writes a valueless directive; ``false`` leaves the option out."""
    if value is None:
        return ()
    items = list(value.items()) if isinstance(value, Mapping) else list(value)
    pairs: list[tuple[str, str | None]] = []
    for item in items:
        option, directive = item
        if directive is False:
            continue
        if directive is True:
            directive = None
        if not isinstance(option, str) or not (directive is None or isinstance(directive, str)):
            raise ValueError(
                f"extra_directives: {item!r} is not an option and a string value "
                "(true for a directive without a value)"
            )
        pairs.append((option if option.startswith("--") else f"--{option}", directive))
    return tuple(pairs)


def _gpu_types(value: Mapping[str, str | bool | None] | None) -> dict[str, str | None]:
    """GPU pool -> GRES type; ``true`` (TOML has no null) or None: any type of the pool."""
    if value is None:
        return {"gpu": None}
    pools: dict[str, str | None] = {}
    for pool, kind in value.items():
        if kind is True or kind is None:
            pools[pool] = None
        elif isinstance(kind, str) and kind:
            pools[pool] = kind
        else:
            raise ValueError(
                f"gpu_types.{pool}: {kind!r} is not a GRES type; give a type such as "
                '"a100", or true for any type'
            )
    return pools


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
        if container_runtime not in CONTAINER_RUNTIMES:
            raise ValueError(
                f"container_runtime must be one of {', '.join(CONTAINER_RUNTIMES)}, "
                f"got {container_runtime!r}"
            )
        if not all(isinstance(word, str) for word in runtime_options):
            raise ValueError("runtime_options must be a list of strings")
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
        root = data_root if data_root is not None else os.environ.get(DATA_ROOT_ENV)
        if root is None and self.node.remote:
            raise ValueError(
                "the slurm backend over ssh needs data_root: an absolute directory on the "
                "cluster's shared filesystem"
            )
        root_text = os.fspath(root or ".altar-slurm-data")
        if self.node.remote:
            if not posixpath.isabs(root_text):
                raise ValueError(f"data_root {root_text!r} must be absolute on the cluster")
            self.data_root = posixpath.normpath(root_text)
        else:
            self.data_root = os.path.abspath(root_text)
        self.placement = SlurmPlacement(
            partition=partition,
            account=account,
            qos=qos,
            extra_directives=_directives(extra_directives),
            gpu_types=_gpu_types(gpu_types),
            login_environment=login_environment,
        )
        self.container_runtime: ContainerRuntime = container_runtime
        self.runtime_options = list(runtime_options)
        self.runtime_env = dict(runtime_env or {})
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in self.runtime_env.items()):
            raise ValueError("runtime_env must map names to string values")
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
        for option, value in (
            ("queue_interval_s", queue_interval_s),
            ("exit_read_timeout_s", exit_read_timeout_s),
        ):
            if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
                raise ValueError(f"{option} must be a number of seconds >= 0, got {value!r}")
        self.queue_interval_s = float(queue_interval_s)
        self.exit_read_timeout_s = float(exit_read_timeout_s)
        self.scratch = f"{self.data_root}/{SCRATCH_DIR}"
        self.tracker = Tracker(
            self.node,
            self.scratch,
            queue_interval_s=self.queue_interval_s,
            exit_read_timeout_s=self.exit_read_timeout_s,
            query_timeout_s=query_timeout_s,
            clock=clock or time.monotonic,
        )
        self._max_time: tuple[int | None] | None = None
        self._gres: list[dict[tuple[str, str | None], int]] | None = None
        self._unreachable: BackendUnavailableError | None = None
        if unreachable_after_s is not None and not unreachable_after_s >= 0:
            raise ValueError(
                f"unreachable_after_s must be zero or more, or None, got {unreachable_after_s!r}"
            )
        self.unreachable_after_s = unreachable_after_s
        self._lost_since: float | None = None
        self._lost_error: LoginNodeUnreachableError | None = None
        self._cancelled: set[str] = set()
        self.pace = SubmitPace(max_submits_per_minute)
        # The site's limits (read once; None: Slurm cannot tell) and when to read them again
        # after sacctmgr did not answer.
        self._limits: SiteLimits | None = None
        self._limits_at: float | None = None
        # Jobs of this backend that count against a submit limit: job id -> when a submit or
        # a poll last saw it live.
        self._live: dict[str, float] = {}
        self.arrays = bool(arrays)
        self.batcher = ArraySubmitter(self, array_max=array_max, window_s=DEFAULT_ARRAY_WINDOW_S)

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
        if parent != self.scratch or not _EXTERNAL_ID.fullmatch(f"0:{token}"):
            return None
        return token

    def _handle(self, job_id: str, token: str, spec: ContainerTaskSpec) -> TaskHandle:
        return mint_handle(self.name, spec, f"{job_id}:{token}")

    def _find_existing(self, spec: ContainerTaskSpec, digest: str) -> tuple[str, str] | None:
        """An earlier job of this submission to adopt: (job id, token), or None.

        A keyed spec adopts its job in any state (the exactly-once contract); a spec without
        a key adopts only a job of the same spec hash that is still pending or running.
        """
        name = job_name(spec, digest)
        keyed = submission_key(spec) is not None
        found: list[tuple[int, str]] = []
        for row in commands.queue(self.node, names=[name], timeout_s=self.query_timeout_s):
            token = self._ours(row.work_dir)
            if token is None or row.name != name:
                continue
            if not keyed:
                parsed = parse_comment(row.comment)
                observed = from_queue(row)
                if parsed is None or parsed[0] != digest:
                    continue
                if observed is None or observed.state.is_terminal:
                    continue
            found.append((int(row.job_id), token))
        if not found and keyed:
            for acct in commands.accounting(
                self.node, names=[name], steps=False, timeout_s=self.query_timeout_s
            ):
                token = self._ours(acct.work_dir)
                if token is not None and acct.name == name and acct.job_id.isdigit():
                    found.append((int(acct.job_id), token))
        if not found:
            return None
        job_id, token = max(found)
        return str(job_id), token

    # -- submission ---------------------------------------------------------------------------

    def _check_timeout(self, spec: ContainerTaskSpec) -> None:
        if spec.timeout_s is None:
            return
        if self._max_time is None:
            self._max_time = (
                commands.max_time_s(
                    self.node, self.placement.partition, timeout_s=self.query_timeout_s
                ),
            )
        (cap,) = self._max_time
        if cap is not None and spec.timeout_s > cap:
            where = self.placement.partition or "the default partition"
            raise UnsupportedCapabilityError(
                f"timeout_s={spec.timeout_s} exceeds {where}'s MaxTime of {cap} s; "
                f"use timeout_s <= {cap} or a partition that allows longer jobs",
                capability="timeout",
            )

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

    def _check_backend(self) -> list[tuple[str, str]]:
        problems: list[tuple[str, str]] = []
        try:
            self._max_time = (
                commands.max_time_s(
                    self.node, self.placement.partition, timeout_s=self.query_timeout_s
                ),
            )
        except LoginNodeUnreachableError as error:
            self._unreachable = error
            if self.node.remote:
                problems.append(("ssh_host", f"{error}; check ssh_host, ssh_port and ssh_user"))
            else:
                problems.append(
                    ("ssh_host", f"{error}; run on a Slurm login node, or set ssh_host to one")
                )
            if self.placement.partition is not None:
                # Named, so the user expects it checked: say it was not, rather than nothing.
                problems.append(
                    (
                        "partition",
                        f"{self.placement.partition!r} not checked: the login node cannot be "
                        "reached (above); `sinfo --summarize` on the cluster lists its partitions",
                    )
                )
            return problems
        except BackendUnavailableError as error:
            self._unreachable = error
            return [("partition", f"not checked, Slurm did not answer: {error}")]
        except UnsupportedCapabilityError as error:
            self._max_time = (None,)  # said once here, not again for every task
            problems.append(("partition", str(error)))
        found = self.node.run(["sh", "-c", 'command -v -- "$1"', "sh", self.container_runtime])
        if not found.ok:
            problems.append(
                (
                    "container_runtime",
                    f"{self.container_runtime!r} is not on the login node's PATH; install it "
                    "or set container_runtime to one the cluster has",
                )
            )
        return problems

    async def check_backend(self) -> list[tuple[str, str]]:
        """The login node answers, the partition exists, the container runtime is there.

        An unreachable login node is one problem, and a named partition is reported as not
        checked (so a wrong one is not taken for a good one); each task is still checked for
        what needs no Slurm (its time limit, GPU pool, directives)."""
        return await asyncio.to_thread(self._check_backend)

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
        token = f"{_run_tag(spec.labels.get(LABEL_RUN))}-{digest[:16]}-{unique}"
        script = self.render(spec, token)  # refuses what cannot be represented, first
        self._check_timeout(spec)
        return digest, token, script

    def _check_gres(self, spec: ContainerTaskSpec) -> None:
        """A GPU task's GRES exists on some node of the partition (one ``sinfo``, cached)."""
        pool = spec.resources.gpu
        if pool is None:
            return
        if self._gres is None:
            self._gres = commands.partition_gres(
                self.node, self.placement.partition, timeout_s=self.query_timeout_s
            )
        if not self._gres:
            return  # no such partition (check_backend said so) or no nodes: sbatch decides
        kind = self.placement.gpu_types.get(pool)
        want = spec.resources.count

        def has(group: Mapping[tuple[str, str | None], int]) -> int:
            if kind is None:  # any type: Slurm counts every typed and untyped GPU
                return sum(n for (name, _), n in group.items() if name == "gpu")
            return group.get(("gpu", kind), 0)

        if any(has(group) >= want for group in self._gres):
            return
        offered = sorted(
            {":".join(filter(None, (n, t, str(c)))) for g in self._gres for (n, t), c in g.items()}
        )
        where = repr(self.placement.partition) if self.placement.partition else "the default"
        asked = f"gpu:{kind}:{want}" if kind else f"gpu:{want}"
        raise UnsupportedCapabilityError(
            f"partition {where} has no node with GRES {asked} (its nodes have: "
            f"{', '.join(offered) or 'no GRES'}); use a partition with such GPUs, or map pool "
            f"{pool!r} in gpu_types to a GRES type it has",
            capability="gpu",
        )

    async def image_digest(self, image: str) -> str | None:
        """The image id the jobs will run ``image`` as, pinned for them (see :mod:`.images`)."""
        return await asyncio.to_thread(self.images.resolve, self.node, image)

    async def check_spec(self, spec: ContainerTaskSpec) -> None:
        """Refuse what :meth:`submit` would (see :meth:`_prepare`), and a GPU request the
        partition's nodes have no GRES for; creates nothing."""
        unreachable = self._unreachable
        if unreachable is None:
            await asyncio.to_thread(lambda: self._prepare(spec))
            await asyncio.to_thread(lambda: self._check_gres(spec))
            return
        # check_backend found Slurm unreachable: refuse what needs no Slurm, without waiting.
        self.render(spec, "check")
        raise unreachable

    def _submit(self, spec: ContainerTaskSpec) -> TaskHandle:
        digest, token, script = self._prepare(spec)
        existing = self._earlier(spec, digest, token)
        if existing is not None:
            self.tracker.submitted(existing[0])
            return self._handle(*existing, spec)
        return self._submit_job(spec, token, script)

    def _earlier(self, spec: ContainerTaskSpec, digest: str, token: str) -> tuple[str, str] | None:
        """An earlier job of this submission to adopt (see :meth:`_find_existing`). A keyed
        one can exist only if its job (or kept logs) directory does: one stat first, and
        Slurm is asked only then (a resume); an array's element by its marker."""
        if submission_key(spec) is None:
            return self._find_existing(spec, digest)
        paths = [self._layout(token).job_dir, self._logs_dir(token)]
        found = arrays.existing(self.node, paths)
        if not found:
            return None
        mark = found.get(paths[0])
        if mark is not None:
            ids = arrays.array_ids(self.node, [mark[0]], timeout_s=self.query_timeout_s)
            if mark[0] in ids:
                return f"{ids[mark[0]]}_{mark[1]}", token
        return self._find_existing(spec, digest)

    def _submit_job(self, spec: ContainerTaskSpec, token: str, script: str) -> TaskHandle:
        """One sbatch for one task (prepared by :meth:`_prepare`)."""
        job_id = commands.submit(
            self.node,
            self._layout(token).job_dir,
            script,
            gpu=spec.resources.gpu is not None,
            submit_limited=self._submit_limit() is not None,
        )
        self.tracker.submitted(job_id)
        return self._handle(job_id, token, spec)

    async def submit(self, spec: ContainerTaskSpec) -> TaskHandle:
        """Submit (or adopt) the task's job, at the pace ``max_submits_per_minute`` allows.

        A refusal for now (a submit limit, a controller taking no jobs) raises
        :class:`~altar.execution.ProviderLimitError`: nothing was submitted, no retry is due.
        """
        if self.arrays and self.batcher.applies(spec):
            size = await self._watched(self.batcher.size)
            if size > 1:
                handle = await self.batcher.submit(spec)
                self._count_live(handle)
                return handle
        await self.pace.wait()
        handle = await self._watched(lambda: self._submit(spec))
        self._count_live(handle)
        return handle

    def _count_live(self, handle: TaskHandle) -> None:
        match = _EXTERNAL_ID.fullmatch(handle.external_id)
        if match is not None:  # counted here, in the loop's thread, as capacity() reads it
            self._live[match.group(1)] = time.monotonic()

    def _submit_room(self) -> int | None:
        """How many more jobs the site's submit limit takes now, or None: no limit."""
        limit = self._submit_limit()
        if limit is None:
            return None
        horizon = time.monotonic() - _LIVE_HORIZON_S
        return max(0, limit[0] - sum(1 for seen in self._live.values() if seen >= horizon))

    # -- observation --------------------------------------------------------------------------

    async def poll(self, handles: list[TaskHandle]) -> list[TaskStatus]:
        matches = [m for h in handles if (m := _EXTERNAL_ID.fullmatch(h.external_id))]
        jobs = {
            m.group(1): m.group(2) for m in sorted(matches, key=lambda m: _job_order(m.group(1)))
        }
        observations = (
            await self._watched(lambda: self.tracker.observe(jobs), poll=True) if jobs else {}
        )
        statuses = []
        for handle in handles:
            match = _EXTERNAL_ID.fullmatch(handle.external_id)
            record: ExitRecord | None = None
            if match is None:
                observation = missing(handle.external_id)
            else:
                observation, record = observations[match.group(1)]
                if match.group(1) in self._cancelled and not observation.state.is_terminal:
                    # scancel was accepted; Slurm is still tearing the job down.
                    observation = Observation(
                        TaskState.FAILED,
                        _cancelled_failure(match.group(1)),
                    )
            # The script's own start and end (compute node clock): the queue wait is not
            # run time. Only for a finished job, whose record the poll read.
            started = finished = None
            if record is not None and observation.state.is_terminal:
                started, finished = record.start, record.end
            statuses.append(
                TaskStatus(
                    handle,
                    observation.state,
                    observation.failure,
                    started_at=None if started is None else float(started),
                    finished_at=None if finished is None else float(finished),
                )
            )
        self._note_live(statuses)
        return statuses

    def _limits_due(self) -> bool:
        """Whether the limits are to be read (never yet, or unknown for a while)."""
        return self._limits_at is None or (
            self._limits is None and time.monotonic() - self._limits_at > _LIMITS_RETRY_S
        )

    def _submit_limit(self) -> tuple[int, str] | None:
        """The live-job limit this backend's jobs are under (read once), or None."""
        if self._limits_due():
            self._limits_at = time.monotonic()
            self._limits = read_limits(self.node, timeout_s=self.query_timeout_s)
        if self._limits is None:
            return None
        return self._limits.submit_limit(
            account=self.placement.account,
            partition=self.placement.partition,
            qos=self.placement.qos,
        )

    def _note_live(self, statuses: list[TaskStatus]) -> None:
        now = time.monotonic()
        for status in statuses:
            match = _EXTERNAL_ID.fullmatch(status.handle.external_id)
            if match is None:
                continue
            if status.state.is_terminal:
                self._live.pop(match.group(1), None)
            else:
                self._live[match.group(1)] = now

    async def capacity(self) -> Capacity:
        """What the site's submit limit leaves (``sacctmgr``, read once; the live jobs counted
        from this backend's own submits and polls), the same for every pool. Unknown (empty)
        when no limit applies: Slurm queues what it cannot start yet. Raises
        :class:`LoginNodeLostError` once the login node is lost (see :meth:`_watched`)."""
        self._raise_if_lost()  # the runner asks before each submit: a lost node stops it here
        if self._limits_due():  # a read of the login node: it counts for its reachability
            limit = await self._watched(self._submit_limit)
        else:  # the cached limits: no answer from the node, so none to count
            limit = self._submit_limit()
        if limit is None:
            return Capacity()
        free = self._submit_room() or 0
        return Capacity({pool: free for pool in ("cpu", *self.placement.gpu_types)})

    # -- reachability -------------------------------------------------------------------------

    async def _watched(self, call: Callable[[], _T], *, poll: bool = False) -> _T:
        """``call`` in a thread, remembering since when the login node has not answered.

        An unreachable login node is transient (BackendUnavailableError) until it has not
        answered for ``unreachable_after_s``, or at once when its name does not resolve;
        then it is lost: :meth:`capacity`, and :meth:`poll` (``poll``), raise
        :class:`LoginNodeLostError` instead, which is not transient, so the run stops with
        the reason and resumes later. A submit never raises it (that would use an attempt).
        """
        try:
            result = await asyncio.to_thread(call)
        except LoginNodeUnreachableError as error:
            if self._lost_since is None:
                self._lost_since = time.monotonic()
            self._lost_error = error
            if poll:
                self._raise_if_lost()
            raise
        self._lost_since = self._lost_error = None
        return result

    def _raise_if_lost(self) -> None:
        error, since = self._lost_error, self._lost_since
        if error is None or since is None:
            return
        if isinstance(error, LoginNodeUnknownError):
            raise LoginNodeLostError(
                f"the login node's name does not resolve ({error}); check ssh_host, or the "
                "ssh_config alias it names"
            )
        waited = time.monotonic() - since
        if self.unreachable_after_s is not None and waited >= self.unreachable_after_s:
            raise LoginNodeLostError(
                f"the login node has not answered for {waited:.0f} s ({error}); check "
                "ssh_host, ssh_port and ssh_user, or raise unreachable_after_s"
            )

    async def failure_detail(self, handle: TaskHandle) -> str | None:
        match = _EXTERNAL_ID.fullmatch(handle.external_id)
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
        match = _EXTERNAL_ID.fullmatch(handle.external_id)
        if match is None:
            return None
        token = match.group(2)
        return await asyncio.to_thread(lambda: self._task_logs(token))

    async def list_submissions(self, run: str) -> list[TaskHandle] | None:
        """One handle per job of ``run`` that this data root's jobs directory holds."""
        tag = _run_tag(run)

        def collect() -> list[TaskHandle]:
            found: dict[str, TaskHandle] = {}
            members: dict[str, list[tuple[str, str]]] = {}
            for row in commands.queue(self.node, timeout_s=self.query_timeout_s):
                token, comment = self._ours(row.work_dir), row.comment
                if token is None:
                    token, comment = self._member(row.job_id, row.work_dir, members)
                parsed = parse_comment(comment)
                if token is None or parsed is None or parsed[1].get(LABEL_RUN) != run:
                    continue
                found[row.job_id] = TaskHandle(self.name, f"{row.job_id}:{token}", parsed[1])
            for acct in commands.accounting(self.node, steps=False, timeout_s=self.query_timeout_s):
                token = self._ours(acct.work_dir)
                labels = {LABEL_RUN: run}
                if token is None:
                    token, comment = self._member(acct.job_id, acct.work_dir, members)
                    labels = (parse_comment(comment) or ("", labels))[1]
                elif acct.name.startswith("altar-") and not acct.name.startswith("altar-spec-"):
                    labels[LABEL_SUBMISSION] = acct.name.removeprefix("altar-")
                if token is None or not token.startswith(tag) or acct.job_id in found:
                    continue
                found[acct.job_id] = TaskHandle(self.name, f"{acct.job_id}:{token}", labels)
            self._unlisted_members(run, members, found)
            return [found[k] for k in sorted(found, key=_job_order)]

        return await self._watched(collect)

    def _unlisted_members(
        self, run: str, members: dict[str, list[tuple[str, str]]], found: dict[str, TaskHandle]
    ) -> None:
        """Elements of a listed array that Slurm lists no more (one cancelled while pending
        leaves neither squeue nor sacct a row of its own): still jobs of the run."""
        bases: dict[str, str | None] = {}
        for handle in list(found.values()):
            job_id = handle.external_id.split(":", 1)[0]
            base = job_id.split("_", 1)[0]
            if "_" in job_id and base not in bases:
                bases[base] = self._member_dir(handle, members)
        for base, work_dir in bases.items():
            for index, (token, comment) in enumerate(members.get(work_dir or "", [])):
                parsed = parse_comment(comment)
                job_id = f"{base}_{index}"
                if job_id in found or parsed is None or parsed[1].get(LABEL_RUN) != run:
                    continue
                found[job_id] = TaskHandle(self.name, f"{job_id}:{token}", parsed[1])

    @staticmethod
    def _member_dir(handle: TaskHandle, members: dict[str, list[tuple[str, str]]]) -> str | None:
        token = handle.external_id.split(":", 1)[1]
        return next(
            (d for d, listed in members.items() if any(t == token for t, _ in listed)), None
        )

    def _member(
        self, job_id: str, work_dir: str, known: dict[str, list[tuple[str, str]]]
    ) -> tuple[str | None, str]:
        """An array element's (token, comment), from its array's ``tokens`` (read once)."""
        parent = posixpath.dirname(work_dir.rstrip("/"))
        _, _, index = job_id.partition("_")
        if parent != f"{self.data_root}/{arrays.ARRAYS_DIR}" or not index.isdigit():
            return None, ""
        if work_dir not in known:
            known[work_dir] = arrays.tokens_of(self.node, work_dir)
        listed = known[work_dir]
        return listed[int(index)] if int(index) < len(listed) else (None, "")

    # -- lifecycle ----------------------------------------------------------------------------

    def _cancel(self, job_id: str, token: str) -> None:
        if commands.cancel(self.node, job_id, timeout_s=self.query_timeout_s):
            # every instance's poll reads this; a job cancelled while pending writes nothing
            commands.mark_cancelled(self.node, self._layout(token).job_dir)
        self._cancelled.add(job_id)
        deadline = time.monotonic() + self.cancel_wait_s
        pause = 0.2  # doubling to 2 s: a slow teardown costs the controller a few queries
        while time.monotonic() < deadline:
            rows = [
                r
                for r in commands.queue(self.node, job_ids=[job_id], timeout_s=self.query_timeout_s)
                if r.job_id == job_id
            ]
            observed = from_queue(rows[0]) if rows else None
            if observed is None or observed.state.is_terminal:
                return
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(2.0, pause * 2)

    async def cancel(self, handle: TaskHandle) -> None:
        match = _EXTERNAL_ID.fullmatch(handle.external_id)
        if match is not None:
            await asyncio.to_thread(lambda: self._cancel(match.group(1), match.group(2)))

    async def cleanup(self, handles: list[TaskHandle]) -> None:
        """Remove the job directories of finished tasks (never a running job's, nor others')."""
        statuses = await self.poll(handles)
        arrays_cleaned = False
        for status in statuses:
            match = _EXTERNAL_ID.fullmatch(status.handle.external_id)
            if match is None or not status.state.is_terminal:
                continue
            if status.failure is not None and status.failure.reason == "container_missing":
                continue
            token = match.group(2)
            job_dir, logs_dir = self._layout(token).job_dir, self._logs_dir(token)
            await asyncio.to_thread(
                lambda d=job_dir, k=logs_dir: commands.keep_logs_and_remove(self.node, d, k)  # type: ignore[misc]
            )
            arrays_cleaned = arrays_cleaned or "_" in match.group(1)
        if arrays_cleaned:  # an array's directory goes with the last of its tasks
            root = f"{self.data_root}/{arrays.ARRAYS_DIR}"
            await asyncio.to_thread(commands.remove_finished_arrays, self.node, root, self.scratch)

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


def _cancelled_failure(job_id: str) -> TaskFailure:
    return TaskFailure("cancelled", f"job {job_id} was cancelled")


def _unique(moves: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    seen: dict[str, str] = {}
    for source, destination in moves:
        known = seen.setdefault(destination, source)
        if os.path.abspath(known) != os.path.abspath(source):
            raise ValueError(f"two inputs claim {destination!r}: {known!r} and {source!r}")
    return [(s, d) for d, s in seen.items()]
