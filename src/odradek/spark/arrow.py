"""The source's output schema and Arrow RecordBatch building.

The schema is Spark's Kafka source schema. Spark checks a returned
``pyarrow.RecordBatch`` against it exactly (names, order, types), so the
timestamp column must be ``timestamp[us, tz=UTC]``, not a naive timestamp.

``ColumnsBuilder`` is the executors' fast path: fetched record batches are
decoded into columns by the compiled codec (``protocol.columns``) and copied
into Arrow buffers in bulk (``Array.from_buffers``), with no Python object per
row. ``add_fetched`` walks one fetched blob into a builder. ``BatchBuilder``
builds the same batches from record objects (the reference the tests compare
against).
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from odradek.client.errors import CorruptRecordError
from odradek.client.read_committed import ReadCommittedFilter
from odradek.protocol.columns import decode_records, decompress_section, gather_binary
from odradek.protocol.records import (
    BATCH_OVERHEAD,
    COMPRESSION_NONE,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    BatchHeader,
    RecordError,
    crc32c,
    marker_is_abort,
)

SCHEMA_DDL = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
HEADERS_DDL = "headers array<struct<key:string,value:binary>>"

HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")


def schema_ddl(include_headers: bool) -> str:
    return f"{SCHEMA_DDL}, {HEADERS_DDL}" if include_headers else SCHEMA_DDL


def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", TIMESTAMP_TYPE),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADER_TYPE))
    return pa.schema(fields)


class BatchBuilder:
    """Collects records of one partition column by column and emits RecordBatches."""

    def __init__(self, topic: str, partition: int, include_headers: bool) -> None:
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self.schema = arrow_schema(include_headers)
        self._reset()

    def _reset(self) -> None:
        self.keys: list[Any] = []
        self.values: list[Any] = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.ts_types: list[int] = []
        self.headers: list[Any] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, records: Iterable[Any]) -> None:
        """ConsumerRecord-like objects (offset, key, value, timestamp, headers, timestamp_type)."""
        keys, values, offsets = self.keys, self.values, self.offsets
        tss, types, headers = self.timestamps, self.ts_types, self.headers
        with_headers = self.include_headers
        for r in records:
            keys.append(r.key)
            values.append(r.value)
            offsets.append(r.offset)
            tss.append(r.timestamp * 1000)
            types.append(r.timestamp_type)
            if with_headers:
                headers.append([{"key": k, "value": v} for k, v in r.headers])

    def build(self) -> pa.RecordBatch:
        n = len(self.offsets)
        columns = [
            pa.array(self.keys, type=pa.binary()),
            pa.array(self.values, type=pa.binary()),
            pa.array([self.topic] * n, type=pa.string()) if n else pa.array([], type=pa.string()),
            pa.array([self.partition] * n, type=pa.int32()),
            pa.array(self.offsets, type=pa.int64()),
            pa.array(self.timestamps, type=pa.int64()).cast(TIMESTAMP_TYPE),
            pa.array(self.ts_types, type=pa.int32()),
        ]
        if self.include_headers:
            columns.append(pa.array(self.headers, type=HEADER_TYPE))
        self._reset()
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)


# --------------------------------------------------------------------------- columns path

_HEADER = struct.Struct(">qiibIhiqqqhii")
_CONTROL_BIT = 0x20
_TRANSACTIONAL_BIT = 0x10
_LITTLE_ENDIAN = sys.byteorder == "little"


class _Segment:
    """Rows ``lo..hi`` of one decoded batch (the codec's raw arrays over ``buffer``)."""

    __slots__ = ("buffer", "hi", "lo", "raw", "timestamp_type")

    def __init__(self, buffer: Any, raw: tuple[Any, ...], lo: int, hi: int, ts_type: int) -> None:
        self.buffer = buffer
        self.raw = raw
        self.lo = lo
        self.hi = hi
        self.timestamp_type = ts_type


def _binary(kind: pa.DataType, gathered: tuple[bytes | None, bytes, bytes, int], n: int) -> Any:
    validity, offsets, data, nulls = gathered
    buffers = [None if validity is None else pa.py_buffer(validity)]
    buffers += [pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(kind, n, buffers, null_count=nulls)


def _int_column(kind: pa.DataType, chunks: list[bytes], n: int) -> Any:
    return pa.Array.from_buffers(kind, n, [None, pa.py_buffer(b"".join(chunks))])


class ColumnsBuilder:
    """Collects decoded rows of one partition and emits Arrow RecordBatches in bulk."""

    def __init__(self, topic: str, partition: int, include_headers: bool) -> None:
        if not _LITTLE_ENDIAN:
            raise RuntimeError("the Arrow fast path needs a little-endian machine")
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self.schema = arrow_schema(include_headers)
        self._segments: list[_Segment] = []
        self.rows = 0

    def __len__(self) -> int:
        return self.rows

    def add(self, buffer: Any, raw: tuple[Any, ...], lo: int, hi: int, ts_type: int) -> None:
        """Rows ``lo..hi`` of a batch decoded by ``columns.decode_records`` (``raw`` is
        its result without the count) over ``buffer``."""
        if hi > lo:
            self._segments.append(_Segment(buffer, raw, lo, hi, ts_type))
            self.rows += hi - lo

    def build(self) -> pa.RecordBatch:
        segs, n = self._segments, self.rows
        self._segments, self.rows = [], 0
        keys = _binary(pa.binary(), gather_binary([_rows(s, 2) for s in segs]), n)
        values = _binary(pa.binary(), gather_binary([_rows(s, 4) for s in segs]), n)
        offsets = _int_column(pa.int64(), [_slice(s, 0, 8) for s in segs], n)
        millis = _int_column(pa.int64(), [_slice(s, 1, 8) for s in segs], n)
        types = array("i")
        for s in segs:
            types.extend(array("i", [s.timestamp_type]) * (s.hi - s.lo))
        columns = [
            keys,
            values,
            pa.repeat(self.topic, n) if n else pa.array([], type=pa.string()),
            pa.repeat(pa.scalar(self.partition, pa.int32()), n),
            offsets,
            pc.multiply_checked(millis, 1000).view(TIMESTAMP_TYPE),
            _int_column(pa.int32(), [types.tobytes()], n),
        ]
        if self.include_headers:
            columns.append(self._headers(segs, n))
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)

    @staticmethod
    def _headers(segs: list[_Segment], n: int) -> Any:
        # List offsets: each segment's slice of the codec's header index, shifted to follow
        # the previous segment (pyarrow compute, no Python object per row).
        chunks = [pa.array([0], type=pa.int32())]
        key_rows, value_rows = [], []
        total = 0
        for s in segs:
            index = memoryview(s.raw[6]).cast("i")
            first, last = index[s.lo], index[s.hi]
            chunk = pa.Array.from_buffers(
                pa.int32(),
                s.hi - s.lo,
                [None, pa.py_buffer(_slice_rows(s.raw[6], s.lo + 1, s.hi + 1, 4))],
            )
            chunks.append(pc.add(chunk, pa.scalar(total - first, pa.int32())))
            total += last - first
            key_rows.append((s.buffer, s.raw[7], s.raw[8], first, last))
            value_rows.append((s.buffer, s.raw[9], s.raw[10], first, last))
        struct_type = HEADER_TYPE.value_type
        entries = pa.StructArray.from_arrays(
            [
                _binary(pa.string(), gather_binary(key_rows), total),
                _binary(pa.binary(), gather_binary(value_rows), total),
            ],
            fields=[struct_type.field(0), struct_type.field(1)],
        )
        offsets = pa.concat_arrays(chunks)
        return pa.ListArray.from_arrays(offsets, entries, type=HEADER_TYPE)


def _slice_rows(raw: Any, lo: int, hi: int, width: int) -> bytes:
    return bytes(memoryview(raw)[lo * width : hi * width])


def _rows(s: _Segment, index: int) -> tuple[Any, Any, Any, int, int]:
    """The gather segment of one (starts, lengths) pair of arrays."""
    return s.buffer, s.raw[index], s.raw[index + 1], s.lo, s.hi


def _slice(s: _Segment, index: int, width: int) -> bytes:
    return _slice_rows(s.raw[index], s.lo, s.hi, width)


def add_fetched(
    builder: ColumnsBuilder,
    blob: bytes,
    position: int,
    until: int,
    check_crcs: bool,
    committed: ReadCommittedFilter | None = None,
) -> int:
    """Add the records of ``blob`` (a Fetch answer's record batches) with offsets in
    ``[position, until)`` to ``builder``; return the position after the last complete batch
    (past control batches; ``position`` when there is none). A torn last batch (the fetch
    size cut it) is left for the next fetch. Raises ``CorruptRecordError``.

    ``committed`` (read_committed): the answer's aborted transactions; it sees every
    control and transactional batch in order, and a batch of an aborted transaction
    adds nothing."""
    view = memoryview(blob)
    end = len(blob)
    pos = 0
    tp = f"{builder.topic}-{builder.partition}"
    while end - pos >= BATCH_OVERHEAD:
        (base, length, _, magic, crc, attrs, lod, base_ts, max_ts, _, _, _, count) = (
            _HEADER.unpack_from(blob, pos)
        )
        size = length + LOG_OVERHEAD
        if length < MIN_BATCH_LENGTH or pos + size > end:
            break
        next_offset = base + lod + 1
        if committed is not None and attrs & _CONTROL_BIT and next_offset <= position:
            # A marker behind the position still ends its producer's transaction.
            committed.accept(
                BatchHeader(*_HEADER.unpack_from(blob, pos)),
                abort_marker=marker_is_abort(blob, pos),
            )
        if next_offset > position:
            if magic != 2:
                raise CorruptRecordError(
                    f"record batch at offset {base} of {tp} has magic {magic}; "
                    "only magic 2 (Kafka 0.11+) is read"
                )
            if check_crcs and crc32c(view[pos + 21 : pos + size]) != crc:
                raise CorruptRecordError(
                    f"record batch at offset {base} of {tp} failed its CRC32C check"
                )
            if committed is not None and attrs & (_CONTROL_BIT | _TRANSACTIONAL_BIT):
                header = BatchHeader(*_HEADER.unpack_from(blob, pos))
                marker = bool(attrs & _CONTROL_BIT) and marker_is_abort(blob, pos)
                keep = committed.accept(header, abort_marker=marker)
            else:
                keep = True
            if keep and not attrs & _CONTROL_BIT:  # control batches carry no user records
                _add_batch(
                    builder,
                    blob,
                    pos,
                    size,
                    attrs,
                    count,
                    base,
                    base_ts,
                    max_ts,
                    position,
                    until,
                    tp,
                )
            position = next_offset
        pos += size
    return position


def _add_batch(
    builder: ColumnsBuilder,
    blob: bytes,
    pos: int,
    size: int,
    attrs: int,
    count: int,
    base: int,
    base_ts: int,
    max_ts: int,
    position: int,
    until: int,
    tp: str,
) -> None:
    buffer: Any = blob
    start, stop = pos + BATCH_OVERHEAD, pos + size
    log_append = (attrs >> 3) & 1
    try:
        if attrs & 0x07 != COMPRESSION_NONE:
            buffer = decompress_section(attrs & 0x07, memoryview(blob)[start:stop])
            start, stop = 0, len(buffer)
        decoded = decode_records(
            buffer, start, stop, count, base, base_ts, max_ts if log_append else None
        )
    except RecordError as exc:
        raise CorruptRecordError(f"cannot decode a batch of {tp}: {exc}") from exc
    n = decoded[0]
    offsets = memoryview(decoded[1]).cast("q")
    lo = 0 if n == 0 or offsets[0] >= position else _first_at_or_after(offsets, position)
    hi = n if n == 0 or offsets[n - 1] < until else _first_at_or_after(offsets, until)
    builder.add(buffer, decoded[1:], lo, hi, log_append)


def _first_at_or_after(offsets: Any, offset: int) -> int:
    lo, hi = 0, len(offsets)
    while lo < hi:
        mid = (lo + hi) // 2
        if offsets[mid] < offset:
            lo = mid + 1
        else:
            hi = mid
    return lo


# --------------------------------------------------------------------------- sink side


def codec_column(arr: Any) -> tuple[Any, Any, Any, int]:
    """An Arrow binary or int64 array as the codec's column tuple
    ``(validity, offsets or values, data, offset)`` (no copy)."""
    if not _LITTLE_ENDIAN:
        raise RuntimeError("the Arrow fast path needs a little-endian machine")
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    buffers = arr.buffers()
    if pa.types.is_binary(arr.type) or pa.types.is_string(arr.type):
        offsets = buffers[1] if buffers[1] is not None else b"\x00\x00\x00\x00"
        return buffers[0], offsets, buffers[2] if buffers[2] is not None else b"", arr.offset
    if pa.types.is_int64(arr.type):
        return buffers[0], buffers[1] if buffers[1] is not None else b"", None, arr.offset
    raise TypeError(f"no codec layout for Arrow type {arr.type}")
