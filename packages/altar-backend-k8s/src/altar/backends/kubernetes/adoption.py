"""What a submit does with a Job that already holds its name (a pure decision).

The Job name hashes the spec, labels included, so a name conflict means one of three things:
this very submission created the Job before (its answer was lost, or the runner died before
journaling it), another driver runs the same work, or an earlier run of the same spec left
a finished Job. The runner's submission key (``altar.submission``) tells the first apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from altar.backends.kubernetes.naming import MANAGED_BY_LABEL, identity_of
from altar.backends.kubernetes.render import MANIFEST_DIGEST_ANNOTATION
from altar.backends.kubernetes.values import K8sJobExistsError, K8sJobInfo
from altar.execution import LABEL_SUBMISSION

__all__ = ["Decision", "decide", "listed_labels", "refusal"]

#: ``create``: try the create again (after a pause); ``adopt``: return the existing Job;
#: ``refuse``: a different manifest is still running; ``wait``: finished, pods still
#: terminating; ``replace``: delete exactly that attempt, then create.
Decision = Literal["create", "adopt", "refuse", "wait", "replace"]


def decide(existing: K8sJobInfo | None, *, key: str | None, digest: str) -> Decision:
    """The rule for a Job found under the name a submit wanted.

    A Job carrying the spec's submission key is adopted in any state, finished included:
    replacing it would run the task twice. Without a key (or under another one) a running Job
    of the same manifest is adopted and a finished one replaced, as in 0.3.0.
    """
    if existing is None or existing.deleting:
        return "create"  # gone since the conflict, or on its way out
    if key is not None and submission_key(existing) == key:
        return "adopt"
    if not existing.state.is_terminal:
        found = existing.annotations.get(MANIFEST_DIGEST_ANNOTATION)
        return "adopt" if found == digest else "refuse"
    return "replace" if existing.replaceable else "wait"


def refusal(existing: K8sJobInfo, *, namespace: str, digest: str) -> K8sJobExistsError:
    """The error for a ``refuse`` decision, naming both digests and the way out."""
    found = existing.annotations.get(MANIFEST_DIGEST_ANNOTATION)
    name = existing.name
    return K8sJobExistsError(
        name,
        namespace=namespace,
        detail=(
            f"it is still {existing.state.value} and was rendered from a different manifest "
            f"({MANIFEST_DIGEST_ANNOTATION} {found or 'missing'}, expected {digest}); let it "
            f"finish or delete it (kubectl delete job {name} -n {namespace}) before resubmitting"
        ),
    )


def submission_key(job: K8sJobInfo) -> str | None:
    return identity_of(job.labels, job.annotations).get(LABEL_SUBMISSION)


def listed_labels(job: K8sJobInfo) -> dict[str, str]:
    """The spec labels a Job was created with: its labels less ours, plus its identity."""
    labels: Mapping[str, str] = job.labels
    return {
        **{k: v for k, v in labels.items() if k != MANAGED_BY_LABEL},
        **identity_of(job.labels, job.annotations),
    }
