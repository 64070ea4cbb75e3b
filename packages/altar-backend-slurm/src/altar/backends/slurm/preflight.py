"""What ``altar check`` asks the cluster (read-only), and the partition facts submits reuse."""

from __future__ import annotations

from collections.abc import Mapping

from altar.backends.slurm import commands
from altar.backends.slurm.render import SlurmPlacement
from altar.backends.slurm.runtime import LoginNode, LoginNodeUnreachableError
from altar.execution import BackendUnavailableError, ContainerTaskSpec, UnsupportedCapabilityError

__all__ = ["Preflight"]


class Preflight:
    """The partition's ``MaxTime`` and GRES (each read once), and the backend's own check."""

    def __init__(
        self,
        node: LoginNode,
        placement: SlurmPlacement,
        *,
        container_runtime: str,
        query_timeout_s: float | None,
    ) -> None:
        self.node = node
        self.placement = placement
        self.container_runtime = container_runtime
        self.query_timeout_s = query_timeout_s
        self.max_time: tuple[int | None] | None = None
        self.gres: list[dict[tuple[str, str | None], int]] | None = None
        #: Set when :meth:`check_backend` found Slurm unreachable: task checks then skip it.
        self.unreachable: BackendUnavailableError | None = None

    def _read_max_time(self) -> tuple[int | None]:
        partition = self.placement.partition
        return (commands.max_time_s(self.node, partition, timeout_s=self.query_timeout_s),)

    def check_timeout(self, spec: ContainerTaskSpec) -> None:
        if spec.timeout_s is None:
            return
        if self.max_time is None:
            self.max_time = self._read_max_time()
        (cap,) = self.max_time
        if cap is not None and spec.timeout_s > cap:
            where = self.placement.partition or "the default partition"
            raise UnsupportedCapabilityError(
                f"timeout_s={spec.timeout_s} exceeds {where}'s MaxTime of {cap} s; "
                f"use timeout_s <= {cap} or a partition that allows longer jobs",
                capability="timeout",
            )

    def check_backend(self) -> list[tuple[str, str]]:
        """The login node answers, the partition exists, the container runtime is there."""
        problems: list[tuple[str, str]] = []
        try:
            self.max_time = self._read_max_time()
        except LoginNodeUnreachableError as error:
            self.unreachable = error
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
            self.unreachable = error
            return [("partition", f"not checked, Slurm did not answer: {error}")]
        except UnsupportedCapabilityError as error:
            self.max_time = (None,)  # said once here, not again for every task
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

    def check_gres(self, spec: ContainerTaskSpec) -> None:
        """A GPU task's GRES exists on some node of the partition (one ``sinfo``, cached)."""
        pool = spec.resources.gpu
        if pool is None:
            return
        if self.gres is None:
            self.gres = commands.partition_gres(
                self.node, self.placement.partition, timeout_s=self.query_timeout_s
            )
        if not self.gres:
            return  # no such partition (check_backend said so) or no nodes: sbatch decides
        kind = self.placement.gpu_types.get(pool)
        want = spec.resources.count

        def has(group: Mapping[tuple[str, str | None], int]) -> int:
            if kind is None:  # any type: Slurm counts every typed and untyped GPU
                return sum(n for (name, _), n in group.items() if name == "gpu")
            return group.get(("gpu", kind), 0)

        if any(has(group) >= want for group in self.gres):
            return
        offered = sorted(
            {":".join(filter(None, (n, t, str(c)))) for g in self.gres for (n, t), c in g.items()}
        )
        where = repr(self.placement.partition) if self.placement.partition else "the default"
        asked = f"gpu:{kind}:{want}" if kind else f"gpu:{want}"
        raise UnsupportedCapabilityError(
            f"partition {where} has no node with GRES {asked} (its nodes have: "
            f"{', '.join(offered) or 'no GRES'}); use a partition with such GPUs, or map pool "
            f"{pool!r} in gpu_types to a GRES type it has",
            capability="gpu",
        )
