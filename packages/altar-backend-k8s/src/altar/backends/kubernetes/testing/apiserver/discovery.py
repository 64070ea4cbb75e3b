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
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [{"name": "batch", "versions": [batch], "preferredVersion": batch}],
        }
    if path == "/api/v1":
        return {
            "kind": "APIResourceList",
            "groupVersion": "v1",
            "resources": [
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
