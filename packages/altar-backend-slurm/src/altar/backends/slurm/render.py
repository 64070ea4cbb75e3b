"""Pure rendering: a task spec becomes a container runtime argv and an sbatch script.

Nothing here runs a command or touches a file; tests compare the output with saved reference
files. Every word of a command line comes from the adapters' single quoting helper
(``shell_command``); every ``#SBATCH`` value from their directive rules (``directive_value``),
which are tested against real ``sbatch``. The only shell text that is not a quoted literal is
the small, fixed set of :data:`EXPANSIONS` (the job's uid/gid, its GPUs).
"""

from __future__ import annotations

import math
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from altar.backends.slurm.naming import (
    COMMENT_PREFIX,
    JOB_NAME_PREFIX,
    comment_for,
    job_name,
    parse_comment,
    spec_hash,
    submission_key,
)
from altar.execution import (
    CONTAINER_MOUNT_ROOT,
    ContainerTaskSpec,
    UnsupportedCapabilityError,
    verify_files_script,
)
from httk.workflow.adapter_runtime.batch import directive_value
from httk.workflow.adapter_runtime.quoting import shell_command

__all__ = [
    "ALLOWED_DIRECTIVES",
    "COMMENT_PREFIX",
    "CONTAINER_RUNTIMES",
    "EXIT_RECORD",
    "EXPANSIONS",
    "INPUT_MISMATCH_STEP",
    "JOB_NAME_PREFIX",
    "MAX_TIME_S",
    "OOM_STEP",
    "RECORD_MARKERS",
    "START_RECORD",
    "START_RECORD_VERSION",
    "ContainerRuntime",
    "JobLayout",
    "RuntimeCommand",
    "SlurmPlacement",
    "batch_script",
    "comment_for",
    "job_name",
    "parse_comment",
    "runtime_command",
    "spec_hash",
    "submission_key",
]

ContainerRuntime = Literal["apptainer", "podman", "docker"]
CONTAINER_RUNTIMES: tuple[ContainerRuntime, ...] = ("apptainer", "podman", "docker")

#: Names of the one-line marker steps a job records before it exits, so that a single
#: ``sacct`` query tells an in-task digest failure or a container OOM kill from an exit code.
INPUT_MISMATCH_STEP = "altar-input-digest-mismatch"
OOM_STEP = "altar-oom-killed"

#: The job's own record of how it ended, in its job directory (see :func:`_record_lines`):
#: ``altar-exit/1 status=N start=S end=E [signalled=1] [marker=NAME]``.
EXIT_RECORD = "exit-status"
#: The record's version tag, the first word of its one line.
EXIT_RECORD_VERSION = "altar-exit/1"
#: Written (atomically) when the script starts: the job runs, without asking squeue.
START_RECORD = "started"
START_RECORD_VERSION = "altar-start/1"
#: The ``marker=`` values of an exit record: what the marker steps tell sacct, told the poll.
RECORD_MARKERS = {INPUT_MISMATCH_STEP: "input-digest-mismatch", OOM_STEP: "oom-killed"}

#: ``#SBATCH`` options a plan may add through ``extra_directives``. Everything the backend
#: sets itself (time, memory, CPUs, GPUs, output, environment export, requeue, name, comment)
#: or that changes what a job id means (arrays, clusters) is not on the list.
ALLOWED_DIRECTIVES = frozenset(
    {
        "--constraint",
        "--reservation",
        "--exclude",
        "--nodelist",
        "--licenses",
        "--tmp",
        "--mail-type",
        "--mail-user",
        "--wckey",
        "--nice",
        "--exclusive",
        "--hint",
        "--mem-bind",
        "--gpu-bind",
    }
)

#: Shell text the script expands at run time, by placeholder.
EXPANSIONS = {
    "job_user": '"$(id -u):$(id -g)"',
    "job_gpus": '"device=${CUDA_VISIBLE_DEVICES:?no GPUs were allocated to this job}"',
}

#: The longest time limit Slurm stores exactly: whole minutes below 2**31 seconds.
MAX_TIME_S = (2**31 // 60 - 1) * 60

_MIB = 2**20
_GIB = 2**30


@dataclass(frozen=True)
class JobLayout:
    """Where one job's files live on the cluster's shared filesystem.

    ``data_root`` is bound at the container's mount root; ``job_dir`` holds the batch script
    and the job's stdout/stderr and is the job's working directory, so ``squeue``/``sacct``
    report it (``%Z``/``WorkDir``) and a handle can be rebuilt from the job alone.
    """

    data_root: str
    job_dir: str

    @property
    def token(self) -> str:
        return posixpath.basename(self.job_dir)

    @property
    def script(self) -> str:
        return f"{self.job_dir}/job.sbatch"

    @property
    def exit_record(self) -> str:
        return f"{self.job_dir}/{EXIT_RECORD}"

    @property
    def stdout(self) -> str:
        return f"{self.job_dir}/stdout"

    @property
    def stderr(self) -> str:
        return f"{self.job_dir}/stderr"

    def host_path(self, logical_path: str) -> str:
        """A logical path under the data root, refused if it leaves it."""
        root = posixpath.normpath(self.data_root)
        path = posixpath.normpath(f"{root}/{logical_path.lstrip('/')}")
        if path != root and not path.startswith(root.rstrip("/") + "/"):
            raise UnsupportedCapabilityError(
                f"logical path {logical_path!r} leaves the data root {self.data_root!r}"
            )
        return path


@dataclass(frozen=True)
class SlurmPlacement:
    """Where and how jobs are queued: the backend's Slurm options, validated."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    extra_directives: tuple[tuple[str, str | None], ...] = ()
    gpu_types: Mapping[str, str | None] = field(default_factory=lambda: {"gpu": None})
    login_environment: bool = False

    def __post_init__(self) -> None:
        for name in ("partition", "account", "qos"):
            value = getattr(self, name)
            if value is not None:
                directive_value(name, value)
        for option, value in self.extra_directives:
            if option not in ALLOWED_DIRECTIVES:
                allowed = ", ".join(sorted(ALLOWED_DIRECTIVES))
                raise ValueError(
                    f"#SBATCH {option} is not allowed in extra_directives (allowed: {allowed})"
                )
            if value is not None:
                directive_value(option, value)


@dataclass(frozen=True)
class RuntimeCommand:
    """A container runtime's argv; ``expansions`` maps an index to shell text put there."""

    argv: list[str]
    expansions: dict[int, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # passed through ``env``, not a shell

    def command_line(self) -> str:
        """The argv as one shell command line: ``env -- N=V ... argv``."""
        prefix = ["env", "--", *(f"{k}={v}" for k, v in self.env.items())] if self.env else []
        words = [shell_command([w]) for w in [*prefix, *self.argv]]
        for index, text in self.expansions.items():
            words[len(prefix) + index] = text
        return " ".join(words)


def _check_word(what: str, value: str) -> None:
    # sbatch refuses a script holding a carriage return ("DOS line breaks"), so a value
    # with one cannot travel in the batch script exactly; NUL cannot travel anywhere.
    if "\r" in value or "\0" in value:
        raise UnsupportedCapabilityError(
            f"{what} {value!r} holds a carriage return or NUL, which a Slurm batch script "
            "cannot carry"
        )


def _image_for(runtime: ContainerRuntime, image: str) -> str:
    if image.startswith("-"):
        raise UnsupportedCapabilityError(f"image {image!r} must not start with '-'")
    if runtime != "apptainer":
        return image
    if image.endswith(".sif") or "://" in image:
        return image  # a local .sif file, or a reference apptainer understands
    return f"docker://{image}"


def runtime_command(
    spec: ContainerTaskSpec,
    *,
    runtime: ContainerRuntime,
    layout: JobLayout,
    runtime_options: Sequence[str] = (),
    runtime_env: Mapping[str, str] | None = None,
    container_user: str | None = None,
    network: str = "none",
) -> RuntimeCommand:
    """The container runtime's argv running ``spec.image`` with ``spec.command`` exactly.

    ``container_user`` None runs as the job's own uid:gid (docker/podman); "" keeps the
    image's user. CPU and memory limits are the exact request where the runtime enforces
    them (docker, podman); apptainer runs inside the job's cgroup, which Slurm limits.
    """
    for word in spec.command:
        _check_word("command argument", word)
    for name, value in spec.env.items():
        _check_word("env value", value)
        if not name.isprintable() or any(ch.isspace() for ch in name):
            raise UnsupportedCapabilityError(f"env name {name!r} cannot be passed to a container")
    engine_env = dict(runtime_env or {})
    clash = sorted(set(engine_env) & set(spec.env))
    if clash:
        raise UnsupportedCapabilityError(
            f"env {', '.join(clash)} is also set by the backend's runtime_env for the container "
            "runtime; rename it in the task"
        )
    resources = spec.resources
    argv: list[str] = [runtime, *runtime_options]
    expansions: dict[int, str] = {}
    env: dict[str, str] = {}
    image = _image_for(runtime, spec.image)
    bind = f"{layout.data_root}:{CONTAINER_MOUNT_ROOT}"
    if runtime == "apptainer":
        argv += ["exec" if spec.command else "run", "--cleanenv", "--containall"]
        argv += ["--bind", bind]
        if resources.gpu is not None:
            argv.append("--nv")
        # --cleanenv passes only APPTAINERENV_<NAME> variables, as NAME.
        env = {**engine_env, **{f"APPTAINERENV_{k}": v for k, v in spec.env.items()}}
        return RuntimeCommand([*argv, image, *spec.command], expansions, env)
    argv += ["run", "--name", f"altar-{layout.token}", f"--network={network}"]
    argv += ["--volume", bind]
    if container_user is None:
        argv.append("--user")
        expansions[len(argv)] = EXPANSIONS["job_user"]
        argv.append("@job_user@")
    elif container_user:
        argv += ["--user", container_user]
    if resources.cpu is not None:
        argv.append(f"--cpus={resources.cpu:g}")
    if resources.memory_gb is not None:
        limit = int(resources.memory_gb * _GIB)
        argv += [f"--memory={limit}b", f"--memory-swap={limit}b"]
    if resources.gpu is not None:
        if runtime == "podman":
            raise UnsupportedCapabilityError(
                "GPU tasks need runtime 'docker' or 'apptainer'; podman's GPU support "
                "(CDI) is not wired to Slurm's allocation here",
                capability="gpu",
            )
        argv.append("--gpus")
        expansions[len(argv)] = EXPANSIONS["job_gpus"]
        argv.append("@job_gpus@")
    for name in spec.env:
        argv += ["--env", name]  # the value comes from `env`, never from a shell word
    env = {**engine_env, **spec.env}  # only the spec's names are forwarded (--env NAME)
    return RuntimeCommand([*argv, image, *spec.command], expansions, env)


def _duration(seconds: int) -> str:
    days, rest = divmod(seconds, 86400)
    return f"{days}-{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"


def _directives(
    spec: ContainerTaskSpec,
    *,
    name: str,
    comment: str,
    layout: JobLayout,
    placement: SlurmPlacement,
) -> list[tuple[str, str | None]]:
    resources = spec.resources
    out: list[tuple[str, str | None]] = [
        ("--job-name", name),
        ("--comment", comment),
        ("--chdir", layout.job_dir),
        # %-patterns expand in --output; a literal % in the path is doubled.
        ("--output", layout.stdout.replace("%", "%%")),
        ("--error", layout.stderr.replace("%", "%%")),
        # sbatch runs under `env -i` (see commands.SUBMIT_PROGRAM), so ALL is only PATH, HOME,
        # USER and SLURM_*; NONE makes Slurm run a login shell for every job instead.
        ("--export", "NONE" if placement.login_environment else "ALL"),
        # Slurm must never restart a job behind the runner's back: a preempted or
        # node-failed job ends, and the runner decides about one more attempt.
        ("--no-requeue", None),
        ("--nodes", "1"),
        ("--ntasks", "1"),
    ]
    for option, value in (
        ("--partition", placement.partition),
        ("--account", placement.account),
        ("--qos", placement.qos),
    ):
        if value is not None:
            out.append((option, value))
    if resources.cpu is not None:
        out.append(("--cpus-per-task", str(math.ceil(resources.cpu))))
    if resources.memory_gb is not None:
        out.append(("--mem", f"{math.ceil(resources.memory_gb * _GIB / _MIB)}M"))
    if resources.gpu is not None:
        if resources.gpu not in placement.gpu_types:
            pools = ", ".join(sorted(placement.gpu_types)) or "none"
            raise UnsupportedCapabilityError(
                f"GPU pool {resources.gpu!r} is not configured for this cluster (pools: "
                f"{pools}); a GPU task is never run on CPU instead",
                capability="gpu",
            )
        gpu_type = placement.gpu_types[resources.gpu]
        kind = f"gpu:{gpu_type}" if gpu_type else "gpu"
        out.append(("--gres", f"{kind}:{resources.count}"))
    if spec.timeout_s is not None:
        if spec.timeout_s > MAX_TIME_S:
            # Slurm counts a time limit in 32-bit seconds: past this it silently wraps
            # (1e12 s was stored as a 2,974,197-day limit).
            raise UnsupportedCapabilityError(
                f"timeout_s={spec.timeout_s} is beyond what Slurm can store ({MAX_TIME_S} s, "
                "about 68 years); use a real limit, or none",
                capability="timeout",
            )
        out.append(("--time", _duration(spec.timeout_s)))
    out.extend(placement.extra_directives)
    return out


def _verify_block(spec: ContainerTaskSpec, layout: JobLayout, trust: bool) -> list[str]:
    lines = [
        f"{t.digest.removeprefix('sha256:')}  {layout.host_path(t.logical_path)}"
        for t in spec.inputs
        if t.digest is not None
    ]
    if not lines:
        return []
    program = verify_files_script(trust_records=trust)
    check = shell_command(["sh", "-c", program, "altar-verify-inputs", *lines])
    marker = shell_command(_marker(INPUT_MISMATCH_STEP))
    return [
        "# Inputs are checked here, on the cluster, before any compute (records are written",
        "# beside them, so a large input is hashed once per filesystem).",
        f"if ! {check} >&2; then",
        f"    {marker}",
        f"    status=1 altar_marker={RECORD_MARKERS[INPUT_MISMATCH_STEP]}",
        "    altar_record",
        "    exit 1",
        "fi",
    ]


def _marker(step: str) -> list[str]:
    # srun reads options after the program unless "--" ends them ("sh -c" would be its -c).
    return ["srun", "--export=ALL", "--ntasks=1", f"--job-name={step}", "--", "/bin/true"]


def _record_lines() -> list[str]:
    """The start record, and ``altar_record``: the job's last act, one line written beside
    and renamed over (atomic on one filesystem), so a reader sees the whole record or none.

    The exit record keeps the full 0-255 status (sacct reports it modulo 128), whether this
    script was signalled (scancel, the time limit, preemption: then Slurm's state says why),
    and the marker a marker step also tells sacct. Relative paths: the job dir is the cwd.
    """
    tmp, start_tmp = f"{EXIT_RECORD}.tmp", f"{START_RECORD}.tmp"
    return [
        "altar_signalled=0 altar_marker=",
        "altar_record() {",
        f"    printf '{EXIT_RECORD_VERSION} status=%s start=%s end=%s "
        "signalled=%s marker=%s\\n' \\",
        '        "$status" "$altar_start" "$(date +%s)" "$altar_signalled" "$altar_marker" \\',
        f"        >{tmp} && mv -f {tmp} {EXIT_RECORD}",
        "}",
        f"printf '{START_RECORD_VERSION} start=%s\\n' \"$altar_start\" >{start_tmp} && "
        f"mv -f {start_tmp} {START_RECORD}",
    ]


def batch_script(
    spec: ContainerTaskSpec,
    *,
    layout: JobLayout,
    placement: SlurmPlacement,
    command: RuntimeCommand,
    runtime: ContainerRuntime,
    digest: str | None = None,
    trust_records: bool = True,
) -> str:
    """The job's sbatch script: directives, the in-task input check, the container."""
    digest = digest or spec_hash(spec)
    directives = _directives(
        spec,
        name=job_name(spec, digest),
        comment=comment_for(spec, digest),
        layout=layout,
        placement=placement,
    )
    lines = ["#!/bin/sh"]
    for option, value in directives:
        written = "" if value is None else f"={directive_value(option, value)}"
        lines.append(f"#SBATCH {option}{written}")
    lines += [
        "# Generated by altar-backend-slurm: one Altar task, one container.",
        "set -u",
        "altar_start=$(date +%s)",
        *_record_lines(),
        *_verify_block(spec, layout, trust_records),
    ]
    if runtime == "apptainer":
        # apptainer runs as a child of this job, inside its cgroup: Slurm's limits, signals
        # and OUT_OF_MEMORY apply to it directly; this script passes a TERM on and records.
        lines += [
            f"{command.command_line()} &",
            "child=$!",
            """trap 'altar_signalled=1; kill -TERM "$child" 2>/dev/null' TERM INT""",
            'wait "$child"; status=$?',
            'while kill -0 "$child" 2>/dev/null; do wait "$child"; status=$?; done',
            "altar_record",
            'exit "$status"',
            "",
        ]
        return "\n".join(lines)
    engine = command.argv[: command.argv.index("run")]
    name = f"altar-{layout.token}"
    kill = shell_command([*engine, "kill", name])
    inspect = shell_command([*engine, "inspect", "--format", "{{.State.OOMKilled}}", name])
    # Podman on cgroup v1 does not always set OOMKilled; under a memory limit, a SIGKILL no
    # one outside sent (scancel and the time limit read as CANCELLED/TIMEOUT) is the OOM killer.
    limited = runtime == "podman" and spec.resources.memory_gb is not None
    oom_test = '[ "$oom" = true ] || [ "$status" -eq 137 ]' if limited else '[ "$oom" = true ]'

    remove = shell_command([*engine, "rm", "--force", name])
    lines += [
        "# The engine, not this job, owns the container: on scancel or the time limit Slurm",
        "# signals this script, which kills the container before Slurm's KillWait runs out.",
        f"stop() {{ altar_signalled=1; {kill} >/dev/null 2>&1; }}",
        "trap stop TERM INT",
        f"{command.command_line()} &",
        "child=$!",
        'wait "$child"; status=$?',
        'while kill -0 "$child" 2>/dev/null; do wait "$child"; status=$?; done',
        f"oom=$({inspect} 2>/dev/null)",
        f"{remove} >/dev/null 2>&1",
        # A child killed for memory while the main process exited 0 is still an OOM kill:
        # record it, and never let Slurm read the job as COMPLETED.
        f"if {oom_test}; then",
        f"    {shell_command(_marker(OOM_STEP))}",
        '    [ "$status" -ne 0 ] || status=137',
        f"    altar_marker={RECORD_MARKERS[OOM_STEP]}",
        "fi",
        "altar_record",
        'exit "$status"',
        "",
    ]
    return "\n".join(lines)
