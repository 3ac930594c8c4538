"""Blocks reserved ahead of a busy segment's appends (log/reserve.py): never visible in
the file's size or contents, freed when the segment is rolled, closed or truncated, and
an append that cannot reserve appends all the same."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from odradek.log import LogConfig, PartitionLog
from odradek.log import reserve as reserve_module
from odradek.log import segment as segment_module
from odradek.log.reserve import RESERVE_BYTES
from odradek.protocol.records import build_batch, decode_records

BATCH_VALUES = 64  # x 4 KiB values: a batch of about 256 KiB, as a producer sends


def batch(tag: int) -> bytes:
    return build_batch(
        [(None, bytes([tag % 256]) * 4096, ()) for _ in range(BATCH_VALUES)], timestamp_ms=1000
    )


def open_log(path: Path) -> PartitionLog:
    return PartitionLog.open(path, LogConfig(), now_ms=lambda: 1_000_000)


def allocated(path: Path) -> int:
    return os.stat(path).st_blocks * 512


def active_file(log: PartitionLog) -> Path:
    return sorted(log.directory.glob("*.log"))[-1]


def fill_past_reserve_threshold(log: PartitionLog) -> int:
    """Append until the active segment is busy (over RESERVE_BYTES) and has reserved."""
    n = 0
    while os.stat(active_file(log)).st_size <= RESERVE_BYTES + len(batch(0)):
        log.append(batch(n))
        n += 1
    return n


def reserving_works(tmp_path: Path) -> bool:
    """Whether this filesystem takes a KEEP_SIZE fallocate (ext4, xfs, tmpfs do)."""
    probe = tmp_path / "probe"
    fd = os.open(probe, os.O_CREAT | os.O_WRONLY)
    try:
        return reserve_module.reserve(fd, 0, 1 << 20)
    finally:
        os.close(fd)
        probe.unlink()


@pytest.fixture
def busy_log(tmp_path: Path) -> tuple[PartitionLog, int, Path]:
    """A log whose active segment is busy and has reserved blocks: (log, batches, its file).
    On a filesystem without fallocate(KEEP_SIZE) there is nothing to free, and the tests
    using this are skipped; the last test covers appending without."""
    if not reserving_works(tmp_path):
        pytest.skip("this filesystem has no fallocate(KEEP_SIZE): covered by the last test")
    log = open_log(tmp_path / "p")
    n = fill_past_reserve_threshold(log)
    return log, n, active_file(log)


def test_a_busy_segment_reserves_ahead_and_shows_only_what_was_appended(
    busy_log: tuple[PartitionLog, int, Path],
) -> None:
    log, n, path = busy_log
    size = os.stat(path).st_size
    assert size == log.size_bytes  # the reservation is not in the size
    assert allocated(path) >= size + RESERVE_BYTES // 2  # but it is on disk
    records = list(decode_records(b"".join(log.iter_batches_from(0))))
    assert [r.offset for r in records] == list(range(n * BATCH_VALUES))
    assert path.read_bytes() == b"".join(log.iter_batches_from(0))  # nothing past the end
    log.roll()
    log.drain()  # the rolled segment is finished by a worker: it frees the reservation
    assert allocated(path) < size + 64 * 1024
    log.close()


def test_closing_frees_the_reservation_and_reopening_reads_the_same(
    busy_log: tuple[PartitionLog, int, Path],
) -> None:
    log, n, path = busy_log
    log.close()
    size = os.stat(path).st_size
    assert allocated(path) < size + 64 * 1024
    again = open_log(log.directory)
    assert again.end_offset == n * BATCH_VALUES
    again.close()


def test_a_crash_with_blocks_reserved_recovers_what_was_appended(tmp_path: Path) -> None:
    """No close (a crash): the reserved blocks past the end stay, and recovery, which
    reads the file to its size, finds exactly the appended batches and appends on."""
    log = open_log(tmp_path / "p")
    n = fill_past_reserve_threshold(log)
    path = active_file(log)
    if reserving_works(tmp_path):
        assert allocated(path) > os.stat(path).st_size + RESERVE_BYTES // 2
    # Abandoned as a crash leaves it: no clean-shutdown record, files as written.
    again = open_log(tmp_path / "p")
    assert again.end_offset == n * BATCH_VALUES
    again.append(batch(n))
    records = list(decode_records(b"".join(again.iter_batches_from(0))))
    assert [r.offset for r in records] == list(range((n + 1) * BATCH_VALUES))
    again.close()
    log.drain()


def test_truncation_frees_the_reservation(busy_log: tuple[PartitionLog, int, Path]) -> None:
    log, n, path = busy_log
    kept = (n - 1) * BATCH_VALUES
    log.truncate_to(kept)  # a replica's diverged tail cut off
    assert log.end_offset == kept
    assert allocated(path) < os.stat(path).st_size + 64 * 1024
    log.append(batch(n))  # appends go on, reserving again as the segment grows
    assert log.end_offset == kept + BATCH_VALUES
    log.close()


def test_an_append_that_cannot_reserve_appends_without_and_stops_trying(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filesystem without fallocate, or no space for the reservation: the appends go on
    as before, and the segment does not ask again for every append."""
    calls: list[tuple[int, int]] = []

    def refuse(fd: int, offset: int, length: int) -> bool:
        calls.append((offset, length))
        return False

    monkeypatch.setattr(segment_module, "reserve", refuse)
    log = open_log(tmp_path / "p")
    n = fill_past_reserve_threshold(log)
    for i in range(3):
        log.append(batch(n + i))
    assert len(calls) == 1  # tried once, when the segment became busy
    assert log.end_offset == (n + 3) * BATCH_VALUES
    records = list(decode_records(b"".join(log.iter_batches_from(0))))
    assert [r.offset for r in records] == list(range((n + 3) * BATCH_VALUES))
    log.close()
