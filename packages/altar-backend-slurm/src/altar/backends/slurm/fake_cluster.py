"""The fake Slurm's fixed answers: its partitions, GRES, limits, and sbatch's placement checks.

Pure functions of the cluster's configuration, with Slurm 22.05's texts (see :mod:`.fake`).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

from altar.backends.slurm.commands import parse_duration

__all__ = [
    "array_jobs_dir",
    "limits_text",
    "partition_lines",
    "placement_refusal",
    "sinfo_lines",
    "slurm_time",
]


def slurm_time(seconds: int) -> str:
    days, rest = divmod(seconds, 86400)
    clock = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{clock}" if days else clock


def placement_refusal(
    options: Mapping[str, str | None],
    *,
    partitions: Mapping[str, int | None],
    default_partition: str,
    gpus: Mapping[str | None, int],
) -> str | tuple[int | None]:
    """sbatch's refusal of the script's partition, time limit or GRES, or (its time limit,)."""
    partition = options.get("--partition") or default_partition
    if partition not in partitions:
        return "Invalid partition name specified"
    cap = partitions[partition]
    requested = options.get("--time")
    limit = parse_duration(requested) if requested else cap
    if limit is not None and cap is not None and limit > cap:
        return "Requested time limit is invalid (missing or exceeds some limit)"
    gres = options.get("--gres")
    if gres is not None:
        parts = gres.split(":")
        kind, count = (parts[1] if len(parts) == 3 else None), int(parts[-1])
        have = sum(gpus.values()) if kind is None else gpus.get(kind, 0)
        if count > have:
            return "Invalid generic resource (gres) specification"
    return (limit,)


def partition_lines(
    wanted: Sequence[str], *, partitions: Mapping[str, int | None], default_partition: str
) -> str | list[str]:
    """``scontrol --oneliner show partition [NAME]``'s lines, or the name it does not know."""
    lines = []
    for name in wanted or list(partitions):
        if name not in partitions:
            return name
        cap = partitions[name]
        shown = "UNLIMITED" if cap is None else slurm_time(cap)
        default = "YES" if name == default_partition else "NO"
        lines.append(f"PartitionName={name} Default={default} MaxTime={shown} State=UP")
    return lines


def sinfo_lines(
    partitions: Sequence[str], default_partition: str, gpus: Mapping[str | None, int]
) -> str:
    """``sinfo --noheader --format=%P|%G``: the one node's GRES in every partition."""
    gres = ",".join(
        f"gpu:{kind}:{count}" if kind else f"gpu:{count}" for kind, count in gpus.items()
    )
    return "".join(
        f"{name}{'*' if name == default_partition else ''}|{gres or '(null)'}\n"
        for name in partitions
    )


def limits_text(max_submit_jobs: int | None) -> str:
    """What the backend's limits program prints: a QOS ``normal`` with that submit limit."""
    enforce = "associations,limits,qos" if max_submit_jobs is not None else "none"
    limit = "" if max_submit_jobs is None else str(max_submit_jobs)
    return (
        f"AccountingStorageEnforce={enforce}\nClusterName=fake\n---\nroot\n---\n"
        "fake|root|||||normal\n---\n"
        f"normal|{limit}||\n"
    )


def array_jobs_dir(script: str) -> str:
    """The jobs directory an array script changes to (its ``cd -- DIR/"$token"`` line)."""
    for line in script.splitlines():
        if line.startswith("cd -- ") and '/"$token"' in line:
            return shlex.split(line[len("cd -- ") : line.index('/"$token"')])[0]
    return ""
