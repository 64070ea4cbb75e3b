"""What names a task's job: its spec hash, the runner's key, the job name and comment.

The name is what one ``squeue``/``sacct --name`` query looks up before submitting; the comment
carries the spec hash and the task's labels, so a job alone gives back its handle.
"""

from __future__ import annotations

import hashlib
import json
from urllib.parse import quote, unquote

from altar.execution import LABEL_SUBMISSION, ContainerTaskSpec, spec_to_dict
from altar.execution.labels import is_submission_key

__all__ = [
    "COMMENT_PREFIX",
    "JOB_NAME_PREFIX",
    "comment_for",
    "job_name",
    "parse_comment",
    "spec_hash",
    "submission_key",
]

JOB_NAME_PREFIX = "altar-"
COMMENT_PREFIX = "altar/1"


def _canonical(spec: ContainerTaskSpec) -> bytes:
    return json.dumps(spec_to_dict(spec), sort_keys=True, default=str).encode()


def spec_hash(spec: ContainerTaskSpec) -> str:
    """sha256 of the spec's canonical JSON (64 hex)."""
    return hashlib.sha256(_canonical(spec)).hexdigest()


def submission_key(spec: ContainerTaskSpec) -> str | None:
    """The runner's idempotency key, when the spec carries a well-formed one."""
    key = spec.labels.get(LABEL_SUBMISSION)
    return key if key is not None and is_submission_key(key) else None


def job_name(spec: ContainerTaskSpec, digest: str) -> str:
    """``altar-<key>`` for a keyed submission, else ``altar-spec-<hash prefix>``.

    The name is what one ``squeue``/``sacct --name`` query looks up before submitting; which
    of the jobs by that name is ours is decided from the job's working directory (hash and
    run) and comment, never from the name alone.
    """
    key = submission_key(spec)
    return f"{JOB_NAME_PREFIX}{key}" if key else f"{JOB_NAME_PREFIX}spec-{digest[:32]}"


def comment_for(spec: ContainerTaskSpec, digest: str) -> str:
    """``altar/1;spec=<hash>;labels=<k=v&...>``, percent-encoded: no blank, quote or ``#``."""
    labels = "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in spec.labels.items())
    return f"{COMMENT_PREFIX};spec={digest};labels={quote(labels, safe='')}"


def parse_comment(comment: str) -> tuple[str, dict[str, str]] | None:
    """(spec hash, labels) back from :func:`comment_for`, or None for anyone else's comment."""
    parts = comment.split(";")
    if len(parts) != 3 or parts[0] != COMMENT_PREFIX:
        return None
    fields = dict(part.partition("=")[::2] for part in parts[1:])
    if "spec" not in fields or "labels" not in fields:
        return None
    labels: dict[str, str] = {}
    for pair in unquote(fields["labels"]).split("&"):
        if pair:
            key, _, value = pair.partition("=")
            labels[unquote(key)] = unquote(value)
    return fields["spec"], labels
