"""JSON building blocks of Job and Pod objects, stamped as the real controllers stamp them."""

from __future__ import annotations

import datetime as dt
from typing import Any

__all__ = ["JsonDict", "condition", "container_status", "now", "terminated"]

JsonDict = dict[str, Any]


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def terminated(exit_code: int, reason: str, message: str | None = None) -> JsonDict:
    state: JsonDict = {
        "exitCode": exit_code,
        "reason": reason,
        "startedAt": now(),
        "finishedAt": now(),
    }
    if message:
        state["message"] = message
    return {"terminated": state}


def container_status(name: str, state: JsonDict) -> JsonDict:
    return {
        "name": name,
        "state": state,
        "ready": "running" in state,
        "restartCount": 0,
        "image": "",
        "imageID": "",
    }


def condition(kind: str, reason: str, message: str) -> JsonDict:
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastProbeTime": now(),
        "lastTransitionTime": now(),
    }
