"""Produce-time record validation and bounded decompression (issue 10, items 4 and 5).

A batch is refused unless its records parse and agree with its header, and a
compressed batch is never inflated past the bound, whatever its codec.
"""

from __future__ import annotations

import os
import struct
import tracemalloc
import zlib
from collections.abc import Callable

import cramjam
import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol.records import (
    BATCH_OVERHEAD,
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    CorruptRecordError,
    InvalidRecordError,
    Record,
    RecordError,
    RecordListTooLargeError,
    UnsupportedCompressionError,
    build_batch,
    crc32c,
    decode_batch_records,
    decompress,
    parse_header,
    validate_batches,
)

_HEADER = struct.Struct(">qiibIhiqqqhii")
_XERIAL_HEAD = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
MiB = 1 << 20
LIMIT = 1 * MiB
BOMB = 64 * MiB


def raw_batch(payload: bytes, count: int, *, codec: int = 0, last_offset_delta: int = -1) -> bytes:
    """A batch with a correct CRC around whatever records section the test wants."""
    lod = count - 1 if last_offset_delta < 0 else last_offset_delta
    out = bytearray(
        _HEADER.pack(0, 49 + len(payload), -1, 2, 0, codec, lod, 1000, 1000, -1, -1, -1, count)
    )
    out += payload
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def records_of(batch: bytes) -> bytes:
    return batch[BATCH_OVERHEAD:]


def plain(n: int, value_size: int = 10) -> bytes:
    """The uncompressed records section of ``n`` well-formed records."""
    return records_of(
        build_batch([(b"k%d" % i, b"v" * value_size, ()) for i in range(n)], timestamp_ms=1000)
    )


# --------------------------------------------------------------------------- compressors


def _gzip_stream(chunks: int) -> bytes:
    deflater = zlib.compressobj(9, zlib.DEFLATED, 31)
    zero = bytes(MiB)
    return b"".join(deflater.compress(zero) for _ in range(chunks)) + deflater.flush()


def _lz4_stream(chunks: int) -> bytes:
    c = lz4.frame.LZ4FrameCompressor(block_linked=False, content_checksum=False)
    zero = bytes(MiB)
    return c.begin() + b"".join(c.compress(zero) for _ in range(chunks)) + c.flush()


def _zstd_stream(chunks: int) -> bytes:
    c = zstandard.ZstdCompressor(level=3).compressobj()
    zero = bytes(MiB)
    return b"".join(c.compress(zero) for _ in range(chunks)) + c.flush()


def _snappy_raw(data: bytes) -> bytes:
    return bytes(cramjam.snappy.compress_raw(data))


def _snappy_xerial(data: bytes) -> bytes:
    out = bytearray(_XERIAL_HEAD)
    for i in range(0, len(data), 32 * 1024):
        block = _snappy_raw(data[i : i + 32 * 1024])
        out += struct.pack(">i", len(block)) + block
    return bytes(out)


COMPRESSORS: dict[str, tuple[int, Callable[[bytes], bytes]]] = {
    "gzip": (COMPRESSION_GZIP, lambda d: zlib.compress(d, wbits=31)),
    "snappy-raw": (COMPRESSION_SNAPPY, _snappy_raw),
    "snappy-xerial": (COMPRESSION_SNAPPY, _snappy_xerial),
    "lz4": (COMPRESSION_LZ4, lambda d: lz4.frame.compress(d, block_linked=False)),
    "zstd": (COMPRESSION_ZSTD, lambda d: zstandard.ZstdCompressor().compress(d)),
}


def _bomb(name: str) -> tuple[int, bytes]:
    """64 MiB of zeros compressed without ever holding them whole (except snappy's 32 KiB
    blocks, and a raw snappy block, whose size is declared in its first bytes)."""
    if name == "gzip":
        return COMPRESSION_GZIP, _gzip_stream(BOMB // MiB)
    if name == "lz4":
        return COMPRESSION_LZ4, _lz4_stream(BOMB // MiB)
    if name == "zstd":
        return COMPRESSION_ZSTD, _zstd_stream(BOMB // MiB)
    if name == "snappy-raw":
        return COMPRESSION_SNAPPY, _snappy_raw(bytes(BOMB))
    block = _snappy_raw(bytes(32 * 1024))
    framed = struct.pack(">i", len(block)) + block
    return COMPRESSION_SNAPPY, _XERIAL_HEAD + framed * (BOMB // (32 * 1024))


# --------------------------------------------------------------------------- item 4


@pytest.mark.parametrize("name", sorted(COMPRESSORS))
def test_a_bomb_is_refused_without_inflating_past_the_bound(name: str) -> None:
    codec, compressed = _bomb(name)
    batch = raw_batch(compressed, 1, codec=codec)
    tracemalloc.start()
    try:
        with pytest.raises(RecordListTooLargeError, match="inflate to more than 1048576"):
            validate_batches(batch, max_decompressed_bytes=LIMIT)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert RecordListTooLargeError.error_code == 18
    # The bound (1 MiB) plus copies of the compressed input, not the 64 MiB it inflates to.
    assert peak < 4 * MiB + 2 * len(compressed), f"peak {peak} bytes while refusing {name}"


@pytest.mark.parametrize("name", sorted(COMPRESSORS))
def test_batches_within_the_bound_pass_and_one_byte_over_fails(name: str) -> None:
    codec, compress = COMPRESSORS[name]
    records = plain(200, value_size=100)
    batch = raw_batch(compress(records), 200, codec=codec)
    validate_batches(batch, max_decompressed_bytes=len(records))
    assert len(decode_batch_records(batch, 0, parse_header(batch))) == 200
    with pytest.raises(RecordListTooLargeError):
        validate_batches(batch, max_decompressed_bytes=len(records) - 1)
    assert decompress(codec, compress(records), len(records)) == records


def test_concatenated_gzip_members_inflate_as_one_stream() -> None:
    records = plain(40)
    half = len(records) // 2
    data = zlib.compress(records[:half], wbits=31) + zlib.compress(records[half:], wbits=31)
    assert decompress(COMPRESSION_GZIP, data, len(records)) == records
    with pytest.raises(RecordListTooLargeError):
        decompress(COMPRESSION_GZIP, data, len(records) - 1)


@pytest.mark.parametrize("name", ["gzip", "lz4"])
def test_truncated_streams_are_corrupt(name: str) -> None:
    codec, compress = COMPRESSORS[name]
    data = compress(plain(50))
    with pytest.raises(CorruptRecordError):
        decompress(codec, data[: len(data) // 2], LIMIT)


@pytest.mark.parametrize("name", sorted(COMPRESSORS))
def test_garbage_that_no_codec_accepts_is_corrupt_message(name: str) -> None:
    codec, _ = COMPRESSORS[name]
    batch = raw_batch(b"\x00\x01not compressed at all" * 5, 1, codec=codec)
    with pytest.raises(CorruptRecordError) as err:
        validate_batches(batch)
    assert err.value.error_code == 2


# --------------------------------------------------------------------------- item 5


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codecs_are_refused(codec: int) -> None:
    with pytest.raises(UnsupportedCompressionError, match=f"unknown compression codec {codec}"):
        validate_batches(raw_batch(plain(1), 1, codec=codec))


def test_a_records_count_that_lies_about_a_million_records_is_refused() -> None:
    batch = raw_batch(plain(1), 1_000_000)
    with pytest.raises(InvalidRecordError, match="records_count 1000000 cannot fit"):
        validate_batches(batch)


@pytest.mark.parametrize(("present", "claimed"), [(3, 4), (3, 2), (10, 11), (10, 9)])
def test_a_records_count_off_by_one_is_refused(present: int, claimed: int) -> None:
    with pytest.raises(InvalidRecordError):
        validate_batches(raw_batch(plain(present), claimed))


@pytest.mark.parametrize("name", sorted(COMPRESSORS))
def test_a_compressed_batch_that_lies_about_its_count_is_refused(name: str) -> None:
    codec, compress = COMPRESSORS[name]
    with pytest.raises(InvalidRecordError):
        validate_batches(raw_batch(compress(plain(5)), 6, codec=codec))


def test_offset_deltas_must_count_up_from_zero() -> None:
    gappy = records_of(
        build_batch([Record(0, 0, b"a", b"1"), Record(2, 0, b"b", b"2")], timestamp_ms=1000)
    )
    with pytest.raises(InvalidRecordError, match="record 1 has offset delta 2"):
        validate_batches(raw_batch(gappy, 2, last_offset_delta=1))
    swapped = records_of(
        build_batch([Record(1, 0, b"a", b"1"), Record(0, 0, b"b", b"2")], timestamp_ms=1000)
    )
    with pytest.raises(InvalidRecordError, match="record 0 has offset delta 1"):
        validate_batches(raw_batch(swapped, 2))
    middle = records_of(
        build_batch([Record(d, 0, b"k", b"v") for d in (0, 5, 2)], timestamp_ms=1000)
    )
    with pytest.raises(InvalidRecordError, match="offset delta is 5"):  # compressed: all checked
        validate_batches(raw_batch(zlib.compress(middle, wbits=31), 3, codec=COMPRESSION_GZIP))


def _one_record(body: bytes) -> bytes:
    """A record section of one record with this body (zigzag length prefix added)."""
    n = len(body) << 1
    prefix = bytearray()
    while n >= 0x80:
        prefix.append((n & 0x7F) | 0x80)
        n >>= 7
    prefix.append(n)
    return bytes(prefix) + body


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"\x00\x00\x00\x03\x00\x00", "key or value has a negative length"),  # key -2
        (b"\x00\x00\x00\x01\x01\x02\x01\x00", "header key is null"),
        (b"\x00\x00\x00\x02a\x00\x00x", "do not add up"),  # a spare byte in the record
        (b"\x00\x00\x00\x01\x01\x01", "header count"),  # header count -1
    ],
)
def test_records_whose_fields_disagree_with_their_length_are_refused(body: bytes, why: str) -> None:
    """Compressed batches are walked field by field (uncompressed ones frame by frame)."""
    compressed = zlib.compress(_one_record(body), wbits=31)
    with pytest.raises(InvalidRecordError, match=why):
        validate_batches(raw_batch(compressed, 1, codec=COMPRESSION_GZIP))


def test_bytes_after_the_last_record_are_refused() -> None:
    with pytest.raises(InvalidRecordError, match="do not fill it"):
        validate_batches(raw_batch(plain(3) + b"\x00" * 8, 3))
    gzipped = zlib.compress(plain(3) + b"\x00" * 8, wbits=31)
    with pytest.raises(InvalidRecordError, match="follow the last"):
        validate_batches(raw_batch(gzipped, 3, codec=COMPRESSION_GZIP))


def test_trusted_writers_may_skip_the_record_walk() -> None:
    batch = raw_batch(os.urandom(64), 2)
    with pytest.raises(InvalidRecordError):
        validate_batches(batch)
    assert validate_batches(batch, check_records=False)[0].records_count == 2


def test_headers_and_long_varints_pass() -> None:
    recs = [
        Record(i, 10**12 if i % 2 else -5, b"k" * 300, b"v" * 20_000, (("h", b"x"), ("n", None)))
        for i in range(130)
    ]
    batch = build_batch(recs, timestamp_ms=1000)
    assert validate_batches(batch)[0].records_count == 130


def _frames(section: bytes) -> list[tuple[int, int]]:
    """(start, end) of each record by its length prefix alone (an independent reading)."""
    out = []
    pos = 0
    while pos < len(section):
        n = shift = 0
        start = pos
        while True:
            b = section[pos]
            pos += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        pos += n >> 1
        out.append((start, pos))
    return out


@settings(max_examples=300, deadline=None)
@given(payload=st.binary(max_size=120), count=st.integers(1, 8))
def test_compressed_garbage_is_refused_or_decodes_to_exactly_its_records(
    payload: bytes, count: int
) -> None:
    """Garbage under a valid CRC, compressed: refused, or truly well-formed."""
    batch = raw_batch(zlib.compress(payload, wbits=31), count, codec=COMPRESSION_GZIP)
    try:
        validate_batches(batch)
    except RecordError:
        return
    decoded = decode_batch_records(batch, 0, parse_header(batch))
    assert [r.offset for r in decoded] == list(range(count))


@settings(max_examples=300, deadline=None)
@given(payload=st.binary(max_size=120), count=st.integers(1, 8))
def test_uncompressed_garbage_is_refused_or_frames_exactly_its_records(
    payload: bytes, count: int
) -> None:
    """Uncompressed: what passes is exactly ``count`` whole record frames."""
    try:
        validate_batches(raw_batch(payload, count))
    except RecordError:
        return
    frames = _frames(payload)
    assert len(frames) == count and frames[-1][1] == len(payload)


@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 40), flip=st.integers(0, 10_000), bit=st.integers(0, 7))
def test_a_flipped_bit_in_compressed_records_is_refused_or_still_decodes(
    n: int, flip: int, bit: int
) -> None:
    section = bytearray(plain(n))
    section[flip % len(section)] ^= 1 << bit
    batch = raw_batch(zlib.compress(bytes(section), wbits=31), n, codec=COMPRESSION_GZIP)
    try:
        validate_batches(batch)
    except RecordError:
        return
    assert len(decode_batch_records(batch, 0, parse_header(batch))) == n
