"""Crash recovery: torn tails cut at every byte, damage quarantined, unclean reopen."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.log import CorruptSegmentError, LogConfig, PartitionLog
from odradek.protocol.records import build_batch, decode_records, iter_batches

CFG = LogConfig(segment_bytes=1500, index_interval_bytes=64)


def now() -> int:
    return 1_000


def batch(i: int, n: int = 2) -> bytes:
    return build_batch(
        [(b"key-%d" % i, b"value-%d-%d" % (i, j), ()) for j in range(n)], timestamp_ms=100 + i
    )


def crashed_log(path: Path, count: int = 30) -> list[tuple[int, int, int]]:
    """Append ``count`` batches and abandon the log without close (like kill -9).

    Returns (position in last segment, base offset, size) of the last segment's batches.
    """
    log = PartitionLog.open(path, CFG, now_ms=now)
    for i in range(count):
        log.append(batch(i, i % 3 + 1))
    assert log.segment_count >= 2
    log.drain()  # the process "dies" after its workers finished the rolls
    last = sorted(path.glob("*.log"))[-1]
    return [(p, h.base_offset, h.size) for p, h in iter_batches(last.read_bytes())]


def test_unclean_reopen_keeps_everything_acknowledged(tmp_path: Path) -> None:
    d = tmp_path / "p"
    log = PartitionLog.open(d, CFG, now_ms=now)
    for i in range(40):
        log.append(batch(i))
    expected = log.read(0, 1 << 30)
    end = log.end_offset
    # no close(): the process "dies"; the OS still has the written bytes
    again = PartitionLog.open(d, CFG, now_ms=now)
    assert again.end_offset == end
    assert again.read(0, 1 << 30) == expected
    again.close()


def test_torn_tail_cut_at_every_byte_of_last_two_batches(tmp_path: Path) -> None:
    src = tmp_path / "src"
    tail = crashed_log(src)
    assert len(tail) >= 2
    last_seg = sorted(src.glob("*.log"))[-1]
    seg_base = int(last_seg.stem)
    full = last_seg.read_bytes()
    start = tail[-2][0]
    for cut in range(start, len(full) + 1):
        d = tmp_path / f"cut{cut}"
        shutil.copytree(src, d)
        os.truncate(d / last_seg.name, cut)
        log = PartitionLog.open(d, CFG, now_ms=now)
        # exactly the batches that lie wholly before the cut survive
        kept = [(p, b, s) for p, b, s in tail if p + s <= cut]
        valid_end = kept[-1][0] + kept[-1][2] if kept else 0
        assert (d / last_seg.name).stat().st_size == valid_end
        data = log.read(seg_base, 1 << 30) if log.end_offset > seg_base else b""
        headers = [h for _, h in iter_batches(data)]
        assert [h.base_offset for h in headers] == [b for _, b, _ in kept]
        expected_end = headers[-1].next_offset if headers else seg_base
        assert log.end_offset == expected_end
        # the log keeps working after recovery
        info = log.append(batch(999))
        assert info.base_offset == expected_end
        log.close()
        shutil.rmtree(d)


def test_corrupt_byte_in_last_batch_is_quarantined_not_truncated(tmp_path: Path) -> None:
    """A complete last batch that fails its CRC is damage, not a torn write: it stays."""
    src = tmp_path / "src"
    tail = crashed_log(src)
    last_seg = sorted(src.glob("*.log"))[-1]
    full = last_seg.read_bytes()
    p_last, base_last, size_last = tail[-1]
    end = [h for _, h in iter_batches(full)][-1].next_offset
    for offset_in_batch in (17, 21, 30, size_last - 1):
        d = tmp_path / f"c{offset_in_batch}"
        shutil.copytree(src, d)
        with open(d / last_seg.name, "r+b") as f:
            f.seek(p_last + offset_in_batch)
            b = f.read(1)
            f.seek(p_last + offset_in_batch)
            f.write(bytes([b[0] ^ 0xFF]))
        log = PartitionLog.open(d, CFG, now_ms=now)
        assert (d / last_seg.name).stat().st_size == len(full)  # nothing deleted
        assert (d / (last_seg.stem + ".corrupt")).exists()
        assert log.end_offset == end  # its offsets are not handed out again
        with pytest.raises(CorruptSegmentError) as err:
            log.read(base_last, 1 << 20)
        assert err.value.error_code == 2
        before = decode_records(log.read(int(last_seg.stem), 1 << 30))
        assert before and before[-1].offset == base_last - 1
        assert log.append(batch(999)).base_offset == end
        assert [r.offset for r in decode_records(log.read(end, 1 << 20))] == [end, end + 1]
        log.close()


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(garbage=st.binary(min_size=1, max_size=200))
def test_garbage_tail_is_dropped(tmp_path_factory: object, garbage: bytes) -> None:
    d: Path = tmp_path_factory.mktemp("g")  # type: ignore[attr-defined]
    log = PartitionLog.open(d, CFG, now_ms=now)
    for i in range(5):
        log.append(batch(i))
    expected = log.read(0, 1 << 30)
    seg = sorted(d.glob("*.log"))[-1]
    with open(seg, "ab") as f:
        f.write(garbage)
    again = PartitionLog.open(d, CFG, now_ms=now)
    assert again.read(0, 1 << 30) == expected
    assert again.end_offset == log.end_offset
    again.close()


def test_corrupt_middle_segment_is_quarantined_and_later_segments_kept(tmp_path: Path) -> None:
    """Recovery that meets damage in an older segment deletes nothing after it."""
    d = tmp_path / "p"
    log = PartitionLog.open(d, CFG, now_ms=now)
    for i in range(60):
        log.append(batch(i))
    end = log.end_offset
    original = {r.offset: r for r in decode_records(b"".join(log.iter_batches_from(0)))}
    log.close()
    segs = sorted(d.glob("*.log"))
    assert len(segs) >= 3
    victim = segs[1]
    hit = next(h for p, h in iter_batches(victim.read_bytes()) if p <= 200 < p + h.size)
    (d / (victim.stem + ".index")).unlink()  # forces a scan of that segment
    with open(victim, "r+b") as f:
        f.seek(200)
        b = f.read(1)
        f.seek(200)
        f.write(bytes([b[0] ^ 0xFF]))
    log = PartitionLog.open(d, CFG, now_ms=now)
    assert sorted(d.glob("*.log")) == segs
    assert log.end_offset == end
    replayed = decode_records(b"".join(log.iter_batches_from(0)))
    lost = set(range(hit.base_offset, hit.next_offset))
    assert [r.offset for r in replayed] == [o for o in range(end) if o not in lost]
    assert all(r == original[r.offset] for r in replayed)
    assert log.quarantined == [(int(victim.stem), hit.base_offset, hit.next_offset)]
    assert (d / (victim.stem + ".corrupt")).exists()
    for offset in lost:
        with pytest.raises(CorruptSegmentError):
            log.read(offset, 1 << 20)
    assert decode_records(log.read(hit.next_offset, 1 << 20))[0].offset == hit.next_offset
    log.close()
    again = PartitionLog.open(d, CFG, now_ms=now)  # the quarantine outlives a restart
    with pytest.raises(CorruptSegmentError):
        again.read(hit.base_offset, 1 << 20)
    assert again.end_offset == end
    again.close()


def test_stale_files_cleaned_on_open(tmp_path: Path) -> None:
    d = tmp_path / "p"
    log = PartitionLog.open(d, CFG, now_ms=now)
    log.append(batch(0))
    log.close()
    (d / "00000000000000000777.index").write_bytes(b"x" * 8)
    (d / "producer.snapshot.tmp").write_bytes(b"junk")
    log = PartitionLog.open(d, CFG, now_ms=now)
    assert not (d / "00000000000000000777.index").exists()
    assert not (d / "producer.snapshot.tmp").exists()
    assert log.end_offset == 2
    log.close()
