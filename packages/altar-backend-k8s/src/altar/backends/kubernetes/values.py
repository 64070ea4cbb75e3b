"""The Kubernetes backend's leaf module: plain values, fixed names and errors.

Everything else in the package imports from here and this module imports nothing of the
package, so the seam (:mod:`.runtime`), the wire parsers (:mod:`.wire`), the classifier
(:mod:`.classify`) and the renderer (:mod:`.render`) never import each other to share a type.

Outside the common anatomy (where :mod:`.runtime` holds the values, as in local and Modal)
because the Kubernetes seam keeps only protocols in :mod:`.runtime` (issue 12, item 4).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from altar.execution import AltarError, TaskState

__all__ = [
    "MAIN_CONTAINER",
    "MANIFEST_DIGEST_ANNOTATION",
    "VERIFY_INPUTS_CONTAINER",
    "ContainerExit",
    "JobCondition",
    "K8sApiError",
    "K8sConfigError",
    "K8sJobExistsError",
    "K8sJobInfo",
    "K8sPodInfo",
    "PropagationPolicy",
    "ResourceQuotaInfo",
]

#: The task's own container in every Job the backend renders.
MAIN_CONTAINER = "main"
#: The init container that checks declared input digests before the task starts.
VERIFY_INPUTS_CONTAINER = "verify-inputs"
#: The rendered manifest's digest on every Job: written by :mod:`.render`, read by :mod:`.adoption`.
MANIFEST_DIGEST_ANNOTATION = "altar.kundajelab.org/manifest-sha256"

PropagationPolicy = Literal["Background", "Foreground"]


@dataclass(frozen=True)
class JobCondition:
    type: str
    status: str
    reason: str | None = None
    message: str | None = None


@dataclass(frozen=True)
class K8sJobInfo:
    """One Job as the backend needs it.

    ``state`` follows the earliest terminal signal (``FailureTarget``/``SuccessCriteriaMet``);
    ``finished`` is True only once ``Failed``/``Complete`` say every pod has terminated, which
    is when a Job may be replaced. ``deleting`` is True while ``deletionTimestamp`` is set.
    """

    name: str
    state: TaskState
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    uid: str | None = None
    finished: bool | None = None  # None: derive from state (custom runtimes)
    deleting: bool = False
    conditions: tuple[JobCondition, ...] = ()
    # The Job's status.startTime, and when it ended (status.completionTime, or the
    # lastTransitionTime of its Failed condition), epoch seconds; None when not reported.
    start_time: float | None = None
    end_time: float | None = None

    @property
    def replaceable(self) -> bool:
        return self.state.is_terminal if self.finished is None else self.finished


@dataclass(frozen=True)
class ContainerExit:
    """A terminated container: ``state.terminated`` of its status."""

    name: str
    exit_code: int
    reason: str | None = None
    message: str | None = None


@dataclass(frozen=True)
class K8sPodInfo:
    """One Pod of a Job. ``disruption`` is set when the pod was stopped from outside (evicted
    by the kubelet, preempted, or a ``DisruptionTarget`` condition): its reason and message.

    ``disruption_reason`` is the ``DisruptionTarget`` condition's reason
    (``PreemptionByScheduler``, ``DeletionByTaintManager``, ...) and ``status_reason`` the
    pod's ``status.reason`` (``Evicted``, ``Terminated``, ``NodeLost``): what
    :mod:`.classify` reads to name the provider ending. Both are None when not reported.
    """

    name: str
    job_uid: str | None
    job_name: str | None
    created: str = ""
    init_exits: tuple[ContainerExit, ...] = ()
    container_exits: tuple[ContainerExit, ...] = ()
    disruption: str | None = None
    disruption_reason: str | None = None
    status_reason: str | None = None


@dataclass(frozen=True)
class ResourceQuotaInfo:
    """One namespace ResourceQuota: ``status.hard`` and ``status.used`` as the API reports them
    (quantity strings). ``scoped`` quotas (``scopes``/``scopeSelector``) apply to some pods
    only; the backend does not predict them."""

    name: str
    hard: dict[str, str] = field(default_factory=dict)
    used: dict[str, str] = field(default_factory=dict)
    scoped: bool = False


class K8sApiError(RuntimeError):
    """The API server refused a request for a reason retrying will not fix (4xx)."""

    def __init__(self, message: str, *, status: int, reason: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class K8sJobExistsError(K8sApiError):
    """A Job of this name exists and could not be adopted or replaced (409 ``AlreadyExists``).

    A :class:`K8sApiError` (so a ``RuntimeError``): the runner reports a submit that meets it
    as ``submit_failed``, as it did when this class derived from ``Exception`` directly.
    ``being_deleted`` is True while the holder is in foreground deletion.
    """

    def __init__(
        self,
        name: str,
        *,
        namespace: str,
        detail: str | None = None,
        being_deleted: bool = False,
    ) -> None:
        message = f"job {name} already exists in namespace {namespace}"
        if detail:
            message += f": {detail}"
        super().__init__(message, status=409, reason="AlreadyExists")
        self.name = name
        self.namespace = namespace
        self.detail = detail
        self.being_deleted = being_deleted


class K8sConfigError(AltarError, ValueError):
    """No usable Kubernetes configuration (kubeconfig missing or invalid, not in a cluster).

    Not transient, unlike BackendUnavailableError: waiting does not make a kubeconfig appear.
    A ValueError, so a submit that meets it is refused rather than retried, and an AltarError,
    so ``altar`` reports it in one line.
    """
