"""Reserved labels: how the runner tells a backend which run, task and attempt a spec is.

The runner adds these to every spec it submits (so altar 0.3.0 backends, which only copy labels,
keep working unchanged) and plans may not declare labels starting with ``altar.``:

- ``altar.run``: the run id (32 hex characters, fixed when the run directory is created);
- ``altar.task``: the plan's task id;
- ``altar.attempt``: the attempt number, as a decimal string (1 for the first);
- ``altar.submission``: the idempotency key of this submission, :func:`submission_key`.

The key is journaled before ``submit`` is called, and a submit repeated after an in-doubt one
(the runner died, or the call was cut off, before its answer arrived) carries the journaled key
again, never a fresh one. A backend with ``adopts_submissions = True`` answers such a submit
with the provider object it created for that key instead of launching another.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "LABEL_ATTEMPT",
    "LABEL_RUN",
    "LABEL_SUBMISSION",
    "LABEL_TASK",
    "RESERVED_LABEL_PREFIX",
    "is_submission_key",
    "reserved_labels",
    "submission_key",
    "submission_labels",
]

RESERVED_LABEL_PREFIX = "altar."
LABEL_RUN = "altar.run"
LABEL_TASK = "altar.task"
LABEL_ATTEMPT = "altar.attempt"
LABEL_SUBMISSION = "altar.submission"


def submission_key(run: str, task: str, attempt: int) -> str:
    """The idempotency key of one submission: 32 lowercase hex characters.

    ``sha256(f"{run}\\0{task}\\0{attempt}")[:32]``: safe as a label value on every provider,
    and the same whenever the same attempt is submitted again.
    """
    if attempt < 1:
        raise ValueError(f"attempt numbers start at 1, got {attempt}")
    import hashlib  # only here: importing the contract must stay cheap

    return hashlib.sha256(f"{run}\0{task}\0{attempt}".encode()).hexdigest()[:32]


def is_submission_key(value: str) -> bool:
    """Whether ``value`` has the form of a submission key."""
    return len(value) == 32 and all(c in "0123456789abcdef" for c in value)


#: The first attempt numbers as text, one object each (a label of every provider object).
_NUMBERS = tuple(str(n) for n in range(16))


def submission_labels(run: str, task: str, attempt: int, key: str | None = None) -> dict[str, str]:
    """The four reserved labels of one submission (``key`` defaults to :func:`submission_key`)."""
    return {
        LABEL_RUN: run,
        LABEL_TASK: task,
        LABEL_ATTEMPT: _NUMBERS[attempt] if 0 <= attempt < len(_NUMBERS) else str(attempt),
        LABEL_SUBMISSION: key if key is not None else submission_key(run, task, attempt),
    }


def reserved_labels(labels: Mapping[str, str]) -> list[str]:
    """The keys of ``labels`` that use the reserved ``altar.`` prefix, sorted."""
    return sorted(key for key in labels if key.startswith(RESERVED_LABEL_PREFIX))
