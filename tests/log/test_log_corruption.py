"""Damage found by reads: never a silent skip, never garbage returned (issue 10, item 6).

Before: a corrupted batch length in the middle of a segment whose indexes were
intact made reads stop quietly at the damage, and the next read jumped to the
next segment: the rest of the segment vanished without an error.

Every test reads both ways: into memory, and as the file regions Fetch sends
with sendfile (checked from the batch headers alone, ``Segment.read_from``).
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.log import CorruptSegmentError, LogConfig, PartitionLog
from odradek.log.files import FileRegion
from odradek.protocol.records import (
    DecodedRecord,
    build_batch,
    decode_batch_records,
    decode_records,
    iter_batches,
)

CFG = LogConfig(segment_bytes=4000, index_interval_bytes=200)


def now() -> int:
    return 1_000


def batch(i: int) -> bytes:
    return build_batch(
        [(b"key-%d" % i, b"value-%d-%d" % (i, j), ()) for j in range(1 + i % 3)],
        timestamp_ms=100 + i,
    )


def written_log(path: Path, batches: int = 120) -> dict[int, DecodedRecord]:
    log = PartitionLog.open(path, CFG, now_ms=now)
    for i in range(batches):
        log.append(batch(i))
    records = {r.offset: r for r in decode_records(b"".join(log.iter_batches_from(0)))}
    log.close()
    return records


@pytest.fixture(params=["bytes", "region"])
def region_from(request: pytest.FixtureRequest) -> int | None:
    """None: reads into memory; 0: every read is a file region (sendfile's path)."""
    return None if request.param == "bytes" else 0


def read(log: PartitionLog, offset: int, max_bytes: int, region_from: int | None) -> bytes:
    """A read's bytes; a region is read back and released, as the sender would."""
    data = log.read(offset, max_bytes, region_from=region_from)
    if isinstance(data, FileRegion):
        try:
            assert region_from is not None
            return data.read()
        finally:
            data.release()
    return bytes(data)


def read_everything(
    log: PartitionLog, damaged: range = range(0), region_from: int | None = None
) -> tuple[dict[int, DecodedRecord], set[int]]:
    """Read the log front to back as a consumer would, stepping past each error.

    Returns the records read and the offsets that answered with an error. A
    batch within ``damaged`` is counted but not decoded: damage to bytes the
    broker does not interpret reaches the consumer, whose CRC check catches it.
    """
    got: dict[int, DecodedRecord] = {}
    failed: set[int] = set()
    offset = log.start_offset
    while offset < log.end_offset:
        try:
            data = read(log, offset, 700, region_from)
        except CorruptSegmentError as exc:
            failed.update(range(offset, exc.resume_offset))
            offset = exc.resume_offset
            continue
        headers = list(iter_batches(data))
        assert headers, f"an empty read at {offset} below the end {log.end_offset}"
        for pos, h in headers:
            if h.base_offset in damaged:
                continue
            for r in decode_batch_records(data, pos, h):
                assert r.offset not in got
                got[r.offset] = r
        offset = headers[-1][1].next_offset
    return got, failed


def test_a_corrupted_length_mid_segment_fails_loud_and_the_rest_stays_readable(
    tmp_path: Path, region_from: int | None
) -> None:
    d = tmp_path / "p"
    original = written_log(d)
    seg = sorted(d.glob("*.log"))[0]
    data = seg.read_bytes()
    batches = list(iter_batches(data))
    pos, victim = batches[len(batches) // 2]
    with open(seg, "r+b") as f:  # the indexes still describe the file
        f.seek(pos + 8)
        f.write(struct.pack(">i", victim.batch_length + 37))
    log = PartitionLog.open(d, CFG, now_ms=now)  # clean shutdown: no scan at open
    got, failed = read_everything(log, region_from=region_from)
    lost = set(range(victim.base_offset, victim.next_offset))
    assert failed == lost
    assert set(got) == set(original) - lost
    assert all(got[o] == original[o] for o in got)
    assert log.quarantined == [(int(seg.stem), victim.base_offset, victim.next_offset)]
    with pytest.raises(CorruptSegmentError) as err:
        log.read(victim.base_offset, 1 << 20, region_from=region_from)
    assert err.value.error_code == 2  # CORRUPT_MESSAGE reaches the consumer
    assert (d / (seg.stem + ".corrupt")).exists()
    assert seg.read_bytes()[:pos] == data[:pos]  # nothing truncated
    assert seg.stat().st_size == len(data)
    log.close()


def test_reads_check_every_batch_they_return(tmp_path: Path, region_from: int | None) -> None:
    """One big read across a damaged header returns the data before it, not garbage."""
    d = tmp_path / "p"
    written_log(d, 30)
    seg = sorted(d.glob("*.log"))[0]
    batches = list(iter_batches(seg.read_bytes()))
    pos, victim = batches[10]
    with open(seg, "r+b") as f:
        f.seek(pos + 16)
        f.write(b"\x07")  # magic
    log = PartitionLog.open(d, CFG, now_ms=now)
    data = read(log, 0, 1 << 30, region_from)
    assert len(data) == pos
    assert decode_records(data)[-1].offset == victim.base_offset - 1
    log.close()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    at=st.integers(0, 10**9),
    bit=st.integers(0, 7),
    clean=st.booleans(),
    index=st.booleans(),
    as_regions=st.booleans(),
)
def test_one_flipped_bit_loses_at_most_its_own_batch(
    tmp_path_factory: pytest.TempPathFactory,
    at: int,
    bit: int,
    clean: bool,
    index: bool,
    as_regions: bool,
) -> None:
    """Wherever one bit flips, every record outside the batch it hit reads back intact.

    Opened after a clean or an unclean stop, with or without the segment's index.
    The hit batch itself is served as stored (damage in bytes the broker does
    not read reaches consumers, whose CRC check catches it) or answers with an error.
    """
    src = tmp_path_factory.mktemp("src")
    template = src / "p"
    original = written_log(template, 60)
    d = tmp_path_factory.mktemp("flip") / "p"
    shutil.copytree(template, d)
    segs = sorted(d.glob("*.log"))
    sizes = [s.stat().st_size for s in segs]
    at %= sum(sizes)
    k = 0
    while at >= sizes[k]:
        at -= sizes[k]
        k += 1
    seg = segs[k]
    hit = next(h for p, h in iter_batches(seg.read_bytes()) if p <= at < p + h.size)
    with open(seg, "r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ (1 << bit)]))
    if not clean:
        (d / ".clean_shutdown").unlink()
    if not index:
        (d / (seg.stem + ".index")).unlink()
    log = PartitionLog.open(d, CFG, now_ms=now)
    own = range(hit.base_offset, hit.next_offset)
    got, failed = read_everything(log, own, 0 if as_regions else None)
    assert failed <= set(own), "only the hit batch may answer with an error"
    for offset, record in original.items():
        if offset not in own:
            assert got.get(offset) == record, f"offset {offset} outside the hit batch changed"
    log.close()
