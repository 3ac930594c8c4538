"""The pure-Python record-batch codec: the fallback twin of the compiled ``_codec`` module.

Both implement the same functions with the same results and the same errors (type
and message) on every input; ``tests/protocol/test_batch_codec.py`` checks that
with hypothesis. ``odradek.protocol.columns`` picks one of them at import time.
Every check of ``decode_records`` and its order mirror ``records._decode_record``,
so a records section either decodes to the same records as ``records.py`` or
fails with a ``CorruptRecordError``; this codec adds three rules of its own: a
varint must fit in 64 bits, absolute offsets and timestamps must fit in 64 bits,
and a header key must be valid UTF-8 (``records.py`` lets a ``UnicodeDecodeError``
escape there).

Arrays are exchanged as ``bytes`` of native-endian int64 (``q``) / int32 (``i``).
A column in Arrow's layout is a tuple ``(validity, offsets, data, offset)``:
``validity`` a bitmap (LSB first, 1 = present) or None, ``offsets`` int32 offsets
into ``data`` for binary columns (``len + 1`` of them) or the int64 values for
an int64 column (``data`` is then None), ``offset`` the index of row 0 in them.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

from odradek.protocol.records import (
    _COMPRESSION_MASK,
    _CONTROL_BIT,
    _CRC_START,
    BATCH_OVERHEAD,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    CorruptRecordError,
    InvalidRecordError,
    RawHeader,
    _check_record_frames,
    _read_varint,
    _write_varint,
    unpack_header,
)

__all__ = [
    "batches_ok",
    "build_records",
    "decode_records",
    "encode_columns",
    "encode_record",
    "gather",
    "murmur2",
    "murmur2_partitions",
    "record_frames_ok",
]

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_INT32_MAX = 2**31 - 1

Column = tuple[Any, Any, Any, int]
Decoded = tuple[int, bytes, bytes, bytes, bytes, bytes, bytes, bytes, bytes, bytes, bytes, bytes]


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    value, pos = _read_varint(buf, pos)
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise CorruptRecordError("varint does not fit in 64 bits")
    return value, pos


def _field(buf: memoryview, pos: int, end: int) -> tuple[int, int, int]:
    """(start, length or -1 for null, new position), bounds as records._read_bytes."""
    n, pos = _varint(buf, pos)
    if n < 0:
        return pos, -1, pos
    if pos + n > end:
        raise CorruptRecordError("record field runs past the end of the record")
    return pos, n, pos + n


def decode_records(
    buf: Any,
    start: int,
    end: int,
    count: int,
    base_offset: int,
    base_timestamp: int,
    fixed_timestamp: int | None,
) -> Decoded:
    """Decode ``count`` records from ``buf[start:end]`` (a decompressed records section).

    Returns ``(n, offsets, timestamps, key_starts, key_lengths, value_starts,
    value_lengths, header_index, header_key_starts, header_key_lengths,
    header_value_starts, header_value_lengths)``: absolute offsets and timestamps
    (``fixed_timestamp`` for every record when given: LogAppendTime), positions
    in ``buf`` (length -1 = null), and ``header_index`` (``n + 1`` entries: record
    i's headers are entries ``header_index[i]:header_index[i + 1]``).
    """
    view = memoryview(buf).cast("B")
    if start < 0 or end < start or end > len(view):
        raise ValueError(f"records section [{start}, {end}) is outside a {len(view)}-byte buffer")
    if end > _INT32_MAX:
        raise ValueError("record data buffers are limited to 2 GiB")
    mv = view[:end]  # bounds checks are against the section end, as records.py's are
    offsets, timestamps = array("q"), array("q")
    key_starts, key_lengths, value_starts, value_lengths = (array("i") for _ in range(4))
    header_index = array("i", [0])
    hk_starts, hk_lengths, hv_starts, hv_lengths = (array("i") for _ in range(4))
    pos = start
    for _ in range(count):
        length, pos = _varint(mv, pos)
        rec_end = pos + length
        if length < 0 or rec_end > end:
            raise CorruptRecordError("record length runs past the end of the batch")
        pos += 1  # attributes: unused
        ts_delta, pos = _varint(mv, pos)
        off_delta, pos = _varint(mv, pos)
        ks, kl, pos = _field(mv, pos, end)
        vs, vl, pos = _field(mv, pos, end)
        hcount, pos = _varint(mv, pos)
        if hcount < 0:
            raise CorruptRecordError(f"negative header count {hcount}")
        for _ in range(hcount):
            hks, hkl, pos = _field(mv, pos, end)
            if hkl < 0:
                raise CorruptRecordError("record header key is null")
            hvs, hvl, pos = _field(mv, pos, end)
            try:
                bytes(mv[hks : hks + hkl]).decode("utf-8")
            except UnicodeDecodeError:
                raise CorruptRecordError("record header key is not valid UTF-8") from None
            hk_starts.append(hks)
            hk_lengths.append(hkl)
            hv_starts.append(hvs)
            hv_lengths.append(hvl)
        if pos != rec_end:
            raise CorruptRecordError("record length does not match its content")
        offset = base_offset + off_delta
        if not _INT64_MIN <= offset <= _INT64_MAX:
            raise CorruptRecordError("record offset does not fit in 64 bits")
        if fixed_timestamp is not None:
            ts = fixed_timestamp
        else:
            ts = base_timestamp + ts_delta
            if not _INT64_MIN <= ts <= _INT64_MAX:
                raise CorruptRecordError("record timestamp does not fit in 64 bits")
        offsets.append(offset)
        timestamps.append(ts)
        key_starts.append(ks)
        key_lengths.append(kl)
        value_starts.append(vs)
        value_lengths.append(vl)
        header_index.append(len(hk_starts))
    if pos != end:
        raise CorruptRecordError("trailing bytes after the last record of a batch")
    return (
        len(offsets),
        offsets.tobytes(),
        timestamps.tobytes(),
        key_starts.tobytes(),
        key_lengths.tobytes(),
        value_starts.tobytes(),
        value_lengths.tobytes(),
        header_index.tobytes(),
        hk_starts.tobytes(),
        hk_lengths.tobytes(),
        hv_starts.tobytes(),
        hv_lengths.tobytes(),
    )


def build_records(
    cls: type,
    buffer: Any,
    arrays: Sequence[bytes],
    lo: int,
    hi: int,
    topic: str,
    partition: int,
    timestamp_type: int,
    key_deserializer: Any,
    value_deserializer: Any,
) -> list[Any]:
    """Records ``lo:hi`` of decoded columns as ``cls`` tuples (a consumer's records).

    ``arrays`` are the eleven arrays ``decode_records`` returns after the count. Each
    record is ``cls((topic, partition, offset, key, value, timestamp, headers,
    timestamp_type))`` built with ``tuple.__new__``; keys and values are copied out
    of ``buffer`` (None when null) and passed through the deserializers when given;
    ``headers`` is a new list of ``(str, bytes | None)`` pairs.
    """
    buf = memoryview(buffer)
    offsets, timestamps = array("q", arrays[0]), array("q", arrays[1])
    key_starts, key_lengths = array("i", arrays[2]), array("i", arrays[3])
    value_starts, value_lengths = array("i", arrays[4]), array("i", arrays[5])
    index = array("i", arrays[6])
    hk_starts, hk_lengths = array("i", arrays[7]), array("i", arrays[8])
    hv_starts, hv_lengths = array("i", arrays[9]), array("i", arrays[10])
    if not 0 <= lo <= hi <= len(offsets):
        raise ValueError("build_records rows out of range")

    def field(start: int, length: int) -> bytes | None:
        if length < 0:
            return None
        if start < 0 or start + length > len(buf):
            raise ValueError("build_records field points outside its buffer")
        return bytes(buf[start : start + length])

    out = []
    new = tuple.__new__
    for i in range(lo, hi):
        key = field(key_starts[i], key_lengths[i])
        value = field(value_starts[i], value_lengths[i])
        headers = []
        for h in range(index[i], index[i + 1]):
            name = field(hk_starts[h], hk_lengths[h])
            headers.append(
                ("" if name is None else name.decode("utf-8"), field(hv_starts[h], hv_lengths[h]))
            )
        if key_deserializer is not None:
            key = key_deserializer(key)
        if value_deserializer is not None:
            value = value_deserializer(value)
        out.append(
            new(
                cls,
                (topic, partition, offsets[i], key, value, timestamps[i], headers, timestamp_type),
            )
        )
    return out


def gather(
    segments: Sequence[tuple[Any, bytes, bytes, int, int]],
) -> tuple[bytes | None, bytes, bytes, int]:
    """Copy slices into one Arrow binary column: ``(validity or None, offsets, data, nulls)``.

    Each segment is ``(buf, starts, lengths, lo, hi)``: rows ``lo..hi`` of int32
    ``starts`` / ``lengths`` arrays over ``buf`` (length -1 = null).
    """
    rows: list[tuple[memoryview, int, int]] = []
    for buf, starts_raw, lengths_raw, lo, hi in segments:
        mv = memoryview(buf).cast("B")
        starts = memoryview(starts_raw).cast("B").cast("i")
        lengths = memoryview(lengths_raw).cast("B").cast("i")
        if len(lengths) != len(starts) or lo < 0 or hi < lo or hi > len(starts):
            raise ValueError("gather segment rows out of range")
        for r in range(lo, hi):
            s, n = starts[r], lengths[r]
            if n >= 0 and (s < 0 or s + n > len(mv)):
                raise ValueError("gather segment points outside its buffer")
            rows.append((mv, s, n))
    total = sum(n for _, _, n in rows if n >= 0)
    if total > _INT32_MAX:
        raise ValueError("gathered column exceeds 2 GiB (Arrow binary limit)")
    offsets = array("i", [0])
    data = bytearray()
    nulls = sum(1 for _, _, n in rows if n < 0)
    bits = bytearray((len(rows) + 7) // 8) if nulls else None
    for i, (mv, s, n) in enumerate(rows):
        if n >= 0:
            data += mv[s : s + n]
            if bits is not None:
                bits[i >> 3] |= 1 << (i & 7)
        offsets.append(len(data))
    return (bytes(bits) if bits is not None else None), offsets.tobytes(), bytes(data), nulls


def _header_bytes(headers: Any) -> bytes:
    """The header section after the record's value: count, then each key and value."""
    out = bytearray()
    if headers is None:
        _write_varint(out, 0)
        return bytes(out)
    try:
        pairs = list(headers)
    except TypeError:
        raise TypeError("headers must be a sequence of (key, value)") from None
    _write_varint(out, len(pairs))
    for pair in pairs:
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise TypeError("a header must be a (key, value) tuple")
        hk, hv = pair
        if not isinstance(hk, str):
            raise TypeError("a header key must be str")
        kb = hk.encode("utf-8")
        _write_varint(out, len(kb))
        out += kb
        if hv is None:
            _write_varint(out, -1)
        elif isinstance(hv, bytes):
            _write_varint(out, len(hv))
            out += hv
        else:
            raise TypeError("a header value must be bytes or None")
    return bytes(out)


def _record_bytes(
    offset_delta: int, timestamp_delta: int, key: Any, value: Any, header_section: bytes
) -> bytes:
    body = bytearray(b"\x00")  # attributes
    _write_varint(body, timestamp_delta)
    _write_varint(body, offset_delta)
    for field in (key, value):
        if field is None:
            _write_varint(body, -1)
        else:
            raw = bytes(field)
            _write_varint(body, len(raw))
            body += raw
    body += header_section
    out = bytearray()
    _write_varint(out, len(body))
    out += body
    return bytes(out)


def _bytes_field(obj: Any, what: str) -> Any:
    if obj is None or isinstance(obj, bytes):
        return obj
    try:
        return memoryview(obj).cast("B")
    except TypeError:
        raise TypeError(f"a record {what} must be bytes-like or None") from None


def encode_record(
    out: bytearray,
    offset_delta: int,
    timestamp_delta: int,
    key: Any,
    value: Any,
    headers: Any,
) -> int:
    """Append one encoded record to ``out``; returns the number of bytes written."""
    if not isinstance(out, bytearray):
        raise TypeError("encode_record() writes into a bytearray")
    _check_int64(offset_delta, timestamp_delta)
    key = _bytes_field(key, "key")
    value = _bytes_field(value, "value")
    rec = _record_bytes(offset_delta, timestamp_delta, key, value, _header_bytes(headers))
    out += rec
    return len(rec)


def _check_int64(*values: int) -> None:
    for v in values:
        if not _INT64_MIN <= v <= _INT64_MAX:
            raise OverflowError("Python int too large to convert to C long")


class _ColumnView:
    """Row access to an Arrow-layout column tuple, with the compiled codec's checks."""

    def __init__(self, col: Column | None, binary: bool, rows_needed: int) -> None:
        self.present = col is not None
        if col is None:
            return
        validity, values, data, offset = col
        self.offset = offset
        self.validity = None if validity is None else memoryview(validity).cast("B")
        fmt = "i" if binary else "q"
        raw = memoryview(values).cast("B")
        self.data = memoryview(data).cast("B") if binary else None
        width = 4 if binary else 8
        need = (offset + rows_needed + (1 if binary else 0)) * width
        if (
            offset < 0
            or len(raw) < need
            or (self.validity is not None and len(self.validity) * 8 < offset + rows_needed)
        ):
            raise ValueError("column buffers are shorter than the rows asked for")
        self.values = raw[: len(raw) // width * width].cast(fmt)

    def valid(self, row: int) -> bool:
        if self.validity is None:
            return True
        i = self.offset + row
        return bool((self.validity[i >> 3] >> (i & 7)) & 1)

    def bytes_at(self, row: int) -> memoryview | None:
        if not self.present or not self.valid(row):
            return None
        assert self.data is not None
        a, b = self.values[self.offset + row], self.values[self.offset + row + 1]
        if a < 0 or b < a or b > len(self.data):
            raise ValueError("column offsets point outside its data")
        return self.data[a:b]

    def int_at(self, row: int) -> int | None:
        if not self.present or not self.valid(row):
            return None
        return int(self.values[self.offset + row])


def encode_columns(
    out: bytearray,
    first_offset_delta: int,
    base_timestamp: int | None,
    now_ms: int,
    keys: Column | None,
    values: Column | None,
    timestamps: Column | None,
    headers: Sequence[Any] | None,
    lo: int,
    hi: int,
    max_bytes: int,
) -> tuple[int, int, int]:
    """Append records for rows ``lo..hi`` of Arrow-layout columns to ``out``.

    Row ``lo`` gets offset delta ``first_offset_delta``, the next one more. A row's
    timestamp is its ``timestamps`` value, or ``now_ms`` where null or absent;
    deltas are relative to ``base_timestamp`` (None: the first row's timestamp).
    ``headers`` holds one entry per row (None or (str, bytes | None) pairs),
    indexed like the columns. Stops before the first row that would take the bytes
    written past ``max_bytes``. Returns ``(rows written, base timestamp, max
    timestamp)`` (the max is int64's minimum when no row was written).
    """
    if not isinstance(out, bytearray):
        raise TypeError("encode_columns() writes into a bytearray")
    if lo < 0 or hi < lo:
        raise ValueError("encode_columns: bad row range")
    _check_int64(first_offset_delta, now_ms)
    key_col = _ColumnView(keys, True, hi)
    value_col = _ColumnView(values, True, hi)
    ts_col = _ColumnView(timestamps, False, hi)
    if headers is not None:
        try:
            headers = list(headers)
        except TypeError:
            raise TypeError("headers must be a sequence (one entry per row)") from None
        if len(headers) < hi:
            raise ValueError("fewer header entries than rows")
    base = base_timestamp
    if base is not None:
        _check_int64(base)
    max_ts = _INT64_MIN
    written = 0
    row = lo
    while row < hi:
        key = key_col.bytes_at(row)
        value = value_col.bytes_at(row)
        ts = ts_col.int_at(row)
        t = now_ms if ts is None else ts
        if base is None:
            base = t
        section = _header_bytes(headers[row] if headers is not None else None)
        delta = t - base
        if not _INT64_MIN <= delta <= _INT64_MAX:
            raise OverflowError("record timestamp too far from the batch's")
        rec = _record_bytes(first_offset_delta + (row - lo), delta, key, value, section)
        if written + len(rec) > max_bytes:
            break
        out += rec
        written += len(rec)
        max_ts = max(max_ts, t)
        row += 1
    return row - lo, (base if base is not None else 0), max_ts


_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: Any) -> int:
    """Kafka's ``Utils.murmur2``: 32-bit MurmurHash2, seed 0x9747b28c, as a signed int."""
    data = bytes(memoryview(data).cast("B"))
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    end = length & ~3
    for i in range(0, end, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    tail = length & 3
    if tail == 3:
        h ^= data[end + 2] << 16
    if tail >= 2:
        h ^= data[end + 1] << 8
    if tail >= 1:
        h ^= data[end]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def murmur2_partitions(column: Column, rows: int, num_partitions: int) -> bytes:
    """``toPositive(murmur2(row)) % num_partitions`` per row as int32, -1 for null rows."""
    if num_partitions <= 0 or rows < 0:
        raise ValueError("murmur2_partitions needs rows >= 0, partitions > 0")
    col = _ColumnView(column, True, rows)
    out = array("i")
    for r in range(rows):
        raw = col.bytes_at(r)
        out.append(-1 if raw is None else (murmur2(raw) & 0x7FFFFFFF) % num_partitions)
    return out.tobytes()


def record_frames_ok(buf: Any, start: int, end: int, count: int) -> bool:
    """Whether ``records._check_record_frames`` accepts the uncompressed records of a batch
    (``count`` of them in ``buf[start:end]``; ``buf`` may be the whole produce request's
    records, which the walk reads past ``end`` as it would). The broker's produce path
    asks this first and lets the Python walk word the error only when the answer is no.
    """
    if not 0 <= start <= end <= len(buf):
        raise ValueError("record_frames_ok needs 0 <= start <= end <= len(buf)")
    try:
        _check_record_frames(buf, start, end, count, 0)
    except (InvalidRecordError, CorruptRecordError):
        return False
    return True


def batches_ok(buf: Any, crc32c: Any, allow_control: bool) -> list[RawHeader] | None:
    """``records.validate_batches_raw(buf, allow_control=...)`` for a client's uncompressed
    batches, answering instead of raising: the headers when every check passes (CRC32C by
    ``crc32c``), None when one fails or a batch is compressed. The broker's produce path
    asks this first; on None the Python walk decides and words the error."""
    view = memoryview(buf).cast("B")
    end = len(view)
    if end == 0:
        return None
    headers: list[RawHeader] = []
    pos = 0
    while pos < end:
        if end - pos < BATCH_OVERHEAD:
            return None
        t = unpack_header(view, pos)
        (_, length, _, magic, crc, attrs, lod, _, _, pid, _, seq, count) = t
        if length < MIN_BATCH_LENGTH or length + LOG_OVERHEAD > end - pos or magic != 2:
            return None
        size = length + LOG_OVERHEAD
        if attrs & _COMPRESSION_MASK or lod < 0 or count <= 0 or count != lod + 1:
            return None
        if pid >= 0 and seq < 0 and not attrs & _CONTROL_BIT:
            return None
        if attrs & _CONTROL_BIT and not allow_control:
            return None
        if crc32c(view[pos + _CRC_START : pos + size]) != crc:
            return None
        try:
            _check_record_frames(view, pos + BATCH_OVERHEAD, pos + size, count, pos)
        except (InvalidRecordError, CorruptRecordError):
            return None
        headers.append(t)
        pos += size
    return headers
