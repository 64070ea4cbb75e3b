"""Error answers (``Status`` bodies) and the object validation the real API server applies."""

from __future__ import annotations

import re
from typing import Any

from altar.backends.kubernetes.testing.apiserver.objects import JsonDict

__all__ = ["NAME_LABELS", "UID_LABELS", "ApiError", "details", "validate_job"]

# apimachinery's validation patterns (pkg/util/validation), as the real API server applies them
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_VALUE_RULE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
_QUALIFIED_NAME_RULE = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
    "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
    "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
_SUBDOMAIN_RULE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
UID_LABELS = ("batch.kubernetes.io/controller-uid", "controller-uid")
NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: JsonDict | None = None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def body(self) -> JsonDict:
        status: JsonDict = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            status["details"] = self.details
        return status


def details(name: str, kind: str, group: str) -> JsonDict:
    details: JsonDict = {"name": name, "kind": kind}
    if group:
        details["group"] = group
    return details


def _label_errors(field_path: str, labels: Any) -> list[str]:
    errors = []
    for key, value in (labels or {}).items():
        prefix, slash, name = str(key).rpartition("/")
        if slash and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(prefix)):
            errors.append(f'{field_path}: Invalid value: "{key}": prefix part {_SUBDOMAIN_RULE}')
        if len(name) > 63:
            errors.append(
                f'{field_path}: Invalid value: "{key}": name part must be no more than 63 '
                "characters"
            )
        elif not _QUALIFIED_NAME.fullmatch(name):
            errors.append(f'{field_path}: Invalid value: "{key}": {_QUALIFIED_NAME_RULE}')
        text = str(value)
        if len(text) > 63:
            errors.append(
                f'{field_path}: Invalid value: "{text}": must be no more than 63 characters'
            )
        elif not _LABEL_VALUE.fullmatch(text):
            errors.append(f'{field_path}: Invalid value: "{text}": {_LABEL_VALUE_RULE}')
    return errors


def validate_job(body: JsonDict, uid: str) -> None:
    """422 ``Invalid`` for what the real API server refuses in the parts Altar sets."""
    meta = body.get("metadata") or {}
    name = str(meta.get("name") or "")
    errors = []
    template_labels = (((body.get("spec") or {}).get("template") or {}).get("metadata") or {}).get(
        "labels"
    ) or {}
    # The Job controller's own pod labels: the API server adds them, and a template that sets
    # one already must hold the exact value (batch validation's ValidateHasLabel).
    for key, expected in (*((k, uid) for k in UID_LABELS), *((k, name) for k in NAME_LABELS)):
        if key in template_labels and template_labels[key] != expected:
            errors.append(
                f"spec.template.metadata.labels[{key}]: Invalid value: "
                f"\"{template_labels[key]}\": must be '{expected}'"
            )
    if len(name) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(name):
        errors.append(f'metadata.name: Invalid value: "{name}": {_SUBDOMAIN_RULE}')
    elif len(name) > 63:
        # the Job controller copies the name into the pods' job-name label
        errors.append(
            f'spec.template.labels: Invalid value: "{name}": must be no more than 63 characters'
        )
    errors += _label_errors("metadata.labels", meta.get("labels"))
    template = ((body.get("spec") or {}).get("template") or {}).get("metadata") or {}
    errors += _label_errors("spec.template.labels", template.get("labels"))
    if errors:
        joined = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
        raise ApiError(
            422,
            "Invalid",
            f'Job.batch "{name}" is invalid: {joined}',
            details(name, "Job", "batch"),
        )
