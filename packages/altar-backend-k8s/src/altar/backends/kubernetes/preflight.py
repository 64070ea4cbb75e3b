"""The Kubernetes pre-flight of ``altar check``: read-only questions to the API server.

Each is an optional runtime method (``ClientRuntime`` has them; a runtime without one skips
that check): ``namespace_exists``, ``claim_exists`` (True, False on 404, None when this
identity may not read it) and ``may_create_jobs`` (a SelfSubjectAccessReview).
"""

from __future__ import annotations

from altar.backends.kubernetes.calls import RuntimeCalls
from altar.backends.kubernetes.values import K8sApiError, K8sConfigError
from altar.execution import BackendUnavailableError

__all__ = ["check_cluster"]


async def check_cluster(
    calls: RuntimeCalls, namespace: str, claim: str | None
) -> list[tuple[str, str]]:
    """Read-only pre-flight: the namespace exists, the PVC exists in it, and this
    identity may create Jobs there (a SelfSubjectAccessReview); one problem per option.

    Uses the runtime's optional ``namespace_exists``, ``claim_exists`` and
    ``may_create_jobs`` (``ClientRuntime`` has them; a runtime without one skips it).
    An answer of None (403: this identity may not read namespaces) is not a problem.
    """
    problems: list[tuple[str, str]] = []
    try:
        if (
            calls.offers("namespace_exists")
            and await calls.preflight("namespace_exists", namespace) is False
        ):
            return [
                (
                    "namespace",
                    f"namespace {namespace!r} does not exist; create it (kubectl create "
                    "namespace NAME) or set namespace to one that exists",
                )
            ]  # the claim and the permission would only say the same again
        if claim and calls.offers("claim_exists"):
            found = await calls.preflight("claim_exists", claim, namespace=namespace)
            if found is False:
                problems.append(
                    (
                        "pvc_name",
                        f"PersistentVolumeClaim {claim!r} does not exist in namespace "
                        f"{namespace!r}; create it, or set pvc_name to one there",
                    )
                )
        if calls.offers("may_create_jobs"):
            allowed, reason = await calls.preflight("may_create_jobs", namespace=namespace)
            if not allowed:
                said = f" ({reason})" if reason else ""
                problems.append(
                    (
                        "namespace",
                        f"this identity may not create jobs.batch in namespace "
                        f"{namespace!r}{said}; ask for a Role that allows it, or use "
                        "another namespace or context",
                    )
                )
    except BackendUnavailableError as error:
        problems.append(("namespace", f"not checked, the Kubernetes API did not answer: {error}"))
    except K8sConfigError as error:
        problems.append(("kubeconfig", str(error)))
    except K8sApiError as error:
        problems.append(("namespace", f"not checked, the Kubernetes API refused: {error}"))
    return problems
