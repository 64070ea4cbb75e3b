"""The local-directory stager and the output collector."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from altar.execution import Transfer, TransferIntegrityError
from altar.execution.digests import stager as stager_module
from altar.execution.digests.digest import has_verification_record
from altar.execution.digests.stager import LocalStager, StageAction, collect_output


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "data root"
    path.mkdir()
    return path


def _never(*args: object, **kwargs: object) -> None:
    raise AssertionError("read a file a record vouched for")


def stager(root: Path, **kwargs: bool) -> LocalStager:
    return LocalStager(lambda logical: root / logical.lstrip("/"), backend="test", **kwargs)


def test_copy_then_record_then_skip(
    tmp_path: Path, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "w $(x).bin"
    source.write_bytes(b"weights")
    transfer = Transfer(
        f"file://localhost{source}".replace(" ", "%20"), "/m/w.bin", digest=digest(b"weights")
    )
    first = stager(root)
    assert first.stage_all([transfer]) == [StageAction.COPIED]
    dest = root / "m" / "w.bin"
    assert dest.read_bytes() == b"weights"
    assert has_verification_record(dest, digest(b"weights"))  # the one "already there" mark
    # a new stager (a new process) skips it without reading it
    with monkeypatch.context() as patch:
        patch.setattr(stager_module, "verify_file", _never)
        patch.setattr(stager_module, "copy_and_verify", _never)
        assert stager(root).stage_all([transfer]) == [StageAction.SKIPPED]
    # ignoring records, it is hashed where it is
    assert stager(root, trust_records=False).stage_all([transfer]) == [StageAction.VERIFIED]


def test_a_mismatch_leaves_nothing(tmp_path: Path, root: Path) -> None:
    source = tmp_path / "w.bin"
    source.write_bytes(b"tampered")
    transfer = Transfer(str(source), "w.bin", digest=digest(b"weights"))
    with pytest.raises(TransferIntegrityError, match="staged input"):
        stager(root).stage_all([transfer])
    assert list(root.iterdir()) == []


def test_stale_bytes_at_the_destination_are_replaced(tmp_path: Path, root: Path) -> None:
    source = tmp_path / "w.bin"
    source.write_bytes(b"weights")
    (root / "w.bin").write_bytes(b"WEIGHTS")  # same size, other bytes, no record
    transfer = Transfer(str(source), "w.bin", digest=digest(b"weights"))
    assert stager(root).stage_all([transfer]) == [StageAction.COPIED]
    assert (root / "w.bin").read_bytes() == b"weights"


def test_a_file_already_in_place_is_verified_and_gets_no_record(root: Path) -> None:
    dest = root / "w.bin"
    dest.write_bytes(b"weights")
    transfer = Transfer(str(dest), "w.bin", digest=digest(b"weights"))
    assert stager(root).stage_all([transfer]) == [StageAction.VERIFIED]
    assert not has_verification_record(dest, digest(b"weights"))
    bad = Transfer(str(dest), "w.bin", digest=digest(b"other"))
    with pytest.raises(TransferIntegrityError):
        stager(root).stage_all([bad])
    assert dest.read_bytes() == b"weights"


def test_plain_inputs_use_the_quick_check(tmp_path: Path, root: Path) -> None:
    source = tmp_path / "notes.txt"
    source.write_bytes(b"v1")
    transfer = Transfer(str(source), "notes.txt")
    assert stager(root).stage(transfer) is StageAction.COPIED
    assert stager(root).stage(transfer) is StageAction.SKIPPED
    source.write_bytes(b"v2")
    os.utime(source, ns=(0, 10**9))
    assert stager(root).stage(transfer) is StageAction.COPIED
    assert (root / "notes.txt").read_bytes() == b"v2"


def test_unjudged_copies_for_task_verifying_backends(tmp_path: Path, root: Path) -> None:
    source = tmp_path / "w.bin"
    source.write_bytes(b"tampered")
    transfer = Transfer(str(source), "w.bin", digest=digest(b"weights"))
    assert stager(root, verify=False).stage(transfer) is StageAction.COPIED
    assert (root / "w.bin").read_bytes() == b"tampered"  # the task will judge it
    missing = Transfer(str(tmp_path / "missing"), "m.bin", digest=digest(b"x"))
    assert stager(root, verify=False).stage(missing) is StageAction.SKIPPED


def test_collect_verifies_a_declared_output_digest(tmp_path: Path, root: Path) -> None:
    (root / "out.bin").write_bytes(b"result")
    dest = tmp_path / "results dir" / "out.bin"
    good = Transfer(str(dest), "out.bin", digest=digest(b"result"))
    collect_output(root / "out.bin", good, backend="test")
    assert dest.read_bytes() == b"result"
    dest.write_bytes(b"previous")
    bad = Transfer(str(dest), "out.bin", digest=digest(b"expected"))
    with pytest.raises(TransferIntegrityError, match=r"output 'out\.bin'"):
        stager(root).collect(bad)
    assert dest.read_bytes() == b"previous"
    assert sorted(p.name for p in dest.parent.iterdir()) == ["out.bin"]  # no temporary left
    with pytest.raises(TransferIntegrityError):  # an output that is its own destination
        collect_output(
            root / "out.bin",
            Transfer(str(root / "out.bin"), "out.bin", digest=digest(b"x")),
            backend="t",
        )
    with pytest.raises(FileNotFoundError, match="was not written by its task"):
        collect_output(root / "never.bin", Transfer(str(dest), "never.bin"), backend="t")


def test_an_earlier_copy_without_a_record_is_verified_once_then_recorded(
    tmp_path: Path, root: Path
) -> None:
    source = tmp_path / "w.bin"
    source.write_bytes(b"weights")
    (root / "w.bin").write_bytes(b"weights")  # a copy whose record was never written
    transfer = Transfer(str(source), "w.bin", digest=digest(b"weights"))
    assert stager(root).stage_all([transfer]) == [StageAction.VERIFIED]
    assert has_verification_record(root / "w.bin", digest(b"weights"))
    assert stager(root).stage_all([transfer]) == [StageAction.SKIPPED]


def test_a_skipped_input_still_sweeps_what_a_killed_process_left_beside_it(
    tmp_path: Path, root: Path
) -> None:
    # Found by tests/crash: a process killed while writing a verification record left its
    # temporary file; the resumed run found the input recorded, skipped it, and kept the litter.
    from altar.execution.atomic import sweeping_for, temp_path

    source = tmp_path / "w.bin"
    source.write_bytes(b"weights")
    transfer = Transfer(str(source), "m/w.bin", digest=digest(b"weights"))
    assert stager(root).stage_all([transfer]) == [StageAction.COPIED]
    dest = root / "m" / "w.bin"
    dead, stranger = 999_999_999, 999_999_998
    theirs = temp_path(dest.with_name(dest.name + ".sha256-verified"), pid=dead)
    other = temp_path(dest, pid=stranger)
    theirs.write_text("partial record")
    other.write_text("someone else's")
    with sweeping_for([dead]):
        assert stager(root).stage_all([transfer]) == [StageAction.SKIPPED]
    assert not theirs.exists()
    assert other.exists()  # not a process of this run: never touched
