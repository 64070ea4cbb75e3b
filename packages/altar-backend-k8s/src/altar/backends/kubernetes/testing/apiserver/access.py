"""Namespaces, PersistentVolumeClaims and SelfSubjectAccessReview: what a pre-flight reads.

Shapes as kube-apiserver 1.31 answers: a ``Namespace`` and a ``PersistentVolumeClaim``
object on GET, a 404 ``Status`` (``namespaces "x" not found``, details kind
``namespaces``) for a missing one, and a ``SelfSubjectAccessReview`` posted to
``authorization.k8s.io/v1`` is answered 201 with its spec and a ``status`` of ``allowed``
(with RBAC's reason when allowed; none when denied, as RBAC gives none).

Without ``namespaces`` every namespace exists (the fake's behaviour before namespaces were
kept); with them, a Job created in another namespace is refused 404 as the real server does.
"""

from __future__ import annotations

import copy
import uuid

from altar.backends.kubernetes.testing.apiserver.objects import JsonDict, now
from altar.backends.kubernetes.testing.apiserver.status import ApiError, details

__all__ = ["SSAR_PATH", "AccessRules"]

SSAR_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
#: Namespaces every cluster has.
SYSTEM_NAMESPACES = ("default", "kube-node-lease", "kube-public", "kube-system")
_ALLOWED_BY = 'RBAC: allowed by RoleBinding "altar-fake" of ClusterRole "edit" to User "fake-user"'


class AccessRules:
    """The namespaces, claims and refused permissions of the fake cluster."""

    def __init__(self, namespaces: tuple[str, ...] | list[str] | None = None) -> None:
        self.namespaces: dict[str, JsonDict] | None = None
        if namespaces is not None:
            self.namespaces = {}
            for name in (*SYSTEM_NAMESPACES, *namespaces):
                self.add_namespace(name)
        self.claims: dict[tuple[str, str], JsonDict] = {}
        #: (verb, group, resource, namespace or None for every namespace) refused to the user.
        self.denied: set[tuple[str, str, str, str | None]] = set()

    # -- test controls --

    def add_namespace(self, name: str) -> None:
        if self.namespaces is None:
            self.namespaces = {n: _namespace(n) for n in SYSTEM_NAMESPACES}
        self.namespaces.setdefault(name, _namespace(name))

    def add_claim(self, name: str, *, namespace: str = "default", storage: str = "1Gi") -> None:
        self.claims[(namespace, name)] = {
            "kind": "PersistentVolumeClaim",
            "apiVersion": "v1",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": str(uuid.uuid4()),
                "resourceVersion": "1",
                "creationTimestamp": now(),
                "finalizers": ["kubernetes.io/pvc-protection"],
            },
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "resources": {"requests": {"storage": storage}},
                "volumeName": f"pvc-{uuid.uuid4()}",
                "storageClassName": "standard",
                "volumeMode": "Filesystem",
            },
            "status": {
                "phase": "Bound",
                "accessModes": ["ReadWriteMany"],
                "capacity": {"storage": storage},
            },
        }

    def deny(
        self, verb: str, resource: str, *, group: str = "", namespace: str | None = None
    ) -> None:
        """Refuse ``verb`` on ``group/resource`` (in ``namespace``, or everywhere)."""
        self.denied.add((verb, group, resource, namespace))

    # -- API operations --

    def require_namespace(self, name: str) -> None:
        if self.namespaces is not None and name not in self.namespaces:
            raise ApiError(
                404, "NotFound", f'namespaces "{name}" not found', details(name, "namespaces", "")
            )

    def api_get_namespace(self, name: str) -> JsonDict:
        self.require_namespace(name)
        if self.namespaces is None:
            return _namespace(name)
        return copy.deepcopy(self.namespaces[name])

    def api_get_claim(self, namespace: str, name: str) -> JsonDict:
        claim = self.claims.get((namespace, name))
        if claim is None:
            raise ApiError(
                404,
                "NotFound",
                f'persistentvolumeclaims "{name}" not found',
                details(name, "persistentvolumeclaims", ""),
            )
        return copy.deepcopy(claim)

    def api_review(self, body: JsonDict) -> JsonDict:
        spec = body.get("spec") or {}
        attributes = spec.get("resourceAttributes")
        if (attributes is None) == (spec.get("nonResourceAttributes") is None):
            raise ApiError(
                422,
                "Invalid",
                'SelfSubjectAccessReview.authorization.k8s.io "" is invalid: '
                'spec.resourceAttributes: Invalid value: "null": exactly one of '
                "nonResourceAttributes or resourceAttributes must be specified",
                details("", "SelfSubjectAccessReview", "authorization.k8s.io"),
            )
        allowed = True
        if attributes is not None:
            asked = (
                attributes.get("verb", ""),
                attributes.get("group", ""),
                attributes.get("resource", ""),
            )
            namespace = attributes.get("namespace") or None
            allowed = (*asked, None) not in self.denied and (*asked, namespace) not in self.denied
        status: JsonDict = {"allowed": allowed}
        if allowed:
            status["reason"] = _ALLOWED_BY
        return {
            "kind": "SelfSubjectAccessReview",
            "apiVersion": "authorization.k8s.io/v1",
            "metadata": {"creationTimestamp": None},
            "spec": copy.deepcopy(spec),
            "status": status,
        }


def _namespace(name: str) -> JsonDict:
    return {
        "kind": "Namespace",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{name}.namespace.altar-fake")),
            "resourceVersion": "1",
            "creationTimestamp": now(),
            "labels": {"kubernetes.io/metadata.name": name},
        },
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }
