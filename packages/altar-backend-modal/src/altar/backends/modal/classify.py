"""Pure classification: what Modal reports about a sandbox → Altar's :class:`TaskStatus`."""

from __future__ import annotations

from altar.backends.modal.runtime import ResultStatus, SandboxResult
from altar.execution import TaskFailure, TaskHandle, TaskState, TaskStatus

__all__ = ["status_from_result"]


_OOM_STATUSES = {
    ResultStatus.KERNEL_OOM_KILL: "was killed by the kernel for exceeding its memory limit",
    ResultStatus.MEMORY_MANAGER_EVICTION: "was evicted by Modal's memory manager",
    ResultStatus.MEMORY_THRASHING_EVICTION: "was evicted by Modal for memory thrashing",
}

_JOB_FAILED_STATUSES = {
    ResultStatus.INIT_FAILURE: "failed to start (image pull or container setup)",
    ResultStatus.IDLE_TIMEOUT: "was stopped by Modal's idle timeout",
    ResultStatus.UNKNOWN: "ended with a status this backend does not know",
}


# Who ended it, when Modal did: the OOM status its memory manager sets under host memory
# pressure is an eviction; an internal failure is Modal losing the worker or preempting it
# (the SDK's own words: "lost inputs or worker preemption"; sandboxes with a GPU, region or
# cloud requirement are preemptible).
_EVICTED = {ResultStatus.MEMORY_MANAGER_EVICTION}


def _internal_ending(message: str) -> str:
    return "preempted" if "preempt" in message.lower() else "node_lost"


def _with_message(text: str, message: str) -> str:
    return f"{text}: {message}" if message else text


def status_from_result(handle: TaskHandle, result: SandboxResult) -> TaskStatus:
    """Normalize a sandbox's result into a :class:`TaskStatus`.

    Classified on the result status, not the return code: the SDK's ``returncode`` turns a
    timeout into 124 and a termination into 137, which a command can also exit with.
    ``INTERNAL_FAILURE`` (a lost or preempted worker) and ``MEMORY_MANAGER_EVICTION`` (host
    memory pressure) carry a ``provider_ending``; their ``reason`` is what 0.3.0 reported.
    """
    what = f"modal sandbox {handle.external_id}"
    status, code = result.status, result.exit_code
    if status is ResultStatus.PENDING:
        return TaskStatus(handle, TaskState.PENDING)
    if status is ResultStatus.RUNNING:
        return TaskStatus(handle, TaskState.RUNNING)
    if status in (ResultStatus.SUCCESS, ResultStatus.FAILURE) and code is not None:
        if code == 0 and status is ResultStatus.SUCCESS:
            return TaskStatus(handle, TaskState.SUCCEEDED)
        if code != 0:
            failure = TaskFailure(
                f"exit_{code}",
                f"{what} exited with code {code}",
                deterministic=True,
                exit_code=code,
            )
            return TaskStatus(handle, TaskState.FAILED, failure)
    if status is ResultStatus.TIMEOUT:
        failure = TaskFailure("timeout", f"{what} ran past its timeout and was stopped by Modal")
    elif status is ResultStatus.TERMINATED:
        failure = TaskFailure(
            "cancelled",
            f"{what} was terminated (by cancel/cleanup, `modal container stop` or the dashboard)",
        )
    elif status in _OOM_STATUSES:
        evicted = status in _EVICTED
        failure = TaskFailure(
            "oom_killed",  # what 0.3.0 consumers saw, eviction or not
            _with_message(
                f"{'evicted: ' if evicted else ''}{what} {_OOM_STATUSES[status]}", result.message
            ),
            exit_code=code or None,
            provider_ending="evicted" if evicted else None,
        )
    elif status is ResultStatus.INTERNAL_FAILURE:
        ending = _internal_ending(result.message)
        failure = TaskFailure(
            "job_failed",
            _with_message(
                f"{ending}: {what} failed inside Modal (GENERIC_STATUS_INTERNAL_FAILURE: the "
                "worker was lost or preempted)",
                result.message,
            ),
            provider_ending=ending,
        )
    elif status in _JOB_FAILED_STATUSES:
        failure = TaskFailure(
            "job_failed", _with_message(f"{what} {_JOB_FAILED_STATUSES[status]}", result.message)
        )
    else:  # SUCCESS/FAILURE without a usable exit code
        failure = TaskFailure(
            "job_failed",
            _with_message(
                f"{what} ended with status {status.value} and no exit code", result.message
            ),
        )
    return TaskStatus(handle, TaskState.FAILED, failure)
