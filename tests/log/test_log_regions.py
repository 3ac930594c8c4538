"""File regions: what Fetch sends with sendfile is what a read into memory returns, and
a region's descriptor stays pinned (its bytes readable) until it is released."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.log import FileCache, LogConfig, PartitionLog
from odradek.log.files import FileRegion
from odradek.protocol.records import build_batch

CFG = LogConfig(segment_bytes=20_000, index_interval_bytes=500)


def now() -> int:
    return 1_000


def written(path: Path, sizes: list[int], files: FileCache | None = None) -> PartitionLog:
    log = PartitionLog.open(path, CFG, now_ms=now, files=files)
    for i, n in enumerate(sizes):
        log.append(
            build_batch([(b"k", bytes([i % 256]) * 40, ()) for _ in range(n)], timestamp_ms=100 + i)
        )
    return log


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    sizes=st.lists(st.integers(1, 30), min_size=1, max_size=60),
    reads=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 30_000)), max_size=10),
    region_from=st.sampled_from([0, 100, 4_096]),
)
def test_regions_hold_exactly_what_reads_into_memory_return(
    tmp_path_factory: pytest.TempPathFactory,
    sizes: list[int],
    reads: list[tuple[int, int]],
    region_from: int,
) -> None:
    files = FileCache(50)
    log = written(tmp_path_factory.mktemp("regions") / "p", sizes, files)
    try:
        for at, max_bytes in reads:
            offset = at % (log.end_offset + 1)
            plain = bytes(log.read(offset, max_bytes))
            got = log.read(offset, max_bytes, region_from=region_from)
            if isinstance(got, FileRegion):
                assert got.length > region_from
                assert got.read() == plain
                got.release()
                got.release()  # a second release does nothing
            else:
                assert bytes(got) == plain
        log.drain()  # a worker finishing a rolled segment holds a pin meanwhile
        assert all(f.pins == 0 for f in files._open)
    finally:
        log.close()


def test_a_region_outlives_its_segment_until_released(tmp_path: Path) -> None:
    """Retention deletes the segment while a Fetch is still sending from it."""
    files = FileCache(10)
    log = written(tmp_path / "p", [20] * 40, files)
    assert log.segment_count > 2
    region = log.read(0, 1 << 20, region_from=0)
    assert isinstance(region, FileRegion)
    expected = bytes(log.read(0, 1 << 20))
    first = log._segments[0]
    log.delete_records_before(log._segments[1].base_offset)
    log.drain()  # the worker thread unlinked the file
    assert not first.log_path.exists()
    assert first.file.fd >= 0  # still open: pinned by the region
    assert region.read() == expected
    region.release()
    assert first.file.fd == -1  # closed for good once released
    log.close()


def test_pinned_regions_are_not_evicted_by_the_open_file_budget(tmp_path: Path) -> None:
    files = FileCache(1)
    logs = [written(tmp_path / f"p{i}", [30] * 5, files) for i in range(3)]
    regions = [log.read(0, 1 << 20, region_from=0) for log in logs]
    assert all(isinstance(r, FileRegion) for r in regions)
    expected = [bytes(log.read(0, 1 << 20)) for log in logs]  # more opens, past the budget
    for region, data in zip(regions, expected, strict=True):
        assert region.read() == data
        region.release()
    assert files.open_count <= 1
    for log in logs:
        log.close()


def test_small_reads_stay_bytes(tmp_path: Path) -> None:
    log = written(tmp_path / "p", [1, 1, 1])
    data = log.read(0, 1 << 20, region_from=64 * 1024)
    assert isinstance(data, bytes | bytearray) and len(data) > 0
    log.close()
