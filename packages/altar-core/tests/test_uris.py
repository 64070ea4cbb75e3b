"""Which transfer uris name files on this machine."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from altar.execution import UnsupportedCapabilityError
from altar.execution.uris import local_file, local_path, local_path_or_none


@pytest.mark.parametrize(
    ("uri", "path"),
    [
        ("/data/ref.fa", "/data/ref.fa"),
        ("rel/weights.bin", "rel/weights.bin"),
        ("chr1:100-200.bed", "chr1:100-200.bed"),  # a colon in a file name is not a scheme
        ("C:/data/x", "C:/data/x"),
        ("file:///a%20b/c", "/a b/c"),
        ("file://localhost/x", "/x"),
        ("file:/x", "/x"),
        ("weird name $(rm -rf ~)\n.txt", "weird name $(rm -rf ~)\n.txt"),
    ],
)
def test_local_uris_name_their_path(uri: str, path: str) -> None:
    assert local_path_or_none(uri) == path
    assert local_file(uri, backend="local") == path


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("gs://bucket/x", "uses the 'gs' scheme; the local backend stages only local paths"),
        ("https://example.org/x", "uses the 'https' scheme"),
        ("s3+custom://b/x", "uses the 's3+custom' scheme"),
        ("file://elsewhere/x", "names host 'elsewhere'; the local backend reads and writes only"),
    ],
)
def test_uris_naming_bytes_elsewhere_are_refused(uri: str, message: str) -> None:
    assert local_path_or_none(uri) is None
    with pytest.raises(UnsupportedCapabilityError, match=re.escape(message)) as caught:
        local_file(uri, backend="local")
    assert caught.value.capability == "transfer_uri"


def test_local_path_decodes_file_uris_on_localhost() -> None:
    # the divergence of issue 12: the reference backend made this 'localhost/tmp/a%20b'
    assert local_path("file://localhost/tmp/a%20b", backend="x") == "/tmp/a b"


def test_no_tilde_expansion_anywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the divergence of issue 12: local made '~/x' relative, Modal made it $HOME/x
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", "/somewhere/else")
    assert local_path("~/x", backend="x") == str(tmp_path / "~" / "x")
    assert local_path("file:///~/x", backend="x") == "/~/x"


def test_local_path_makes_relative_paths_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert local_path("a b/$(x)", backend="x") == str(tmp_path / "a b" / "$(x)")
    with pytest.raises(UnsupportedCapabilityError):
        local_path("s3://b/x", backend="x")
