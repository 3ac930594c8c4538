"""The log refuses poison batches, and never inflates a stored batch past the bound.

Batches are refused at produce time (``append``); logs written before that check
existed may still hold a bomb, so the readers that decode records (timestamp
lookups, the cleaner) are bounded too.
"""

from __future__ import annotations

import struct
import tracemalloc
from pathlib import Path

import pytest
import zstandard

from odradek.log import LogConfig, PartitionLog
from odradek.protocol.records import (
    COMPRESSION_ZSTD,
    RecordError,
    build_batch,
    crc32c,
)

MiB = 1 << 20
_HEADER = struct.Struct(">qiibIhiqqqhii")


class Clock:
    def __init__(self, t: int = 1_000_000) -> None:
        self.t = t

    def __call__(self) -> int:
        return self.t


def raw_batch(payload: bytes, count: int, *, codec: int = 0, ts: int = 5000) -> bytes:
    out = bytearray(
        _HEADER.pack(0, 49 + len(payload), -1, 2, 0, codec, count - 1, ts, ts, -1, -1, -1, count)
    )
    out += payload
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def zstd_bomb(mib: int) -> bytes:
    c = zstandard.ZstdCompressor(level=3).compressobj()
    zero = bytes(MiB)
    return b"".join(c.compress(zero) for _ in range(mib)) + c.flush()


def good(key: bytes, value: bytes, ts: int) -> bytes:
    return build_batch([(key, value, ())], timestamp_ms=ts)


def open_log(path: Path, clock: Clock, **cfg: object) -> PartitionLog:
    return PartitionLog.open(path, LogConfig(**cfg), now_ms=clock)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("payload", "count", "codec", "code"),
    [
        (zstd_bomb(8), 1, COMPRESSION_ZSTD, 18),
        (b"\x00" * 40, 1, 5, 76),
        (bytes(range(60)), 3, 0, 87),
        (good(b"k", b"v", 1)[61:], 1_000_000, 0, 87),
    ],
    ids=["bomb", "unknown-codec", "garbage", "lying-count"],
)
def test_append_refuses_poison_and_the_end_does_not_move(
    tmp_path: Path, payload: bytes, count: int, codec: int, code: int
) -> None:
    clock = Clock()
    log = open_log(tmp_path / "p", clock, max_decompressed_bytes=MiB)
    log.append(good(b"a", b"1", 1000))
    with pytest.raises(RecordError) as err:
        log.append(raw_batch(payload, count, codec=codec))
    assert err.value.error_code == code
    assert log.end_offset == 1
    assert log.append(good(b"b", b"2", 1000)).base_offset == 1
    log.close()


def _traced_peak(fn: object) -> tuple[object, int]:
    tracemalloc.start()
    try:
        result = fn()  # type: ignore[operator]
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_stored_bomb_is_not_inflated_by_a_timestamp_lookup(tmp_path: Path) -> None:
    """A log from before produce-time checks: the lookup falls back to batch granularity."""
    clock = Clock()
    log = open_log(tmp_path / "p", clock, max_decompressed_bytes=MiB)
    log.append(good(b"a", b"1", 1000))
    log.append(raw_batch(zstd_bomb(64), 1, codec=COMPRESSION_ZSTD, ts=5000), from_client=False)
    found, peak = _traced_peak(lambda: log.offset_for_timestamp(4000))
    assert found == (1, 5000)
    assert peak < 8 * MiB, f"the lookup held {peak} bytes"
    found, peak = _traced_peak(log.max_timestamp)
    assert found == (1, 5000)
    assert peak < 8 * MiB
    log.close()


def test_the_cleaner_copies_a_stored_bomb_without_inflating_it(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path / "p", clock, cleanup_policy="compact", max_decompressed_bytes=MiB)
    log.append(good(b"a", b"1", 1000))
    log.append(raw_batch(zstd_bomb(64), 1, codec=COMPRESSION_ZSTD), from_client=False)
    log.append(good(b"a", b"2", 1000))
    log.roll()
    log.append(good(b"b", b"1", 1000))
    stats, peak = _traced_peak(lambda: log.compact(clock.t, force=True))
    assert stats.batches_copied_undecoded == 1  # type: ignore[attr-defined]
    assert stats.superseded_removed == 1  # type: ignore[attr-defined]
    assert peak < 8 * MiB, f"compaction held {peak} bytes"
    log.close()
