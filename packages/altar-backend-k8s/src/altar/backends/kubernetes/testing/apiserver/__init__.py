"""A fake Kubernetes API server for tests: Jobs and Pods over plain HTTP on 127.0.0.1.

It speaks enough of the real API for the official ``kubernetes`` client and ``kubectl`` to use
it through a kubeconfig: discovery, ``batch/v1`` Jobs (create, get, list with label selectors,
delete with uid/resourceVersion preconditions and propagation policies) and ``v1`` Pods (list,
get, log with ``tailLines``), and what a pre-flight reads (:mod:`.access`: Namespaces,
PersistentVolumeClaims, SelfSubjectAccessReview). Errors are ``Status`` bodies with the real
reasons: a taken name is 409 ``AlreadyExists`` (with the ``object is being deleted:`` prefix
while a Job is in foreground deletion), a failed precondition is 409 ``Conflict``, a missing
object 404 ``NotFound``.

There is no scheduler or kubelet. Creating a Job creates its one Pod (pending, counted in
``status.active``) as the Job controller would; tests then drive outcomes with
:meth:`FakeApiServer.finish_job`, :meth:`expire_job`, :meth:`fail_verification`,
:meth:`oom_kill` and :meth:`evict`, which set container states and Job conditions the way
Kubernetes 1.31+ does (``FailureTarget``/``SuccessCriteriaMet`` first, then
``Failed``/``Complete``).
Every request is recorded in :attr:`FakeApiServer.requests`.

One concern per module: :mod:`.selectors`, :mod:`.objects` (JSON building blocks),
:mod:`.status` (errors and validation), :mod:`.controller` (state and controllers),
:mod:`.api` (operations), :mod:`.access`, :mod:`.discovery`, :mod:`.http` (routing), :mod:`.server`.
"""

from altar.backends.kubernetes.testing.apiserver.http import RecordedRequest
from altar.backends.kubernetes.testing.apiserver.selectors import matches_selector, parse_selector
from altar.backends.kubernetes.testing.apiserver.server import FakeApiServer, running_fake_apiserver

__all__ = [
    "FakeApiServer",
    "RecordedRequest",
    "matches_selector",
    "parse_selector",
    "running_fake_apiserver",
]
