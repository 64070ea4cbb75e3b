"""The transfer progress seam: a context-variable callback backends report to."""

from __future__ import annotations

import asyncio
import threading

import pytest
from altar.execution import transfer_progress
from altar.execution.transfer_progress import (
    TransferProgress,
    current_callback,
    format_bytes,
    report,
    reporting_to,
)


def test_without_a_callback_report_does_nothing_and_builds_nothing(monkeypatch):
    def no_report_objects(*args, **kwargs):
        raise AssertionError("a report was built with nobody listening")

    monkeypatch.setattr(transfer_progress, "TransferProgress", no_report_objects)
    assert current_callback() is None
    assert report("ref/genome.fa", 1 << 30, 30 << 30) is None


def test_a_callback_receives_reports_only_inside_its_block():
    seen: list[TransferProgress] = []
    report("before", 1)
    with reporting_to(seen.append):
        report("ref/genome.fa", 10, 100)
        report("ref/genome.fa", 100, 100)
        with reporting_to(None):
            report("silenced", 1)
        report("unknown size", 7)
    report("after", 1)
    assert seen == [
        TransferProgress("ref/genome.fa", 10, 100),
        TransferProgress("ref/genome.fa", 100, 100),
        TransferProgress("unknown size", 7, None),
    ]


@pytest.mark.asyncio
async def test_reports_from_a_thread_started_by_to_thread_reach_the_callback():
    seen: list[tuple[str, TransferProgress]] = []
    lock = threading.Lock()

    def callback(progress: TransferProgress) -> None:
        with lock:
            seen.append((threading.current_thread().name, progress))

    def copy_in_a_thread(label: str) -> None:
        for done in (1, 2, 3):
            report(label, done, 3)

    with reporting_to(callback):
        await asyncio.gather(
            asyncio.to_thread(copy_in_a_thread, "a"), asyncio.to_thread(copy_in_a_thread, "b")
        )
    main = threading.current_thread().name
    assert sorted((p.label, p.done) for _, p in seen) == [
        ("a", 1), ("a", 2), ("a", 3), ("b", 1), ("b", 2), ("b", 3)
    ]  # fmt: skip
    assert all(name != main for name, _ in seen)
    assert [p.done for _, p in seen if p.label == "a"] == [1, 2, 3]


def test_a_plain_thread_does_not_inherit_but_can_be_handed_the_callback():
    seen: list[TransferProgress] = []
    with reporting_to(seen.append):
        plain = threading.Thread(target=report, args=("plain", 1))
        plain.start()
        plain.join()
        callback = current_callback()
    assert seen == []
    assert callback is not None

    def handed() -> None:
        with reporting_to(callback):
            report("handed", 2)

    thread = threading.Thread(target=handed)
    thread.start()
    thread.join()
    assert seen == [TransferProgress("handed", 2, None)]


def test_format_bytes():
    assert format_bytes(0) == "0 B"
    assert format_bytes(1023) == "1023 B"
    assert format_bytes(1024) == "1.0 KiB"
    assert format_bytes(int(3.2 * (1 << 30))) == "3.2 GiB"
    assert format_bytes(10 << 30) == "10.0 GiB"
    assert format_bytes(3 << 40) == "3.0 TiB"
    assert format_bytes(5000 << 40) == "5000.0 TiB"
