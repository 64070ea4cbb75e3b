"""Staging inputs (altar-core's LocalStager over the data root): verified one-pass copies,
records, containment, concurrency."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import os
import threading
import time
from pathlib import Path

import altar.execution.digests.digest as digest_module
import altar.execution.digests.stager as staging_module
import pytest
from altar.backends.local import LocalDockerExecutionBackend, StageAction
from altar.backends.local.fake import FakeDockerRuntime
from altar.backends.local.staging import Stager, local_path
from altar.execution import (
    ContainerTaskSpec,
    Transfer,
    TransferIntegrityError,
    UnsupportedCapabilityError,
    has_verification_record,
)
from altar.execution.digests.digest import verification_record_line
from altar.execution.transfer_progress import TransferProgress, reporting_to

MiB = 1 << 20


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def make(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "data root"


@pytest.fixture
def weights(tmp_path: Path) -> Path:
    return make(tmp_path / "src" / "fold 0 weights.bin", b"weights-0" * 1000)


def forbid_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make any hash or copy of file bytes fail the test."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"file bytes were read: {args!r}")

    monkeypatch.setattr(digest_module, "_hash_fd", refuse)
    monkeypatch.setattr(staging_module, "copy_and_verify", refuse)
    monkeypatch.setattr(staging_module, "verify_file", refuse)


def later(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let the status-change second of every file so far be over (records need that)."""
    time.sleep(1.1)


def test_first_staging_copies_into_the_data_root(root: Path, weights: Path) -> None:
    stager = Stager(str(root))
    transfer = Transfer(str(weights), "models/fold 0/w.bin", digest=sha(weights.read_bytes()))
    assert stager.stage(transfer) is StageAction.COPIED
    dest = root / "models/fold 0/w.bin"
    assert dest.read_bytes() == weights.read_bytes()
    assert not [p for p in dest.parent.iterdir() if p.name.endswith(".partial")]


def test_weakness_11_second_staging_copies_and_hashes_nothing_even_for_a_small_file(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small = make(tmp_path / "tiny.txt", b"x")  # copied in far less than a second
    transfer = Transfer(str(small), "tiny.txt", digest=sha(b"x"))
    assert Stager(str(root)).stage_all([transfer]) == [StageAction.COPIED]
    inode = (root / "tiny.txt").stat().st_ino
    forbid_reading(monkeypatch)
    assert Stager(str(root)).stage(transfer) is StageAction.SKIPPED  # a fresh stager, too
    assert (root / "tiny.txt").stat().st_ino == inode


def test_records_of_fresh_copies_are_written_when_the_staging_ends(
    root: Path, weights: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No staging index any more: the core stager writes the verification record once the
    copy's status-change second is over, at the end of the staging that made it."""
    transfer = Transfer(str(weights), "w.bin", digest=sha(weights.read_bytes()))
    stager = Stager(str(root))
    stager.stage(transfer)
    dest = root / "w.bin"
    assert not has_verification_record(dest, transfer.digest or "")  # same second: not yet
    assert stager.settle_records() == 1
    assert has_verification_record(dest, transfer.digest or "")
    record = Path(str(dest) + ".sha256-verified").read_text()
    assert record == verification_record_line(transfer.digest or "", dest.stat()) + "\n"
    assert not (root / ".altar-staging").exists()
    forbid_reading(monkeypatch)
    assert stager.stage(transfer) is StageAction.SKIPPED


def test_a_record_written_by_another_verifier_is_trusted(
    root: Path, weights: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dest = make(root / "w.bin", weights.read_bytes())
    digest = sha(weights.read_bytes())
    later(monkeypatch)
    assert digest_module.verify_file_digest(dest, digest)  # hashes and records
    forbid_reading(monkeypatch)
    assert Stager(str(root)).stage(Transfer(str(weights), "w.bin", digest=digest)) is (
        StageAction.SKIPPED
    )


def test_mismatch_raises_and_leaves_no_file_behind(root: Path, weights: Path) -> None:
    before = weights.read_bytes()
    transfer = Transfer(str(weights), "w.bin", digest=sha(b"other bytes"))
    with pytest.raises(TransferIntegrityError, match="expected sha256:"):
        Stager(str(root)).stage(transfer)
    assert weights.read_bytes() == before
    assert not (root / "w.bin").exists()
    assert not [p for p in root.rglob("*") if p.name.endswith(".partial")]


def test_weakness_1_a_caller_file_at_its_destination_is_never_deleted(root: Path) -> None:
    own = make(root / "models" / "w.bin", b"caller bytes")
    transfer = Transfer(str(own), "models/w.bin", digest=sha(b"expected bytes"))
    with pytest.raises(TransferIntegrityError):
        Stager(str(root)).stage(transfer)
    assert own.read_bytes() == b"caller bytes"


def test_weakness_1_no_record_is_written_beside_a_callers_file(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    own = make(root / "w.bin", b"caller bytes")
    transfer = Transfer(f"file://{own}", "w.bin", digest=sha(b"caller bytes"))
    later(monkeypatch)
    stager = Stager(str(root))
    assert stager.stage(transfer) is StageAction.VERIFIED
    stager.settle_records()
    assert stager.stage(transfer) is StageAction.VERIFIED  # hashed again: no record beside it
    assert not Path(str(own) + ".sha256-verified").exists()
    assert own.read_bytes() == b"caller bytes"


def test_a_changed_destination_is_detected_and_replaced(root: Path, weights: Path) -> None:
    data = weights.read_bytes()
    transfer = Transfer(str(weights), "w.bin", digest=sha(data))
    stager = Stager(str(root))
    stager.stage(transfer)
    dest = root / "w.bin"
    time.sleep(0.05)  # past the kernel's timestamp tick, so the rewrite shows in ctime_ns
    with open(dest, "r+b") as handle:  # same size, same inode, different bytes
        handle.write(b"X")
    assert stager.stage(transfer) is StageAction.COPIED
    assert dest.read_bytes() == data


def test_a_replaced_destination_is_detected(root: Path, weights: Path) -> None:
    data = weights.read_bytes()
    transfer = Transfer(str(weights), "w.bin", digest=sha(data))
    stager = Stager(str(root))
    stager.stage(transfer)
    make(root / "other.bin", b"Y" * len(data)).replace(root / "w.bin")
    assert stager.stage(transfer) is StageAction.COPIED
    assert (root / "w.bin").read_bytes() == data


def test_an_unindexed_destination_with_the_right_bytes_is_hashed_not_copied(
    root: Path, weights: Path
) -> None:
    data = weights.read_bytes()
    dest = make(root / "w.bin", data)
    inode = dest.stat().st_ino
    assert Stager(str(root)).stage(Transfer(str(weights), "w.bin", digest=sha(data))) is (
        StageAction.VERIFIED
    )
    assert dest.stat().st_ino == inode


def test_weakness_12_records_can_be_distrusted(
    root: Path, weights: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = weights.read_bytes()
    transfer = Transfer(str(weights), "w.bin", digest=sha(data))
    Stager(str(root)).stage_all([transfer])  # writes the record at its end
    assert has_verification_record(root / "w.bin", transfer.digest or "")
    distrusting = Stager(str(root), trust_records=False)
    hashed: list[object] = []
    real = staging_module.verify_file

    def spy(*args: object, **kwargs: object) -> bool:
        hashed.append(args[0])
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(staging_module, "verify_file", spy)
    assert distrusting.stage(transfer) is StageAction.VERIFIED
    assert hashed == [str(root / "w.bin")]


def test_a_forged_record_is_not_trusted_when_told_not_to(root: Path, weights: Path) -> None:
    dest = make(root / "w.bin", b"tampered" + b"\0" * (len(weights.read_bytes()) - 8))
    digest = sha(weights.read_bytes())
    Path(str(dest) + ".sha256-verified").write_text(
        verification_record_line(digest, dest.stat()) + "\n"
    )
    assert Stager(str(root)).stage(Transfer(str(weights), "w.bin", digest=digest)) is (
        StageAction.SKIPPED
    )  # trusted by default, as documented
    assert (
        Stager(str(root), trust_records=False).stage(Transfer(str(weights), "w.bin", digest=digest))
        is StageAction.COPIED
    )
    assert dest.read_bytes() == weights.read_bytes()


def test_a_directory_with_a_digest_is_refused(root: Path, tmp_path: Path) -> None:
    folder = tmp_path / "weights"
    make(folder / "part", b"p")
    with pytest.raises(TransferIntegrityError, match="regular file"):
        Stager(str(root)).stage(Transfer(str(folder), "models/weights", digest=sha(b"p")))


def test_a_missing_source_with_a_digest_is_refused(root: Path, tmp_path: Path) -> None:
    with pytest.raises(TransferIntegrityError, match="does not exist"):
        Stager(str(root)).stage(Transfer(str(tmp_path / "nope"), "x", digest=sha(b"p")))


def test_inputs_without_digest_are_copied_once_until_the_source_changes(
    root: Path, tmp_path: Path
) -> None:
    variants = make(tmp_path / "variants.tsv", b"chr1\t100\tA\tG\n")
    transfer = Transfer(str(variants), "jobs/J/variants.tsv")
    stager = Stager(str(root))
    assert stager.stage(transfer) is StageAction.COPIED
    assert stager.stage(transfer) is StageAction.SKIPPED
    time.sleep(0.05)
    variants.write_bytes(b"chr2\t200\tC\tT\n")
    assert stager.stage(transfer) is StageAction.COPIED
    assert (root / "jobs/J/variants.tsv").read_bytes() == b"chr2\t200\tC\tT\n"


def test_weakness_11_a_reader_of_the_old_copy_never_sees_mixed_bytes(
    root: Path, tmp_path: Path
) -> None:
    first = make(tmp_path / "a.bin", b"A" * 100_000)
    stager = Stager(str(root))
    stager.stage(Transfer(str(first), "w.bin"))
    with open(root / "w.bin", "rb") as reader:  # a running task holds the old input open
        make(first, b"B" * 100_000)
        stager.stage(Transfer(str(first), "w.bin"))
        assert reader.read() == b"A" * 100_000
    assert (root / "w.bin").read_bytes() == b"B" * 100_000


@pytest.mark.parametrize(
    "logical", ["a b/c 'd'.bin", 'q"uote/$(id).bin', "new\nline.bin", "/abs/style.bin"]
)
def test_hostile_logical_paths_stay_inside_the_data_root(
    root: Path, weights: Path, logical: str
) -> None:
    Stager(str(root)).stage(Transfer(str(weights), logical))
    assert (root / logical.lstrip("/")).read_bytes() == weights.read_bytes()


def test_escaping_logical_paths_are_refused(root: Path, weights: Path) -> None:
    with pytest.raises(ValueError, match="leaves the data root"):
        Stager(str(root)).stage(Transfer(str(weights), "../outside.bin"))
    assert not (root.parent / "outside.bin").exists()


@pytest.mark.parametrize("logical", [".", "/", "a/..", "./"])
def test_a_logical_path_naming_the_data_root_itself_is_refused(
    root: Path, weights: Path, logical: str
) -> None:
    """Nothing is written beside the data root (the copy's temporary file went there), and
    a data root that does not exist yet is not replaced by the input."""
    for digest in (None, sha(weights.read_bytes())):
        with pytest.raises(ValueError, match="names the data root itself"):
            Stager(str(root)).stage(Transfer(str(weights), logical, digest=digest))
    assert not root.exists()
    assert sorted(p.name for p in root.parent.iterdir()) == ["src"]


def test_a_task_made_symlink_cannot_lead_staging_outside_the_data_root(
    root: Path, weights: Path, tmp_path: Path
) -> None:
    """Tasks mount the data root read-write and run as its owner: a directory they replace
    with a symlink to a host path must not make staging write there."""
    elsewhere = tmp_path / "home"
    elsewhere.mkdir()
    root.mkdir()
    (root / "models").symlink_to(elsewhere)
    for digest in (None, sha(weights.read_bytes())):
        with pytest.raises(ValueError, match="outside the data root"):
            Stager(str(root)).stage(Transfer(str(weights), "models/fold 0/w.bin", digest=digest))
    assert list(elsewhere.iterdir()) == []


def test_a_task_made_symlink_cannot_lead_the_staging_index_outside(
    root: Path, weights: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "home"
    elsewhere.mkdir()
    root.mkdir()
    (root / ".altar-staging").symlink_to(elsewhere)
    transfer = Transfer(str(weights), "w.bin", digest=sha(weights.read_bytes()))
    assert Stager(str(root)).stage(transfer) is StageAction.COPIED
    assert list(elsewhere.iterdir()) == []  # no index entry written there
    assert (root / "w.bin").read_bytes() == weights.read_bytes()


@pytest.mark.asyncio
async def test_a_task_made_symlink_cannot_collect_a_host_file(tmp_path: Path) -> None:
    """An output a task replaced with a symlink to a host file (its private key, say) is not
    copied out: collecting it would hand the task's output reader a file the task never saw."""
    secret = make(tmp_path / "home/.ssh/id_ed25519", b"PRIVATE KEY")
    backend = LocalDockerExecutionBackend(
        data_root=tmp_path / "d", runtime=FakeDockerRuntime(), watchdog=False
    )
    (tmp_path / "d/jobs/J").mkdir(parents=True)
    (tmp_path / "d/jobs/J/scores.tsv").symlink_to(secret)
    (tmp_path / "d/jobs/K").symlink_to(secret.parent)
    out = tmp_path / "results/scores.tsv"
    for logical in ("jobs/J/scores.tsv", "jobs/K/id_ed25519"):
        with pytest.raises(ValueError, match="outside the data root"):
            await backend.collect_outputs([Transfer(str(out), logical)])
        assert not out.exists()


@pytest.mark.asyncio
async def test_submit_never_deletes_a_host_file_through_a_task_made_symlink(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    keep = make(home / "scores.tsv", b"the user's own file")
    backend = LocalDockerExecutionBackend(
        data_root=tmp_path / "d", runtime=FakeDockerRuntime(), watchdog=False
    )
    (tmp_path / "d").mkdir()
    (tmp_path / "d/out").symlink_to(home)
    spec = ContainerTaskSpec(
        kind="k",
        image="busybox:latest",
        command=["true"],
        outputs=[Transfer("results/scores.tsv", "out/scores.tsv")],
    )
    with pytest.raises(ValueError, match="outside the data root"):
        await backend.submit(spec)
    assert keep.read_bytes() == b"the user's own file"
    # A stale output that is itself a symlink is only unlinked, never followed.
    (tmp_path / "d/out").unlink()
    (tmp_path / "d/out").mkdir()
    (tmp_path / "d/out/scores.tsv").symlink_to(keep)
    await backend.submit(spec)
    assert not (tmp_path / "d/out/scores.tsv").is_symlink()
    assert keep.read_bytes() == b"the user's own file"


def test_uris(tmp_path: Path) -> None:
    assert local_path("file:///a%20b/c") == "/a b/c"
    assert local_path("file://localhost/x") == "/x"
    assert local_path("rel/x") == os.path.abspath("rel/x")
    assert local_path("chr1:100-200.bed") == os.path.abspath("chr1:100-200.bed")
    with pytest.raises(UnsupportedCapabilityError, match="'gs' scheme") as caught:
        local_path("gs://bucket/x")
    assert caught.value.capability == "transfer_uri"  # the name the Modal backend uses too
    with pytest.raises(UnsupportedCapabilityError, match="host") as caught:
        local_path("file://elsewhere/x")
    assert caught.value.capability == "transfer_uri"


def test_weakness_11_concurrent_stagings_of_one_file_from_many_threads(
    root: Path, tmp_path: Path
) -> None:
    data = os.urandom(4 << 20)
    source = make(tmp_path / "big.bin", data)
    transfer = Transfer(str(source), "shared/big.bin", digest=sha(data))
    results: list[StageAction] = []
    errors: list[BaseException] = []

    def stage(stager: Stager) -> None:
        try:
            results.append(stager.stage(transfer))
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=stage, args=(Stager(str(root)),)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert results.count(StageAction.COPIED) == 1
    assert (root / "shared/big.bin").read_bytes() == data
    assert not [p for p in root.rglob("*") if p.name.endswith((".partial", ".tmp"))]


@pytest.mark.asyncio
async def test_two_concurrent_stage_inputs_calls(tmp_path: Path) -> None:
    data = b"reference genome" * 50_000
    source = make(tmp_path / "ref.fa", data)
    engine = FakeDockerRuntime()
    one = LocalDockerExecutionBackend(data_root=tmp_path / "d", runtime=engine, watchdog=False)
    two = LocalDockerExecutionBackend(data_root=tmp_path / "d", runtime=engine, watchdog=False)
    transfer = Transfer(str(source), "ref/ref.fa", digest=sha(data))
    await asyncio.gather(one.stage_inputs([transfer]), two.stage_inputs([transfer]))
    actions = sorted(a for _, a in one.last_staging + two.last_staging)
    # One copies; the other waits for it and then hashes it in place (its record is written
    # when the copying staging ends) or finds the record: never a second copy.
    assert actions[0] is StageAction.COPIED
    assert actions[1] in (StageAction.SKIPPED, StageAction.VERIFIED)
    assert (tmp_path / "d/ref/ref.fa").read_bytes() == data


@pytest.mark.asyncio
async def test_stage_inputs_refuses_two_sources_for_one_path(tmp_path: Path) -> None:
    backend = LocalDockerExecutionBackend(
        data_root=tmp_path / "d", runtime=FakeDockerRuntime(), watchdog=False
    )
    a = make(tmp_path / "a", b"a")
    b = make(tmp_path / "b", b"b")
    with pytest.raises(ValueError, match="two inputs claim"):
        await backend.stage_inputs([Transfer(str(a), "x"), Transfer(str(b), "x")])


@pytest.mark.parametrize("other", ["/x/y", "x//y", "./x/y", "x/z/../y"])
@pytest.mark.asyncio
async def test_stage_inputs_refuses_two_sources_for_one_path_however_it_is_spelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, other: str
) -> None:
    """Two spellings of one logical path are one destination: which source a task read would
    depend on the order the concurrent copies finished in."""
    monkeypatch.chdir(tmp_path)
    backend = LocalDockerExecutionBackend(
        data_root=tmp_path / "d", runtime=FakeDockerRuntime(), watchdog=False
    )
    a = make(tmp_path / "a", b"a")
    b = make(tmp_path / "b", b"b")
    with pytest.raises(ValueError, match="two inputs claim"):
        await backend.stage_inputs([Transfer(str(a), "x/y"), Transfer(str(b), other)])
    assert not (tmp_path / "d/x/y").exists()
    # One source, spelled two ways, for one path is no conflict.
    await backend.stage_inputs([Transfer(str(a), "x/y"), Transfer("./a", other)])
    assert (tmp_path / "d/x/y").read_bytes() == b"a"


@pytest.mark.asyncio
async def test_collect_outputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # a relative uri names a file under the working directory
    backend = LocalDockerExecutionBackend(
        data_root=tmp_path / "d", runtime=FakeDockerRuntime(), watchdog=False
    )
    make(tmp_path / "d/jobs/J/scores.tsv", b"score\n1\n")
    out = tmp_path / "results dir" / "scores.tsv"
    await backend.collect_outputs([Transfer(str(out), "jobs/J/scores.tsv")])
    assert out.read_bytes() == b"score\n1\n"
    await backend.collect_outputs([Transfer("copy/scores.tsv", "jobs/J/scores.tsv")])
    assert (tmp_path / "copy/scores.tsv").read_bytes() == b"score\n1\n"
    with pytest.raises(FileNotFoundError, match="was not written"):
        await backend.collect_outputs([Transfer(str(out), "jobs/J/missing.tsv")])


# -- progress -------------------------------------------------------------------------------


def reports_by_label(seen: list[TransferProgress]) -> dict[str, list[tuple[int, int | None]]]:
    by_label: dict[str, list[tuple[int, int | None]]] = {}
    for progress in seen:
        by_label.setdefault(progress.label, []).append((progress.done, progress.total))
    return by_label


@pytest.mark.asyncio
async def test_staging_reports_progress_while_copying_and_once_when_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    size = 40 * MiB + 3  # more than one reporting step of copy_and_verify
    genome = make(tmp_path / "src/genome.fa", b"ACGT" * (size // 4) + b"ACG")
    small = make(tmp_path / "src/small.txt", b"tiny")
    backend = LocalDockerExecutionBackend(
        data_root=tmp_path / "d", runtime=FakeDockerRuntime(), watchdog=False
    )
    transfers = [
        Transfer(str(genome), "ref/genome.fa", digest=sha(genome.read_bytes())),
        Transfer(str(small), "ref/small.txt"),
    ]
    seen: list[TransferProgress] = []
    lock = threading.Lock()

    def callback(progress: TransferProgress) -> None:
        with lock:
            seen.append(progress)

    with reporting_to(callback):
        await backend.stage_inputs(transfers)
    reports = reports_by_label(seen)
    assert set(reports) == {"ref/genome.fa", "ref/small.txt"}
    genome_done = [done for done, _ in reports["ref/genome.fa"]]
    assert len(genome_done) >= 2  # during the copy, not only at its end
    assert all(a < b for a, b in itertools.pairwise(genome_done))
    assert genome_done[-1] == size
    assert {total for _, total in reports["ref/genome.fa"]} == {size}
    assert reports["ref/small.txt"] == [(4, 4)]

    # staged again: the index vouches, nothing is read, each input is reported done once
    seen.clear()
    forbid_reading(monkeypatch)
    with reporting_to(callback):
        await backend.stage_inputs(transfers)
    assert [a for _, a in backend.last_staging] == [StageAction.SKIPPED] * 2
    assert reports_by_label(seen) == {"ref/genome.fa": [(size, size)], "ref/small.txt": [(4, 4)]}


def test_staging_without_a_listener_reports_to_nobody(root: Path, weights: Path) -> None:
    transfer = Transfer(str(weights), "w.bin", digest=sha(weights.read_bytes()))
    assert Stager(str(root)).stage(transfer) is StageAction.COPIED  # no callback: no error
