"""Reserved labels, submission keys and handle minting."""

from __future__ import annotations

import hashlib

import pytest
from altar.execution import ContainerTaskSpec, mint_handle
from altar.execution.labels import (
    LABEL_ATTEMPT,
    LABEL_RUN,
    LABEL_SUBMISSION,
    LABEL_TASK,
    is_submission_key,
    reserved_labels,
    submission_key,
    submission_labels,
)


def test_the_key_is_the_documented_hash() -> None:
    expected = hashlib.sha256(b"r1\x00fold-1\x003").hexdigest()[:32]
    assert submission_key("r1", "fold-1", 3) == expected
    assert is_submission_key(expected)
    assert submission_key("r1", "fold-1", 3) != submission_key("r1", "fold-1", 4)
    assert submission_key("r1", "ab", 1) != submission_key("r1a", "b", 1)
    with pytest.raises(ValueError):
        submission_key("r", "t", 0)


def test_submission_labels() -> None:
    labels = submission_labels("r1", "t", 2)
    assert labels == {
        LABEL_RUN: "r1",
        LABEL_TASK: "t",
        LABEL_ATTEMPT: "2",
        LABEL_SUBMISSION: submission_key("r1", "t", 2),
    }
    assert submission_labels("r1", "t", 5, key="k" * 32)[LABEL_SUBMISSION] == "k" * 32
    assert reserved_labels({"altar.x": "1", "fold": "2", "altarx": "3"}) == ["altar.x"]
    assert not is_submission_key("ABCDEF" * 5 + "ab")


def test_mint_handle_copies_labels_and_carries_the_identity() -> None:
    spec = ContainerTaskSpec(
        kind="k", image="i", command=[], labels={"fold": "1"}, plugin_identity={"p": [1]}
    )
    handle = mint_handle("local", spec, "abc", extra_labels={"name": "n"})
    assert (handle.backend, handle.external_id) == ("local", "abc")
    assert handle.labels == {"fold": "1", "name": "n"}
    assert handle.plugin_identity == {"p": [1]}
    handle.labels["fold"] = "changed"
    assert spec.labels == {"fold": "1"}
