"""The task cache key: what is in it, what is not, and how a miss is explained (issue 25)."""

from __future__ import annotations

import dataclasses

import pytest
from altar.execution import ContainerTaskSpec, ResourceRequest, Transfer
from altar.execution.cache import TaskKey, UncacheableError, explain, task_key
from altar.execution.cache.key import image_identity

PINNED = "busybox@sha256:" + "a" * 64
W1 = "sha256:" + "1" * 64
W2 = "sha256:" + "2" * 64


def spec(**changes: object) -> ContainerTaskSpec:
    values: dict[str, object] = {
        "kind": "score",
        "image": PINNED,
        "command": ["score", "{altar:mount_root}/w.bin"],
        "inputs": [Transfer("weights.bin", "jobs/w.bin", digest=W1)],
        "outputs": [Transfer("out/s.txt", "jobs/s.txt")],
        "env": {"TOKEN": "s3cret value"},
    }
    values.update(changes)
    return ContainerTaskSpec(**values)  # type: ignore[arg-type]


def key(s: ContainerTaskSpec, inputs: dict[str, str] | None = None, salt: str = "") -> TaskKey:
    return task_key(
        s, image=image_identity(s.image), inputs=inputs or {"jobs/w.bin": W1}, cache_version=salt
    )


def test_the_key_ignores_what_cannot_change_the_outputs():
    base = key(spec())
    for same in (
        spec(labels={"lab": "x"}),
        spec(resources=ResourceRequest(memory_gb=64, cpu=8)),
        spec(timeout_s=99),
        spec(kind="other-kind-name"),
        spec(inputs=[Transfer("/elsewhere/weights copy.bin", "jobs/w.bin", digest=W1)]),
    ):
        assert key(same).digest == base.digest


@pytest.mark.parametrize(
    ("changed", "inputs", "salt", "why"),
    [
        (spec(command=["score", "--fast"]), None, "", "command changed"),
        (spec(env={"TOKEN": "other"}), None, "", "env TOKEN value changed"),
        (spec(env={}), None, "", "env TOKEN removed"),
        (spec(), {"jobs/w.bin": W2}, "", "input jobs/w.bin digest changed"),
        (spec(outputs=[Transfer("o", "jobs/t.txt")]), None, "", "outputs changed"),
        (spec(resources=ResourceRequest(gpu="a100")), None, "", "gpu changed"),
        (spec(image="busybox@sha256:" + "b" * 64), None, "", "image changed"),
        (spec(), None, "v2", "cache_version changed"),
    ],
)
def test_every_field_that_shapes_the_outputs_changes_the_key_and_is_named(
    changed, inputs, salt, why
):
    base, other = key(spec()), key(changed, inputs, salt)
    assert other.digest != base.digest
    lines = explain(other.fields, base.fields)
    assert len(lines) == 1
    assert lines[0].startswith(why)


def test_env_values_are_kept_only_as_digests():
    fields = key(spec()).fields
    assert "s3cret" not in repr(fields)
    assert "s3cret" not in " ".join(explain(key(spec(env={"TOKEN": "x"})).fields, fields))


def test_a_tag_is_uncacheable_unless_trusted_and_a_resolved_digest_pins_it():
    with pytest.raises(UncacheableError, match="cache_trust_tags"):
        image_identity("busybox:latest")
    assert image_identity("busybox:latest", trust_tags=True) == "tag:busybox:latest"
    resolved = "sha256:" + "c" * 64
    assert image_identity("busybox:latest", resolved) == resolved
    assert image_identity(PINNED) == "sha256:" + "a" * 64  # the repo name is not the content
    with pytest.raises(ValueError, match="resolved image digest"):
        image_identity("busybox:latest", "latest")


def test_every_input_needs_a_digest_and_input_order_does_not_matter():
    two = [Transfer("a", "jobs/a", digest=W1), Transfer("b", "jobs/b", digest=W2)]
    digests = {"jobs/a": W1, "jobs/b": W2}
    forward = task_key(spec(inputs=two), image="sha256:" + "a" * 64, inputs=digests)
    backward = task_key(spec(inputs=two[::-1]), image="sha256:" + "a" * 64, inputs=digests)
    assert forward.digest == backward.digest
    with pytest.raises(ValueError, match="jobs/b"):
        task_key(spec(inputs=two), image="x", inputs={"jobs/a": W1})


def test_the_key_is_stable_across_processes_and_versions_of_this_code():
    # pinned: a change here forfeits every user's cache, so it must be deliberate
    s = dataclasses.replace(spec(), env={})
    golden = "sha256:4093db451e4acf58d4ee47c4f9006ccf3bed47dda196d213daf8afec06abe55a"
    assert key(s).digest == golden
    assert key(s).fields["format"] == "altar-task-key/1"
