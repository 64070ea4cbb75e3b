"""Discovery answers (``/version``, ``/api``, ``/apis``): what kubectl asks first."""

from __future__ import annotations

from altar.backends.kubernetes.testing.apiserver.objects import JsonDict

__all__ = ["discovery"]

_JOB_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


def discovery(path: str, minor: str) -> JsonDict | None:
    if path == "/version":
        return {
            "major": "1",
            "minor": minor,
            "gitVersion": f"v1.{minor}.0-altar-fake",
            "platform": "linux/amd64",
        }
    if path == "/api":
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}],
        }
    if path == "/apis":
        batch = {"groupVersion": "batch/v1", "version": "v1"}
        authz = {"groupVersion": "authorization.k8s.io/v1", "version": "v1"}
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [
                {"name": "batch", "versions": [batch], "preferredVersion": batch},
                {"name": "authorization.k8s.io", "versions": [authz], "preferredVersion": authz},
            ],
        }
    if path == "/apis/authorization.k8s.io/v1":
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": "authorization.k8s.io/v1",
            "resources": [
                {
                    "name": "selfsubjectaccessreviews",
                    "singularName": "selfsubjectaccessreview",
                    "namespaced": False,
                    "kind": "SelfSubjectAccessReview",
                    "verbs": ["create"],
                }
            ],
        }
    if path == "/api/v1":
        return {
            "kind": "APIResourceList",
            "groupVersion": "v1",
            "resources": [
                {
                    "name": "namespaces",
                    "singularName": "namespace",
                    "namespaced": False,
                    "kind": "Namespace",
                    "verbs": ["get"],
                    "shortNames": ["ns"],
                },
                {
                    "name": "persistentvolumeclaims",
                    "singularName": "persistentvolumeclaim",
                    "namespaced": True,
                    "kind": "PersistentVolumeClaim",
                    "verbs": ["get"],
                    "shortNames": ["pvc"],
                },
                {
                    "name": "pods",
                    "singularName": "pod",
                    "namespaced": True,
                    "kind": "Pod",
                    "verbs": ["get", "list", "watch"],
                    "shortNames": ["po"],
                },
                {
                    "name": "pods/log",
                    "singularName": "",
                    "namespaced": True,
                    "kind": "Pod",
                    "verbs": ["get"],
                },
                {
                    "name": "resourcequotas",
                    "singularName": "resourcequota",
                    "namespaced": True,
                    "kind": "ResourceQuota",
                    "verbs": ["list"],
                    "shortNames": ["quota"],
                },
                {
                    "name": "events",
                    "singularName": "event",
                    "namespaced": True,
                    "kind": "Event",
                    "verbs": ["list"],
                    "shortNames": ["ev"],
                },
            ],
        }
    if path == "/apis/batch/v1":
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": "batch/v1",
            "resources": [
                {
                    "name": "jobs",
                    "singularName": "job",
                    "namespaced": True,
                    "kind": "Job",
                    "verbs": _JOB_VERBS,
                    "categories": ["all"],
                }
            ],
        }
    return None
