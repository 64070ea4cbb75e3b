"""Import shim, kept for one release: the values, wire parsers and classifier moved.

Values live in :mod:`.values`, API JSON parsing in :mod:`.wire`, the state mapping and
failure classification in :mod:`.classify`. This module will be removed in the next release.
"""

from altar.backends.kubernetes.classify import classify_failure, job_state
from altar.backends.kubernetes.values import ContainerExit, JobCondition, K8sJobInfo, K8sPodInfo
from altar.backends.kubernetes.wire import job_info_from_object, pod_info_from_object

__all__ = [
    "ContainerExit",
    "JobCondition",
    "K8sJobInfo",
    "K8sPodInfo",
    "classify_failure",
    "job_info_from_object",
    "job_state",
    "pod_info_from_object",
]
