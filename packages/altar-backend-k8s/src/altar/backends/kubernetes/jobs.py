"""Deprecated module name, kept for one release: import from
``altar.backends.kubernetes.values`` (and its siblings).

Importing it warns (``DeprecationWarning``); it is removed in the release after next.
"""

from __future__ import annotations

import warnings

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

warnings.warn(
    "altar.backends.kubernetes.jobs is deprecated; "
    "import from altar.backends.kubernetes.values, .wire and .classify",
    DeprecationWarning,
    stacklevel=2,
)
