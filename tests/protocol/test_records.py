"""Record batch v2 header parsing, validation, patching and the small record codec."""

from __future__ import annotations

import importlib.util
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol.records import (
    BATCH_OVERHEAD,
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    CorruptRecordError,
    DecodedRecord,
    InvalidRecordError,
    Record,
    batch_crc,
    build_batch,
    decode_records,
    iter_batches,
    parse_header,
    patch_base_offset,
    patch_partition_leader_epoch,
    set_log_append_time,
    validate_batches,
)

CODECS = [COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD]
_LIBS = {COMPRESSION_SNAPPY: "cramjam", COMPRESSION_LZ4: "lz4", COMPRESSION_ZSTD: "zstandard"}


def _available(codec: int) -> bool:
    lib = _LIBS.get(codec)
    if lib is None:
        return True
    if codec == COMPRESSION_SNAPPY:
        return bool(importlib.util.find_spec("cramjam") or importlib.util.find_spec("snappy"))
    return importlib.util.find_spec(lib) is not None


def _batch(n: int = 3, **kw: object) -> bytes:
    recs = [(f"k{i}".encode(), f"v{i}".encode() * 10, (("h", b"x"),)) for i in range(n)]
    return build_batch(recs, timestamp_ms=kw.pop("timestamp_ms", 1_700_000_000_000), **kw)  # type: ignore[arg-type]


def test_header_fields_and_properties() -> None:
    raw = _batch(
        4,
        base_offset=100,
        producer_id=7,
        producer_epoch=2,
        base_sequence=10,
        transactional=True,
    )
    h = parse_header(raw)
    assert h.magic == 2
    assert h.base_offset == 100
    assert h.records_count == 4
    assert h.last_offset_delta == 3
    assert h.last_offset == 103
    assert h.size == len(raw) == h.batch_length + 12
    assert h.producer_id == 7 and h.producer_epoch == 2
    assert h.base_sequence == 10 and h.last_sequence == 13
    assert h.is_transactional and not h.is_control
    assert h.compression == 0 and h.timestamp_type == 0
    assert h.crc == batch_crc(raw, 0, len(raw))


def test_last_sequence_wraps_like_kafka() -> None:
    raw = _batch(3, producer_id=1, producer_epoch=0, base_sequence=2**31 - 2)
    assert parse_header(raw).last_sequence == 0


def test_validate_accepts_concatenated_batches() -> None:
    data = _batch(2) + _batch(5) + _batch(1)
    hs = validate_batches(data)
    assert [h.records_count for h in hs] == [2, 5, 1]
    assert [p for p, _ in iter_batches(data)] == [0, hs[0].size, hs[0].size + hs[1].size]


def test_crc_corruption_rejected_at_every_covered_byte() -> None:
    raw = _batch(2)
    for i in range(21, len(raw)):
        bad = bytearray(raw)
        bad[i] ^= 0x40
        with pytest.raises(CorruptRecordError) as ei:
            validate_batches(bytes(bad))
        assert ei.value.error_code == 2


def test_fields_outside_crc_can_be_patched() -> None:
    buf = bytearray(_batch(2))
    patch_base_offset(buf, 0, 12345)
    patch_partition_leader_epoch(buf, 0, 9)
    (h,) = validate_batches(buf)
    assert h.base_offset == 12345 and h.partition_leader_epoch == 9


def test_truncated_input_rejected_at_every_length() -> None:
    raw = _batch(2) + _batch(2)
    first = parse_header(raw).size
    for cut in range(1, len(raw)):
        if cut == first:
            continue
        with pytest.raises(CorruptRecordError):
            validate_batches(raw[:cut])
    assert len(list(iter_batches(raw[: first + 30]))) == 1


def test_empty_and_bad_headers_rejected() -> None:
    with pytest.raises(InvalidRecordError) as ei:
        validate_batches(b"")
    assert ei.value.error_code == 87
    raw = bytearray(_batch(1))
    struct.pack_into(">i", raw, 8, 10)  # batch_length below minimum
    with pytest.raises(CorruptRecordError):
        validate_batches(raw)
    raw = bytearray(_batch(1))
    raw[16] = 1  # magic 1
    with pytest.raises(InvalidRecordError):
        validate_batches(raw)
    raw[16] = 7
    with pytest.raises(CorruptRecordError):
        validate_batches(raw)


def _rewrite(raw: bytes, fmt: str, pos: int, value: int) -> bytes:
    """Change a CRC-covered field and fix the CRC so only the semantic check fires."""
    buf = bytearray(raw)
    struct.pack_into(fmt, buf, pos, value)
    struct.pack_into(">I", buf, 17, batch_crc(buf, 0, len(buf)))
    return bytes(buf)


def test_semantic_rules_rejected_with_invalid_record() -> None:
    raw = _batch(3)
    for bad in (
        _rewrite(raw, ">i", 57, 0),  # records_count 0
        _rewrite(raw, ">i", 57, 5),  # count != last_offset_delta + 1
        _rewrite(raw, ">i", 23, -1),  # negative last_offset_delta
        _batch(1, producer_id=3, producer_epoch=0, base_sequence=-1),  # pid without sequence
        _batch(1, control=True),
    ):
        with pytest.raises(InvalidRecordError):
            validate_batches(bad)
    validate_batches(_batch(1, control=True), allow_control=True)


def test_set_log_append_time_rewrites_crc() -> None:
    buf = bytearray(_batch(3, timestamp_ms=1000))
    set_log_append_time(buf, 0, 5555)
    (h,) = validate_batches(buf)
    assert h.timestamp_type == 1 and h.max_timestamp == 5555 and h.base_timestamp == 1000
    assert {r.timestamp for r in decode_records(buf)} == {5555}


def test_decode_basic_and_absolute_offsets() -> None:
    recs = [
        Record(0, 0, b"a", b"1"),
        Record(1, 7, None, b"2", (("x", None), ("y", b""))),
        Record(2, -3, b"", None),
    ]
    raw = build_batch(recs, base_offset=40, timestamp_ms=100)
    out = decode_records(raw)
    assert out == [
        DecodedRecord(40, 100, b"a", b"1", ()),
        DecodedRecord(41, 107, None, b"2", (("x", None), ("y", b""))),
        DecodedRecord(42, 97, b"", None, ()),
    ]
    assert parse_header(raw).max_timestamp == 107


_bytes_or_none = st.one_of(st.none(), st.binary(max_size=300))
_headers = st.lists(st.tuples(st.text(max_size=10), _bytes_or_none), max_size=3).map(tuple)
_records = st.lists(st.tuples(_bytes_or_none, _bytes_or_none, _headers), min_size=1, max_size=20)


@settings(max_examples=60, deadline=None)
@given(
    records=_records,
    ts=st.integers(min_value=0, max_value=2**50),
    base=st.integers(min_value=0, max_value=2**40),
    codec=st.sampled_from(CODECS),
)
def test_build_decode_round_trip(
    records: list[tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]],
    ts: int,
    base: int,
    codec: int,
) -> None:
    assert _available(codec), "a compression library is missing: install the test extra"
    raw = build_batch(records, base_offset=base, timestamp_ms=ts, compression=codec)
    (h,) = validate_batches(raw)
    assert h.compression == codec and h.records_count == len(records)
    out = decode_records(raw)
    assert [(r.key, r.value, r.headers) for r in out] == records
    assert [r.offset for r in out] == list(range(base, base + len(records)))
    assert all(r.timestamp == ts for r in out)


@settings(max_examples=40, deadline=None)
@given(deltas=st.lists(st.integers(min_value=-(2**40), max_value=2**40), min_size=1, max_size=10))
def test_varlong_timestamp_deltas_round_trip(deltas: list[int]) -> None:
    recs = [Record(i, d, None, b"v") for i, d in enumerate(deltas)]
    raw = build_batch(recs, timestamp_ms=2**45)
    assert [r.timestamp for r in decode_records(raw)] == [2**45 + d for d in deltas]


def test_snappy_raw_and_xerial_framing_both_decode() -> None:
    cramjam = pytest.importorskip("cramjam")
    plain = build_batch([(b"k", b"v" * 500, ())] * 4, timestamp_ms=1)
    body = plain[BATCH_OVERHEAD:]
    for payload in (
        bytes(cramjam.snappy.compress_raw(body)),
        b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + _xerial_blocks(cramjam, body),
    ):
        buf = bytearray(plain[:BATCH_OVERHEAD]) + payload
        struct.pack_into(">i", buf, 8, len(buf) - 12)
        struct.pack_into(">h", buf, 21, COMPRESSION_SNAPPY)
        struct.pack_into(">I", buf, 17, batch_crc(buf, 0, len(buf)))
        assert decode_records(buf) == decode_records(plain)


def _xerial_blocks(cramjam: object, body: bytes) -> bytes:
    out = b""
    for i in range(0, len(body), 100):  # several small blocks
        c = bytes(cramjam.snappy.compress_raw(body[i : i + 100]))  # type: ignore[attr-defined]
        out += struct.pack(">i", len(c)) + c
    return out


def test_interop_with_kafka_python_record_batches() -> None:
    """An independent implementation must read ours and we must read theirs."""
    import kafka.record.default_records as dr

    for codec in CODECS:
        assert _available(codec), "a compression library is missing: install the test extra"
        builder = dr.DefaultRecordBatchBuilder(
            magic=2,
            compression_type=codec,
            is_transactional=False,
            producer_id=9,
            producer_epoch=1,
            base_sequence=4,
            batch_size=1 << 20,
        )
        builder.append(0, timestamp=1234, key=b"a", value=b"b" * 300, headers=[("h", b"v")])
        builder.append(1, timestamp=1240, key=None, value=b"c", headers=[])
        theirs = bytes(builder.build())
        (h,) = validate_batches(theirs)
        assert h.last_sequence == 5
        assert [(r.offset, r.timestamp, r.key, r.value) for r in decode_records(theirs)] == [
            (0, 1234, b"a", b"b" * 300),
            (1, 1240, None, b"c"),
        ]
        mine = build_batch(
            [(b"k", b"v" * 200, (("x", None),))] * 3, timestamp_ms=99, compression=codec
        )
        batch = dr.DefaultRecordBatch(bytearray(mine))
        assert batch.validate_crc()
        assert [(r.offset, r.key, r.value, r.headers) for r in batch] == [
            (i, b"k", b"v" * 200, [("x", None)]) for i in range(3)
        ]
