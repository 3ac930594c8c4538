"""The compiled record-batch codec and its pure-Python twin agree on every input.

Both implementations run in this process: ``odradek.protocol._codec`` (built by
``pip install -e .``) and ``odradek.protocol._codec_py``. Hypothesis drives them
with valid batches (every compression codec, transactional, control and
LogAppendTime batches, headers, null keys and values, explicit deltas), with
corrupted records sections (bytes flipped, cut, inserted, random counts), and
with encoder inputs; results must be equal and errors equal in type and message.
Valid batches must also decode to what ``records.decode_batch_records`` gives.
``test_codec_fallback.py`` runs client tests with the fallback alone.
"""

from __future__ import annotations

import importlib
import os
import struct
from array import array
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from odradek.protocol import _codec_py, columns, records
from odradek.protocol.native import NO_NATIVE_ENV
from odradek.protocol.records import (
    BATCH_OVERHEAD,
    COMPRESSION_NONE,
    CorruptRecordError,
    InvalidRecordError,
    Record,
    _check_record_frames,
    _encode_record,
    build_batch,
    decode_batch_records,
    parse_header,
    validate_batches_raw,
)


def _native() -> Any:
    try:
        return importlib.import_module("odradek.protocol._codec")
    except ImportError as exc:  # a failure, not a skip: CI has a compiler
        raise AssertionError(
            "the compiled codec odradek.protocol._codec is not built; `pip install -e .` "
            "builds it with a C compiler (python3 setup.py build_ext --inplace for a checkout)"
        ) from exc


native = _native()
IMPLS = {"native": native, "python": _codec_py}
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

INT64 = st.integers(-(2**63), 2**63 - 1)
small_bytes = st.binary(max_size=40)
maybe_bytes = st.none() | small_bytes
header_key = st.text(max_size=8)
headers_st = st.lists(st.tuples(header_key, maybe_bytes), max_size=3).map(tuple)


def outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    """('ok', result) or ('error', (type name, message)) of one call."""
    try:
        return "ok", fn(*args)
    except Exception as exc:
        return "error", (type(exc).__name__, str(exc))


def both(name: str, *args: Any) -> tuple[str, Any]:
    """Call ``name`` on both implementations; assert equal outcomes; return it."""
    results = {impl: outcome(getattr(mod, name), *args) for impl, mod in IMPLS.items()}
    assert results["native"] == results["python"], (name, results)
    return results["native"]


# --------------------------------------------------------------------------- valid batches


@st.composite
def batches(draw: st.DrawFn) -> bytes:
    n = draw(st.integers(1, 12))
    explicit = draw(st.booleans())
    recs: list[Any] = []
    for i in range(n):
        key, value, hdrs = draw(maybe_bytes), draw(maybe_bytes), draw(headers_st)
        if explicit:
            recs.append(
                Record(
                    draw(st.integers(0, 2**31 - 1)) if i else 0,
                    draw(st.integers(-(2**40), 2**40)),
                    key,
                    value,
                    hdrs,
                )
            )
        else:
            recs.append((key, value, hdrs))
    return build_batch(
        recs,
        base_offset=draw(st.integers(0, 2**60)),
        timestamp_ms=draw(st.integers(0, 2**50)),
        compression=draw(st.sampled_from([0, 1, 2, 3, 4])),
        transactional=draw(st.booleans()),
        control=draw(st.booleans()),
        log_append_time=draw(st.booleans()),
        producer_id=draw(st.integers(-1, 2**40)),
    )


def decode_with(impl: Any, buf: bytes) -> columns.BatchColumns:
    saved = columns.decode_records
    columns.decode_records = impl.decode_records
    try:
        return columns.decode_batch_columns(buf, 0, parse_header(buf))
    finally:
        columns.decode_records = saved


@SETTINGS
@given(batches())
def test_valid_batches_decode_identically_and_as_records_py(buf: bytes) -> None:
    header = parse_header(buf)
    decoded = {name: decode_with(impl, buf) for name, impl in IMPLS.items()}
    a, b = decoded["native"], decoded["python"]
    assert a.count == b.count == header.records_count
    assert a.raw_arrays == b.raw_arrays
    assert bytes(a.buffer) == bytes(b.buffer)
    assert (a.timestamp_type, a.is_control) == (header.timestamp_type, header.is_control)
    assert a.records() == decode_batch_records(buf, 0, header)


@SETTINGS
@given(batches())
def test_gather_of_decoded_columns(buf: bytes) -> None:
    cols = decode_with(native, buf)
    n = cols.count
    raw = cols.raw_arrays
    for starts, lengths, pick in ((raw[2], raw[3], cols.key), (raw[4], raw[5], cols.value)):
        status, (validity, offsets, data, nulls) = both(
            "gather", [(cols.buffer, starts, lengths, 0, n), (cols.buffer, starts, lengths, 1, n)]
        )
        assert status == "ok"
        rows = [pick(i) for i in range(n)] + [pick(i) for i in range(1, n)]
        offs = array("i")
        offs.frombytes(offsets)
        got = []
        for i in range(len(rows)):
            present = validity is None or (validity[i >> 3] >> (i & 7)) & 1
            got.append(data[offs[i] : offs[i + 1]] if present else None)
        assert got == rows
        assert nulls == sum(r is None for r in rows)


@SETTINGS
@given(batches(), st.data())
def test_build_records_alike_and_as_the_columns(buf: bytes, data: st.DataObject) -> None:
    """Consumer records built from columns: the same from both codecs, and the same
    offsets, timestamps, keys, values and headers as the columns' own records."""
    from odradek.client.structs import ConsumerRecord

    cols = decode_with(native, buf)
    lo = data.draw(st.integers(0, cols.count))
    hi = data.draw(st.integers(lo, cols.count))
    plain = (ConsumerRecord, cols.buffer, cols.raw_arrays, lo, hi, "t", 3, cols.timestamp_type)
    status, records = both("build_records", *plain, None, None)
    assert status == "ok"
    assert [type(r) for r in records] == [ConsumerRecord] * (hi - lo)
    assert [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in records] == [
        (d.offset, d.timestamp, d.key, d.value, d.headers) for d in cols.records()[lo:hi]
    ]
    assert all(
        (r.topic, r.partition, r.timestamp_type) == ("t", 3, cols.timestamp_type) for r in records
    )
    status, described = both("build_records", *plain, repr, repr)
    assert status == "ok"
    assert [(r.key, r.value) for r in described] == [(repr(r.key), repr(r.value)) for r in records]


def test_build_records_checks_its_arguments_alike() -> None:
    from odradek.client.structs import ConsumerRecord

    buf = build_batch([(b"k", b"v", [])], timestamp_ms=0)
    cols = decode_with(native, buf)
    args = (ConsumerRecord, cols.buffer, cols.raw_arrays)
    assert both("build_records", *args, 0, 2, "t", 0, 0, None, None)[0] == "error"
    assert both("build_records", *args, 1, 0, "t", 0, 0, None, None)[0] == "error"
    bad = (cols.raw_arrays[0], cols.raw_arrays[1], struct.pack("=i", 10**6), *cols.raw_arrays[3:])
    status, error = both(
        "build_records", ConsumerRecord, cols.buffer, bad, 0, 1, "t", 0, 0, None, None
    )
    assert (status, error) == (
        "error",
        ("ValueError", "build_records field points outside its buffer"),
    )


# --------------------------------------------------------------------------- corrupt input


@st.composite
def corrupted_sections(draw: st.DrawFn) -> tuple[bytes, int]:
    """A records section (decompressed) damaged in one of several ways, and a count."""
    recs = draw(st.lists(st.tuples(maybe_bytes, maybe_bytes, headers_st), min_size=1, max_size=5))
    body = bytearray(build_batch(recs, timestamp_ms=0)[BATCH_OVERHEAD:])
    count = len(recs)
    kind = draw(st.sampled_from(["flip", "cut", "insert", "count", "random", "varint"]))
    if kind == "flip":
        for _ in range(draw(st.integers(1, 4))):
            i = draw(st.integers(0, len(body) - 1))
            body[i] = draw(st.integers(0, 255))
    elif kind == "cut":
        del body[draw(st.integers(0, len(body) - 1)) :]
    elif kind == "insert":
        i = draw(st.integers(0, len(body)))
        body[i:i] = draw(st.binary(min_size=1, max_size=6))
    elif kind == "count":
        count = draw(st.integers(-3, count + 3))
    elif kind == "random":
        body = bytearray(draw(st.binary(max_size=64)))
        count = draw(st.integers(-1, 8))
    else:  # overlong / out-of-range varints and bad UTF-8 header keys, spliced in
        i = draw(st.integers(0, len(body)))
        body[i:i] = draw(
            st.sampled_from(
                [b"\xff" * 10 + b"\x01", b"\xff" * 9 + b"\x02", b"\x80" * 9 + b"\x01", b"\xc3\x28"]
            )
        )
    return bytes(body), count


@SETTINGS
@given(corrupted_sections(), st.booleans(), st.integers(0, 7))
def test_corrupt_sections_fail_or_decode_identically(
    damaged: tuple[bytes, int], fixed: bool, lead: int
) -> None:
    body, count = damaged
    buf = b"\x00" * lead + body  # a section in the middle of a larger buffer
    status, result = both(
        "decode_records", buf, lead, len(buf), count, 100, 1_000, 7 if fixed else None
    )
    if status == "error":
        assert result[0] == "CorruptRecordError"


# Where this codec is stricter than records.py (documented in _codec_py.py).
OWN_RULES = {
    "varint does not fit in 64 bits",
    "record offset does not fit in 64 bits",
    "record timestamp does not fit in 64 bits",
}


@SETTINGS
@given(corrupted_sections(), st.booleans())
def test_corrupt_sections_fail_as_records_py_does(
    damaged: tuple[bytes, int], log_append: bool
) -> None:
    body, count = damaged
    batch = columns.batch_from_body(
        body,
        count=count,
        last_offset_delta=max(0, count - 1),
        base_timestamp=1_000,
        max_timestamp=5_000,
        base_offset=100,
        log_append_time=log_append,
    )
    header = parse_header(batch)
    ours = outcome(lambda: columns.decode_batch_columns(batch, 0, header).records())
    theirs = outcome(decode_batch_records, batch, 0, header)
    if ours[0] == "ok":
        assert theirs == ours
    elif ours[1][1] == "record header key is not valid UTF-8":
        assert theirs[0] == "error" and theirs[1][0] == "UnicodeDecodeError"
    elif ours[1][1] not in OWN_RULES:
        assert theirs == ours


def _record_section(*raw_records: bytes) -> bytes:
    out = bytearray()
    for r in raw_records:
        out += _zigzag_varint(len(r)) + r
    return bytes(out)


def _zigzag_varint(n: int) -> bytes:
    out = bytearray()
    from odradek.protocol.records import _write_varint

    _write_varint(out, n)
    return bytes(out)


@pytest.mark.parametrize(
    ("section", "count", "message"),
    [
        (b"", 1, "varint runs past the end of the record data"),
        (b"\xff" * 11, 1, "varint is longer than 10 bytes"),
        (b"\xfe" + b"\xff" * 8 + b"\x02", 1, "varint does not fit in 64 bits"),
        (b"\x7f", 1, "record length runs past the end of the batch"),
        (_record_section(b"\x00\x00\x00\x10"), 1, "record field runs past the end of the record"),
        (_record_section(b"\x00\x00\x00\x01\x01\x03"), 1, "negative header count -2"),
        (_record_section(b"\x00\x00\x00\x01\x01\x02\x01\x01"), 1, "record header key is null"),
        (
            _record_section(b"\x00\x00\x00\x01\x01\x02\x04\xc3\x28\x01"),
            1,
            "record header key is not valid UTF-8",
        ),
        (_record_section(b"\x00\x00\x00\x01\x01\x00\x00"), 1, "record length does not match"),
        (_record_section(b"\x00\x00\x00\x01\x01\x00") + b"\x00", 1, "trailing bytes"),
    ],
)
def test_each_error_is_named_alike(section: bytes, count: int, message: str) -> None:
    status, (kind, text) = both("decode_records", section, 0, len(section), count, 0, 0, None)
    assert status == "error" and kind == "CorruptRecordError" and text.startswith(message)


def test_offset_overflow_is_an_error() -> None:
    section = _record_section(b"\x00\x00\x02\x01\x01\x00")  # offset delta 1
    status, (kind, text) = both("decode_records", section, 0, len(section), 1, 2**63 - 1, 0, None)
    assert (status, kind, text) == (
        "error",
        "CorruptRecordError",
        "record offset does not fit in 64 bits",
    )


def test_section_bounds_are_checked() -> None:
    status, (kind, _) = both("decode_records", b"abc", 2, 5, 1, 0, 0, None)
    assert (status, kind) == ("error", "ValueError")


# --------------------------------------------------------------------------- encoding


@SETTINGS
@given(INT64, INT64, maybe_bytes, maybe_bytes, st.none() | headers_st)
def test_encode_record_matches_records_py(
    offset_delta: int, ts_delta: int, key: bytes | None, value: bytes | None, hdrs: Any
) -> None:
    outs = {}
    for name, impl in IMPLS.items():
        out = bytearray(b"prefix")
        written = impl.encode_record(out, offset_delta, ts_delta, key, value, hdrs)
        assert written == len(out) - 6
        outs[name] = bytes(out)
    reference = bytearray(b"prefix")
    _encode_record(reference, Record(offset_delta, ts_delta, key, value, tuple(hdrs or ())))
    assert outs["native"] == outs["python"] == bytes(reference)


@pytest.mark.parametrize(
    "headers",
    [[("k", "not bytes")], [(b"k", b"v")], [("k", b"v", b"extra")], 5],
)
def test_encode_record_rejects_bad_headers_alike(headers: Any) -> None:
    status, (kind, _) = both("encode_record", bytearray(), 0, 0, b"k", b"v", headers)
    assert status == "error" and kind == "TypeError"


def arrow_binary(values: list[bytes | None], offset: int) -> tuple[Any, bytes, bytes, int]:
    """Arrow's binary layout for ``values`` preceded by ``offset`` padding rows."""
    rows = [b"pad"] * offset + values
    offs = array("i", [0])
    data = bytearray()
    bits = bytearray((len(rows) + 7) // 8)
    for i, v in enumerate(rows):
        if v is not None:
            data += v
            bits[i >> 3] |= 1 << (i & 7)
        offs.append(len(data))
    validity = bytes(bits) if any(v is None for v in rows) else None
    return validity, offs.tobytes(), bytes(data), offset


def arrow_int64(values: list[int | None], offset: int) -> tuple[Any, bytes, None, int]:
    rows = [0] * offset + values
    bits = bytearray((len(rows) + 7) // 8)
    for i, v in enumerate(rows):
        if v is not None:
            bits[i >> 3] |= 1 << (i & 7)
    validity = bytes(bits) if any(v is None for v in rows) else None
    return validity, array("q", [v or 0 for v in rows]).tobytes(), None, offset


@SETTINGS
@given(
    st.data(),
    st.integers(0, 12),
    st.integers(0, 3),
    st.none() | st.integers(0, 2**45),
    st.integers(0, 400),
)
def test_encode_columns_identically_and_decodable(
    data: st.DataObject, n: int, offset: int, base: int | None, max_bytes: int
) -> None:
    keys = data.draw(st.lists(maybe_bytes, min_size=n, max_size=n))
    values = data.draw(st.lists(maybe_bytes, min_size=n, max_size=n))
    stamps = data.draw(st.lists(st.none() | st.integers(0, 2**45), min_size=n, max_size=n))
    with_keys, with_ts, with_headers = (data.draw(st.booleans()) for _ in range(3))
    hdrs = data.draw(st.lists(st.none() | headers_st, min_size=n, max_size=n))
    lo = data.draw(st.integers(0, n))
    args = (
        7,
        base,
        1_700_000_000_000,
        arrow_binary(keys, offset) if with_keys else None,
        arrow_binary(values, offset),
        arrow_int64(stamps, offset) if with_ts else None,
        hdrs if with_headers else None,
        lo,
        n,
        max_bytes,
    )
    outs = {}
    for name, impl in IMPLS.items():
        out = bytearray(b"xy")
        outs[name] = (outcome(impl.encode_columns, out, *args), bytes(out))
    assert outs["native"] == outs["python"]
    (status, result), body = outs["native"]
    assert status == "ok"
    rows, base_ts, max_ts = result
    assert 0 <= rows <= n - lo
    assert len(body) - 2 <= max_bytes
    if rows == 0:
        return
    # What was written decodes to the rows asked for, with the right timestamps.
    decoded = native.decode_records(body, 2, len(body), rows, 0, base_ts, None)
    cols = columns.BatchColumns(body, decoded, 0, False)
    for i in range(rows):
        row = lo + i
        assert cols.offsets[i] == 7 + i
        want_ts = stamps[row] if with_ts and stamps[row] is not None else 1_700_000_000_000
        assert cols.timestamps[i] == want_ts
        assert cols.key(i) == (keys[row] if with_keys else None)
        assert cols.value(i) == values[row]
        assert cols.headers(i) == list((hdrs[row] or ()) if with_headers else ())
    assert max_ts == max(cols.timestamps[i] for i in range(rows))
    if base is not None:
        assert base_ts == base


def test_encode_columns_checks_buffer_sizes_alike() -> None:
    short = arrow_binary([b"a"], 0)
    status, (kind, _) = both(
        "encode_columns", bytearray(), 0, None, 0, None, short, None, None, 0, 2, 1000
    )
    assert (status, kind) == ("error", "ValueError")


def test_batch_from_body_equals_build_batch() -> None:
    recs = [(b"k%d" % i, b"v" * i, (("h", b"x"),)) for i in range(5)]
    body = bytearray()
    for i, (k, v, h) in enumerate(recs):
        columns.encode_record(body, i, 3 * i, k, v, h)
    for codec in (COMPRESSION_NONE, 1, 4):
        expected = build_batch(
            [Record(i, 3 * i, k, v, h) for i, (k, v, h) in enumerate(recs)],
            timestamp_ms=50,
            producer_id=9,
            producer_epoch=1,
            base_sequence=4,
            compression=codec,
        )
        got = columns.batch_from_body(
            body,
            count=5,
            last_offset_delta=4,
            base_timestamp=50,
            max_timestamp=62,
            producer_id=9,
            producer_epoch=1,
            base_sequence=4,
            compression=codec,
        )
        if codec == COMPRESSION_NONE:
            assert got == expected
        # Compressed payloads may differ byte for byte (gzip stores a time); records must not.
        assert decode_batch_records(got, 0, parse_header(got)) == decode_batch_records(
            expected, 0, parse_header(expected)
        )


# --------------------------------------------------------------------------- murmur2


@SETTINGS
@given(st.binary(max_size=64))
def test_murmur2_alike(data: bytes) -> None:
    assert native.murmur2(data) == _codec_py.murmur2(data)


def test_murmur2_known_values() -> None:
    # Kafka's UtilsTest.testMurmur2 vectors.
    cases = {
        b"21": -973932308,
        b"foobar": -790332482,
        b"a-little-bit-long-string": -985981536,
        b"a-little-bit-longer-string": -1486304829,
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
        b"abc": 479470107,
    }
    for data, expected in cases.items():
        assert native.murmur2(data) == _codec_py.murmur2(data) == expected


@SETTINGS
@given(st.lists(maybe_bytes, max_size=20), st.integers(0, 3), st.integers(1, 13))
def test_murmur2_partitions_alike(values: list[bytes | None], offset: int, parts: int) -> None:
    col = arrow_binary(values, offset)
    status, raw = both("murmur2_partitions", col, len(values), parts)
    assert status == "ok"
    got = list(struct.unpack(f"={len(values)}i", raw))
    want = [-1 if v is None else (_codec_py.murmur2(v) & 0x7FFFFFFF) % parts for v in values]
    assert got == want


# --------------------------------------------------------------------------- record_frames_ok


def frames_ok(buf: bytes, start: int, end: int, count: int) -> bool:
    """Both answers of record_frames_ok, asserted equal, and the Python walk's verdict."""
    status, answer = both("record_frames_ok", buf, start, end, count)
    assert status == "ok", answer
    try:
        _check_record_frames(buf, start, end, count, 0)
        walked = True
    except (InvalidRecordError, CorruptRecordError):
        walked = False
    assert answer is walked
    return bool(answer)


# Values whose records' lengths take one, two and three varint bytes.
value_sizes = st.sampled_from([0, 1, 40, 100, 200, 8_200, 17_000])


@SETTINGS
@given(st.lists(st.tuples(maybe_bytes, value_sizes), min_size=1, max_size=6), st.binary(max_size=9))
def test_valid_uncompressed_records_pass_both_walks(
    records: list[tuple[bytes | None, int]], tail: bytes
) -> None:
    body = build_batch([(k, b"v" * n, ()) for k, n in records], timestamp_ms=0)[BATCH_OVERHEAD:]
    buf = b"\x00" * 3 + body + tail  # the rest of a produce request around the section
    assert frames_ok(buf, 3, 3 + len(body), len(records))


@SETTINGS
@given(corrupted_sections(), st.integers(0, 7), st.binary(max_size=12))
def test_record_frames_ok_answers_as_the_python_walk(
    damaged: tuple[bytes, int], lead: int, tail: bytes
) -> None:
    """Damaged sections, with bytes after them that the walk may run into (a request's
    next batch): the compiled walk says yes exactly when the Python walk passes."""
    body, count = damaged
    buf = b"\x00" * lead + body + tail
    frames_ok(buf, lead, lead + len(body), count)


@SETTINGS
@given(st.binary(max_size=48), st.data())
def test_record_frames_ok_on_any_bytes(buf: bytes, data: st.DataObject) -> None:
    end = data.draw(st.integers(0, len(buf)))
    start = data.draw(st.integers(0, end))
    frames_ok(buf, start, end, data.draw(st.integers(-2, 8)))


def _record(length_varint: bytes, offset_delta: int, value: bytes) -> bytes:
    """A record with no key or headers whose length is written as ``length_varint``."""
    return length_varint + b"\x00\x00" + bytes([offset_delta * 2]) + b"\x01" + value + b"\x00"


@pytest.mark.parametrize(
    ("section", "count", "ok"),
    [
        # a body of 6 bytes (the least possible) in one byte, and in two non-canonical ones
        (_record(b"\x0c", 0, b"\x00"), 1, True),
        (_record(b"\x8c\x00", 0, b"\x00"), 1, True),
        # three bytes or more: any even length passes the frame walk, as in records.py
        (_record(b"\x8c\x80\x00", 0, b"\x00"), 1, True),
        (_record(b"\x8a\x80\x00", 0, b""), 1, True),
        (_record(b"\x8b\x80\x00", 0, b""), 1, False),  # odd: a negative length
        (_record(b"\x0a", 0, b""), 1, False),  # a body of 5 bytes cannot be a record
        (_record(b"\x0c", 1, b"\x00"), 1, False),  # the first offset delta is not 0
        (_record(b"\x0c", 0, b"\x00") + _record(b"\x0c", 2, b"\x00"), 2, False),
        (_record(b"\x0c", 0, b"\x00") + _record(b"\x0c", 1, b"\x00"), 2, True),
        (_record(b"\x0c", 0, b"\x00"), 2, False),  # fewer records than counted
        (b"\xff" * 10 + b"\x01" + b"\x00" * 8, 1, False),  # a length over 10 bytes
        (b"\xfe" + b"\xff" * 8 + b"\x01" + b"\x00" * 8, 1, False),  # a length of 2^63
    ],
)
def test_record_frames_ok_cases(section: bytes, count: int, ok: bool) -> None:
    assert frames_ok(section, 0, len(section), count) is ok


def test_record_frames_ok_checks_its_bounds_alike() -> None:
    for start, end in ((-1, 2), (3, 2), (0, 9)):
        status, (kind, _) = both("record_frames_ok", b"\x00" * 8, start, end, 1)
        assert (status, kind) == ("error", "ValueError")


# --------------------------------------------------------------------------- selection


def test_the_compiled_codec_is_in_use_unless_disabled() -> None:
    disabled = os.environ.get(NO_NATIVE_ENV, "") not in ("", "0")
    assert columns.NATIVE is not disabled
    assert columns.implementation == ("python" if disabled else "native")


def test_decoding_an_unknown_compression_is_refused() -> None:
    buf = bytearray(build_batch([(None, b"v", ())], timestamp_ms=0))
    buf[22] = (buf[22] & 0xF8) | 5  # attributes' low byte: codec 5
    with pytest.raises(Exception) as excinfo:
        columns.decode_batch_columns(bytes(buf), 0, parse_header(bytes(buf)))
    assert type(excinfo.value).__name__ == "UnsupportedCompressionError"


def test_a_corrupt_section_raises_corrupt_record_error() -> None:
    with pytest.raises(CorruptRecordError):
        columns.decode_records(b"\x7f", 0, 1, 1, 0, 0, None)


def test_a_stale_compiled_codec_falls_back_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    """A build older than the checkout (a function missing) is not used half-way."""
    import sys
    import types

    stale = types.ModuleType("odradek.protocol._codec")
    for name in _codec_py.__all__:
        if name != "build_records":
            setattr(stale, name, getattr(native, name))
    monkeypatch.setitem(sys.modules, "odradek.protocol._codec", stale)
    monkeypatch.setattr(sys.modules["odradek.protocol"], "_codec", stale)
    monkeypatch.delenv(NO_NATIVE_ENV, raising=False)
    with pytest.warns(RuntimeWarning, match="lacks build_records"):
        assert columns._load() is _codec_py
    stale.build_records = native.build_records
    assert columns._load() is stale


# --------------------------------------------------------------------------- batches_ok


@st.composite
def client_batches(draw: st.DrawFn) -> bytes:
    """A produce request's records for one partition: batches as clients send them, most
    uncompressed, some idempotent (a producer id, maybe without a sequence), control."""
    out = b""
    for _ in range(draw(st.integers(1, 3))):
        records = draw(st.lists(st.tuples(maybe_bytes, maybe_bytes, headers_st), min_size=1))
        out += build_batch(
            records,
            base_offset=draw(st.integers(0, 2**40)),
            timestamp_ms=draw(st.integers(0, 2**50)),
            compression=draw(st.sampled_from([0, 0, 0, 1])),
            transactional=draw(st.booleans()),
            control=draw(st.integers(0, 7)) == 0,
            producer_id=draw(st.sampled_from([-1, -1, 0, 2**40])),
            producer_epoch=draw(st.integers(-1, 5)),
            base_sequence=draw(st.sampled_from([0, 0, -1, 2**31 - 1])),
        )
    return out


@st.composite
def damaged_batches(draw: st.DrawFn) -> bytes:
    """Client batches with a byte set anywhere (a header field, a CRC, a record), cut
    short, or followed by a few more bytes."""
    buf = bytearray(draw(client_batches()))
    how = draw(st.sampled_from(["byte", "cut", "tail", "none"]))
    if how == "byte":
        buf[draw(st.integers(0, len(buf) - 1))] = draw(st.integers(0, 255))
    elif how == "cut":
        del buf[draw(st.integers(0, len(buf) - 1)) :]
    elif how == "tail":
        buf += draw(st.binary(min_size=1, max_size=70))
    return bytes(buf)


def python_walk(buf: bytes, allow_control: bool) -> tuple[str, Any]:
    """records.validate_batches_raw with the compiled check turned off: its own walk."""
    with mock.patch.object(records, "_batches_ok", lambda: None):
        return validated(buf, allow_control)


def validated(buf: bytes, allow_control: bool) -> tuple[str, Any]:
    """validate_batches_raw's outcome for a client's records, as the broker calls it."""
    return outcome(lambda: validate_batches_raw(memoryview(buf), allow_control=allow_control))


@SETTINGS
@given(client_batches() | damaged_batches(), st.booleans())
def test_batches_ok_answers_as_the_python_walk(buf: bytes, allow_control: bool) -> None:
    """Both implementations answer alike; a list only when the walk passes (and then its
    headers), None whenever it raises; every uncompressed set the walk passes is taken."""
    status, answer = both("batches_ok", buf, records.crc32c, allow_control)
    assert status == "ok", answer
    walked, result = python_walk(buf, allow_control)
    if answer is not None:
        event("taken")
        assert (walked, result) == ("ok", answer)
    elif walked == "ok":
        event("compressed: left to the walk")
        assert any(header[5] & 0x07 for header in result)  # only compressed ones go back
    else:
        event("refused: the walk words the error")
    assert validated(buf, allow_control) == (walked, result)  # the entry point says the same


@SETTINGS
@given(st.binary(max_size=80), st.booleans())
def test_batches_ok_on_any_bytes(buf: bytes, allow_control: bool) -> None:
    status, answer = both("batches_ok", buf, records.crc32c, allow_control)
    assert status == "ok", answer
    if answer is not None:
        assert python_walk(buf, allow_control) == ("ok", answer)
