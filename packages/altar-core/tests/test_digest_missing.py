"""A missing or unreadable file is named as such, not as "not a regular file" (issue 15)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from altar.execution import Transfer, TransferIntegrityError
from altar.execution.digests.digest import (
    copy_and_verify,
    require_digest_file,
    verify_file_digest,
    verify_transfer_digest,
)


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def test_copy_of_a_missing_source_says_it_does_not_exist(tmp_path: Path) -> None:
    source = tmp_path / "gone.bin"
    with pytest.raises(TransferIntegrityError) as caught:
        copy_and_verify(source, tmp_path / "dest", sha(b"x"), label="staged input 'gone.bin'")
    message = str(caught.value)
    assert message == f"staged input 'gone.bin' at {str(source)!r} does not exist"
    assert "regular file" not in message
    assert "archive" not in message


def test_copy_under_a_file_that_is_not_a_directory_does_not_exist(tmp_path: Path) -> None:
    (tmp_path / "plain").write_bytes(b"")
    source = tmp_path / "plain" / "inside.bin"
    with pytest.raises(TransferIntegrityError, match="does not exist"):
        copy_and_verify(source, tmp_path / "dest", sha(b"x"))


def test_copy_of_an_unopenable_source_names_the_reason(tmp_path: Path, monkeypatch) -> None:
    import errno

    from altar.execution.digests import digest as digest_module

    source = tmp_path / "w.bin"
    source.write_bytes(b"weights")
    real_open = os.open

    def refuse(target, *args, **kwargs):
        if os.fspath(target) == str(source):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(target))
        return real_open(target, *args, **kwargs)

    monkeypatch.setattr(digest_module.os, "open", refuse)
    with pytest.raises(TransferIntegrityError) as caught:
        copy_and_verify(source, tmp_path / "dest", sha(b"weights"), label="input")
    assert str(caught.value) == f"input at {str(source)!r} cannot be read: Permission denied"


def test_verify_of_a_missing_file_says_it_does_not_exist(tmp_path: Path) -> None:
    path = tmp_path / "absent"
    with pytest.raises(TransferIntegrityError) as caught:
        verify_file_digest(path, sha(b"x"))
    assert str(caught.value) == f"file at {str(path)!r} does not exist"
    transfer = Transfer(uri="s3://bucket/x", logical_path="inputs/x", digest=sha(b"x"))
    with pytest.raises(TransferIntegrityError, match="does not exist"):
        verify_transfer_digest(transfer, path)


def test_require_digest_file_tells_missing_from_directory(tmp_path: Path) -> None:
    transfer = Transfer(uri=str(tmp_path / "absent"), logical_path="in/a", digest=sha(b"x"))
    with pytest.raises(TransferIntegrityError) as caught:
        require_digest_file(transfer, tmp_path / "absent")
    assert str(caught.value).endswith("does not exist")
    with pytest.raises(TransferIntegrityError, match="ship a directory as an archive"):
        require_digest_file(transfer, tmp_path)


def test_copy_of_a_missing_source_without_digest_is_a_plain_oserror(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        copy_and_verify(tmp_path / "src", tmp_path / "dest")
    assert os.listdir(tmp_path) == []


def test_a_directory_is_still_not_a_regular_file(tmp_path: Path) -> None:
    with pytest.raises(TransferIntegrityError, match="ship a directory as an archive"):
        copy_and_verify(tmp_path, tmp_path / "dest", sha(b"x"))
