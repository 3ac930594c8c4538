"""PartitionLog: append/read round trips, rolling, indexes, retention, timestamps."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from odradek.log import (
    CorruptRecordError,
    InvalidRecordError,
    LogConfig,
    LogError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    PartitionLog,
)
from odradek.protocol.records import (
    COMPRESSION_GZIP,
    Record,
    build_batch,
    decode_records,
    iter_batches,
    parse_header,
)


class Clock:
    """Manual clock injected as now_ms: tests advance time explicitly, never sleep."""

    def __init__(self, t: int = 1_000_000) -> None:
        self.t = t

    def __call__(self) -> int:
        return self.t


def batch(n: int = 1, *, ts: int = 1000, size: int = 10, **kw: object) -> bytes:
    recs = [(b"k%d" % i, b"v" * size, ()) for i in range(n)]
    return build_batch(recs, timestamp_ms=ts, **kw)  # type: ignore[arg-type]


def open_log(path: Path, clock: Clock | None = None, **cfg: object) -> PartitionLog:
    return PartitionLog.open(path, LogConfig(**cfg), now_ms=clock or Clock())  # type: ignore[arg-type]


def offsets_in(data: bytes) -> list[int]:
    return [r.offset for r in decode_records(data)]


def test_new_log_is_empty(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    assert (log.start_offset, log.end_offset, log.size_bytes) == (0, 0, 0)
    assert log.read(0, 1000) == b""
    assert log.offset_for_timestamp(0) is None
    assert log.max_timestamp() is None
    assert (tmp_path / "p" / "00000000000000000000.log").exists()
    log.close()


def test_round_trip_offsets_patched(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    infos = [log.append(batch(n)) for n in (1, 3, 2, 5)]
    assert [(i.base_offset, i.last_offset) for i in infos] == [(0, 0), (1, 3), (4, 5), (6, 10)]
    assert all(i.log_append_time_ms == -1 and not i.duplicate for i in infos)
    assert log.end_offset == 11
    data = log.read(0, 1 << 20)
    assert offsets_in(data) == list(range(11))
    headers = [h for _, h in iter_batches(data)]
    assert [h.base_offset for h in headers] == [0, 1, 4, 6]
    assert all(h.partition_leader_epoch == 0 for h in headers)
    # reading from the middle of a batch returns that whole batch
    assert parse_header(log.read(2, 1)).base_offset == 1
    assert log.read(11, 100) == b""
    log.close()


def test_multi_batch_append_is_one_write(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    info = log.append(batch(2) + batch(3))
    assert (info.base_offset, info.last_offset) == (0, 4)
    assert offsets_in(log.read(0, 1 << 20)) == list(range(5))
    log.close()


def test_read_returns_at_least_one_batch_larger_than_max_bytes(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", index_interval_bytes=100)
    for _ in range(20):
        log.append(batch(1, size=500))
    one = log.read(5, 10)
    assert [h.base_offset for _, h in iter_batches(one)] == [5]
    assert len(one) == parse_header(one).size
    # max_bytes covering 3.5 batches returns exactly 3 whole batches
    size = parse_header(one).size
    three = log.read(5, 3 * size + size // 2)
    assert [h.base_offset for _, h in iter_batches(three)] == [5, 6, 7]
    assert len(three) == 3 * size
    log.close()


def test_read_every_offset_and_budget(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", index_interval_bytes=50, segment_bytes=2000)
    for n in range(1, 40):
        log.append(batch(n % 4 + 1, size=n))
    end = log.end_offset
    for off in range(end):
        for budget in (1, 100, 333, 5000):
            data = log.read(off, budget)
            hs = [h for _, h in iter_batches(data)]
            assert sum(h.size for h in hs) == len(data)
            assert hs[0].base_offset <= off <= hs[0].last_offset
            assert len(hs) == 1 or len(data) <= budget
            assert all(a.next_offset == b.base_offset for a, b in itertools.pairwise(hs))
    log.close()


def test_offset_out_of_range(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    log.append(batch(3))
    with pytest.raises(OffsetOutOfRangeError) as ei:
        log.read(4, 100)
    assert ei.value.error_code == 1
    assert isinstance(ei.value, LogError)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)
    log.delete_records_before(2)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(1, 100)
    assert parse_header(log.read(2, 100)).base_offset == 0  # whole batch containing 2
    log.close()


def test_invalid_input_rejected_and_nothing_written(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", max_message_bytes=200)
    good = batch(1)
    bad = bytearray(good)
    bad[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        log.append(bytes(bad))
    with pytest.raises(CorruptRecordError):
        log.append(good + good[:20])
    with pytest.raises(InvalidRecordError):
        log.append(b"")
    with pytest.raises(MessageTooLargeError) as ei:
        log.append(batch(1, size=400))
    assert ei.value.error_code == 10
    assert (log.end_offset, log.size_bytes) == (0, 0)
    log.append(good)
    assert log.end_offset == 1
    log.close()


def test_log_append_time(tmp_path: Path) -> None:
    clock = Clock(777_000)
    log = open_log(tmp_path / "p", clock, message_timestamp_type="LogAppendTime")
    info = log.append(batch(2, ts=5) + batch(1, ts=6))
    assert info.log_append_time_ms == 777_000
    data = log.read(0, 1 << 20)
    hs = [h for _, h in iter_batches(data)]
    assert all(h.timestamp_type == 1 and h.max_timestamp == 777_000 for h in hs)
    assert {r.timestamp for r in decode_records(data)} == {777_000}
    log.close()


def test_compressed_batches_stored_as_they_came(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    raw = batch(5, compression=COMPRESSION_GZIP)
    log.append(raw)
    stored = log.read(0, 1 << 20)
    assert stored[16:] == raw[16:]  # only base offset / leader epoch may differ
    assert offsets_in(stored) == list(range(5))
    log.close()


def test_roll_by_size(tmp_path: Path) -> None:
    one = len(batch(1, size=100))
    log = open_log(tmp_path / "p", segment_bytes=one * 3)
    for _ in range(10):
        log.append(batch(1, size=100))
    assert log.segment_count == 4  # 3 + 3 + 3 + 1
    names = sorted(p.name for p in (tmp_path / "p").glob("*.log"))
    assert names == [f"{b:020d}.log" for b in (0, 3, 6, 9)]
    assert offsets_in(b"".join(log.iter_batches_from(0))) == list(range(10))
    # a batch bigger than a segment still goes in (alone)
    log.append(batch(1, size=one * 4))
    assert log.segment_count == 5
    log.close()


def test_roll_by_time(tmp_path: Path) -> None:
    clock = Clock(0)
    log = open_log(tmp_path / "p", clock, segment_ms=100)
    log.append(batch())
    clock.t = 100
    log.append(batch())
    assert log.segment_count == 1
    clock.t = 101
    log.append(batch())
    assert log.segment_count == 2
    clock.t = 150
    log.append(batch())
    assert log.segment_count == 2  # age counts from the new segment's first append
    clock.t = 10_000
    assert log.segment_count == 2  # no append, no roll
    log.close()


def test_reads_across_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=300, index_interval_bytes=0)
    for i in range(30):
        log.append(batch(i % 3 + 1))
    assert log.segment_count > 3
    got: list[int] = []
    off = 0
    while off < log.end_offset:
        data = log.read(off, 250)
        hs = [h for _, h in iter_batches(data)]
        got.extend(offsets_in(data))
        off = hs[-1].next_offset
    assert got == list(range(log.end_offset))
    log.close()


def test_reopen_after_clean_close(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=500, index_interval_bytes=64)
    for i in range(50):
        log.append(batch(i % 4 + 1, ts=1000 + i))
    expected = log.read(0, 1 << 30)
    end, size, segs = log.end_offset, log.size_bytes, log.segment_count
    log.close()
    assert (tmp_path / "p" / ".clean_shutdown").exists()
    log = open_log(tmp_path / "p", segment_bytes=500, index_interval_bytes=64)
    # The record stays until the first change: reopened and closed untouched, still clean.
    assert (tmp_path / "p" / ".clean_shutdown").exists()
    assert (log.end_offset, log.size_bytes, log.segment_count) == (end, size, segs)
    assert log.read(0, 1 << 30) == expected
    assert (tmp_path / "p" / ".clean_shutdown").exists()
    assert log.append(batch()).base_offset == end
    assert not (tmp_path / "p" / ".clean_shutdown").exists()
    log.close()


@pytest.mark.parametrize("which", ["index", "timeindex", "both", "garbage"])
def test_index_rebuild_when_files_missing_or_bad(tmp_path: Path, which: str) -> None:
    cfg = {"segment_bytes": 600, "index_interval_bytes": 40}
    log = open_log(tmp_path / "p", **cfg)
    for i in range(60):
        log.append(batch(i % 3 + 1, ts=5000 + i))
    expected = log.read(0, 1 << 30)
    before = [log.offset_for_timestamp(5000 + i) for i in range(0, 62, 7)]
    log.close()
    d = tmp_path / "p"
    for p in d.glob("*.index"):
        if which in ("index", "both"):
            p.unlink()
        elif which == "garbage":
            p.write_bytes(b"\x00" * 24)
    for p in d.glob("*.timeindex"):
        if which in ("timeindex", "both"):
            p.unlink()
    log = open_log(d, **cfg)
    assert log.read(0, 1 << 30) == expected
    for off in range(0, log.end_offset, 5):
        assert parse_header(log.read(off, 1)).base_offset <= off
    assert [log.offset_for_timestamp(5000 + i) for i in range(0, 62, 7)] == before
    assert all(p.stat().st_size > 0 for p in d.glob("*.index"))
    log.close()


def test_offset_for_timestamp_record_granularity(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=400, index_interval_bytes=30)
    # batch i has records with timestamps 100*i + (0, 10, 20)
    for i in range(20):
        recs = [Record(j, 10 * j, b"k", b"v") for j in range(3)]
        log.append(build_batch(recs, timestamp_ms=100 * i))
    assert log.segment_count > 2
    assert log.offset_for_timestamp(0) == (0, 0)
    assert log.offset_for_timestamp(5) == (1, 10)
    assert log.offset_for_timestamp(20) == (2, 20)
    assert log.offset_for_timestamp(21) == (3, 100)
    assert log.offset_for_timestamp(1015) == (32, 1020)
    assert log.offset_for_timestamp(1920) == (59, 1920)
    assert log.offset_for_timestamp(1921) is None
    assert log.max_timestamp() == (59, 1920)
    log.delete_records_before(31)
    assert log.offset_for_timestamp(0) == (31, 1010)
    log.close()


def test_offset_for_timestamp_non_monotonic(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", index_interval_bytes=0)
    for ts in (50, 10, 70, 20, 70, 5):
        log.append(batch(1, ts=ts))
    assert log.offset_for_timestamp(30) == (0, 50)
    assert log.offset_for_timestamp(60) == (2, 70)
    assert log.max_timestamp() == (2, 70)
    log.close()


def test_retention_by_time_never_deletes_active(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=200, retention_ms=1000)
    for i in range(12):
        log.append(batch(1, ts=i * 100, size=50))
    segs = log.segment_count
    assert segs >= 4
    assert log.enforce_retention(now_ms=1000) == 0  # newest-in-segment timestamps too young
    deleted = log.enforce_retention(now_ms=1000 + 250)
    assert deleted >= 1
    assert log.start_offset > 0
    assert log.segment_count == segs - deleted
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    log.enforce_retention(now_ms=10**9)
    assert log.segment_count == 1
    assert log.read(log.start_offset, 1 << 20)
    start = log.start_offset
    log.close()
    log = open_log(tmp_path / "p", segment_bytes=200, retention_ms=1000)
    assert log.start_offset == start
    log.close()


def test_retention_by_size(tmp_path: Path) -> None:
    one = len(batch(1, size=50))
    log = open_log(tmp_path / "p", segment_bytes=one * 2, retention_bytes=one * 5)
    for _ in range(12):
        log.append(batch(1, size=50))
    assert log.segment_count == 6
    assert log.enforce_retention(now_ms=0) == 3  # 12 batches -> keep 6 >= 5 after whole segs
    assert log.size_bytes == one * 6
    assert log.start_offset == 6
    log.close()


def test_compact_only_policy_skips_time_and_size_retention(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=100, retention_bytes=0, cleanup_policy="compact")
    for _ in range(5):
        log.append(batch(1, size=50))
    assert log.enforce_retention(now_ms=10**12) == 0
    log.close()


def test_delete_records_before_persists(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=200)
    for _ in range(10):
        log.append(batch(2, size=30))
    log.delete_records_before(7)
    assert log.start_offset == 7
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(log.end_offset + 1)
    log.delete_records_before(3)  # never moves backwards
    assert log.start_offset == 7
    log.close()
    log = open_log(tmp_path / "p", segment_bytes=200)
    assert log.start_offset == 7
    assert parse_header(log.read(7, 1)).base_offset == 6
    log.close()


def test_iter_batches_from(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=300)
    for i in range(25):
        log.append(batch(i % 2 + 1))
    batches = list(log.iter_batches_from(0))
    assert all(len(b) == parse_header(b).size for b in batches)
    assert offsets_in(b"".join(batches)) == list(range(log.end_offset))
    tail = list(log.iter_batches_from(log.end_offset - 1))
    assert len(tail) == 1
    assert list(log.iter_batches_from(log.end_offset)) == []
    log.close()


def test_flush_policy_by_messages_and_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import odradek.log.segment as segmod

    calls: list[int] = []
    monkeypatch.setattr(segmod.Segment, "fsync", lambda self: calls.append(self.base_offset))
    clock = Clock(0)
    log = open_log(tmp_path / "p", clock, flush_messages=5)
    for _ in range(4):
        assert log.append(batch(1)).flushed is None
    assert calls == []
    flushed = log.append(batch(1)).flushed  # due: fsynced by a worker, not by the caller
    assert flushed is not None
    flushed.result(timeout=30)
    assert calls == [0]
    log.close()
    calls.clear()
    log = open_log(tmp_path / "q", clock, flush_ms=1000)
    assert log.append(batch(1)).flushed is None
    assert calls == []
    clock.t = 1000
    flushed = log.append(batch(1)).flushed
    assert flushed is not None
    flushed.result(timeout=30)
    assert calls == [0]


def test_delete_removes_directory(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    log.append(batch())
    log.delete()
    assert not (tmp_path / "p").exists()


def test_closed_log_refuses_use(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    log.close()
    log.close()  # idempotent
    with pytest.raises(ValueError):
        log.append(batch())


def test_untouched_log_closes_without_rewriting_its_files(tmp_path: Path) -> None:
    """A clean open followed by a close must not pay for fsyncs (broker shutdown speed)."""
    log = open_log(tmp_path / "p")
    log.append(build_batch([(b"k", b"v", ())], timestamp_ms=1))
    log.close()
    written = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "p").iterdir()}
    reopened = open_log(tmp_path / "p")
    reopened.close()
    after = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "p").iterdir()}
    assert {n: t for n, t in after.items() if n != ".clean_shutdown"} == {
        n: t for n, t in written.items() if n != ".clean_shutdown"
    }
    again = open_log(tmp_path / "p")
    assert again.end_offset == 1
    assert again.read(0, 1 << 20)
    again.close()
