"""Record batches as columns: the fast codec for the client's and Spark's hot paths.

``records.py`` keeps batches opaque for the broker and decodes records one Python
object at a time; this module decodes a batch's records section straight into
columns and encodes records into a batch body, with a compiled implementation
(``_codec.c``, built by ``pip install``) and a pure-Python twin (``_codec_py.py``)
used automatically when the extension is missing, or forced with
``ODRADEK_NO_NATIVE=1`` in the environment at import time. Both give identical
results and errors (``tests/protocol/test_batch_codec.py``).

Decoding: ``decode_batch_columns(buf, pos, header)`` gives a ``BatchColumns``:
offsets and timestamps as int64 arrays, keys, values and headers as
(start, length) pairs over one buffer (the fetched bytes themselves for an
uncompressed batch, the decompressed section otherwise). Nothing is copied per
record until asked for: ``key(i)``, ``value(i)``, ``headers(i)``, ``record(i)``;
``gather_binary`` copies many rows into Arrow's binary layout at once.

Encoding: ``encode_record`` appends one record to a bytearray (the producer
builds batch bodies with it), ``encode_columns`` appends many rows from
Arrow-layout columns (the Spark sink), ``batch_from_body`` puts the v2 header
and CRC32C in front. CRC32C is the ``crc32c`` package (SSE4.2 / ARMv8 CRC
instructions where present), called once per batch.
"""

from __future__ import annotations

import struct
import warnings
from collections.abc import Sequence
from typing import Any

from odradek.protocol import _codec_py
from odradek.protocol.native import compiled_module
from odradek.protocol.records import (
    BATCH_OVERHEAD,
    COMPRESSION_NONE,
    LOG_OVERHEAD,
    READ_MAX_DECOMPRESSED_BYTES,
    BatchHeader,
    DecodedRecord,
    RawHeader,
    _compress,
    crc32c,
    decompress,
)

__all__ = [
    "NATIVE",
    "BatchColumns",
    "batch_from_body",
    "build_records",
    "decode_batch_columns",
    "decode_columns_raw",
    "decompress_section",
    "encode_columns",
    "encode_record",
    "gather_binary",
    "implementation",
    "murmur2",
    "murmur2_partitions",
    "record_frames_ok",
]


def _load() -> Any:
    _codec = compiled_module()
    if _codec is None:
        return _codec_py
    missing = [name for name in _codec_py.__all__ if not hasattr(_codec, name)]
    if missing:
        # A build older than this checkout (pulled without `pip install -e .` again):
        # the fallback is correct, only slower; rebuilding brings the speed back.
        warnings.warn(
            f"odradek.protocol._codec lacks {', '.join(missing)} (a stale build); using the "
            "pure-Python codec. Run `pip install -e .` again to rebuild it.",
            RuntimeWarning,
            stacklevel=2,
        )
        return _codec_py
    return _codec


_impl = _load()
NATIVE: bool = _impl is not _codec_py
"""True when the compiled codec is in use."""

implementation: str = "native" if NATIVE else "python"

decode_records = _impl.decode_records
build_records = _impl.build_records
gather = _impl.gather
encode_record = _impl.encode_record
encode_columns = _impl.encode_columns
murmur2 = _impl.murmur2
murmur2_partitions = _impl.murmur2_partitions
record_frames_ok = _impl.record_frames_ok

_HEADER = struct.Struct(">qiibIhiqqqhii")
_CRC_START = 21
_CRC_POS = 17
_U32 = struct.Struct(">I")
_TIMESTAMP_TYPE_BIT = 0x08
_TRANSACTIONAL_BIT = 0x10
_CONTROL_BIT = 0x20


_ARRAYS = (
    ("offsets", "q"),
    ("timestamps", "q"),
    ("key_starts", "i"),
    ("key_lengths", "i"),
    ("value_starts", "i"),
    ("value_lengths", "i"),
    ("header_index", "i"),
    ("header_key_starts", "i"),
    ("header_key_lengths", "i"),
    ("header_value_starts", "i"),
    ("header_value_lengths", "i"),
)


def _array_property(index: int, fmt: str) -> property:
    """A typed view of one raw array, made on first access (most readers touch few)."""
    slot = "_v" + _ARRAYS[index][0]

    def get(self: BatchColumns) -> memoryview:
        view = getattr(self, slot)
        if view is None:
            view = memoryview(self.raw_arrays[index]).cast(fmt)
            setattr(self, slot, view)
        return view

    return property(get, doc=f"{_ARRAYS[index][0]} as a sequence of {fmt!r} ints")


class BatchColumns:
    """The records of one batch as columns over one buffer (see the module docs).

    ``offsets`` and ``timestamps`` are int64 sequences (absolute; LogAppendTime
    batches carry the batch's max timestamp on every record). Keys and values are
    ``*_starts`` / ``*_lengths`` int32 sequences into ``buffer`` (length -1 =
    null). Record ``i``'s headers are entries ``header_index[i]:header_index[i+1]``
    of the ``header_key_*`` / ``header_value_*`` sequences. ``raw_arrays`` holds
    the same eleven arrays as bytes (native endian), in that order.
    """

    __slots__ = (
        "buffer",
        "count",
        "is_control",
        "raw_arrays",
        "timestamp_type",
        *("_v" + name for name, _ in _ARRAYS),
    )

    offsets = _array_property(0, "q")
    timestamps = _array_property(1, "q")
    key_starts = _array_property(2, "i")
    key_lengths = _array_property(3, "i")
    value_starts = _array_property(4, "i")
    value_lengths = _array_property(5, "i")
    header_index = _array_property(6, "i")
    header_key_starts = _array_property(7, "i")
    header_key_lengths = _array_property(8, "i")
    header_value_starts = _array_property(9, "i")
    header_value_lengths = _array_property(10, "i")

    def __init__(
        self, buffer: Any, decoded: tuple[Any, ...], timestamp_type: int, is_control: bool
    ) -> None:
        self.buffer = buffer
        self.count: int = decoded[0]
        self.raw_arrays: tuple[bytes, ...] = decoded[1:]
        self.timestamp_type = timestamp_type
        self.is_control = is_control
        # The typed views, made on first use (one statement: a batch costs little).
        self._voffsets = self._vtimestamps = self._vkey_starts = self._vkey_lengths = None
        self._vvalue_starts = self._vvalue_lengths = self._vheader_index = None
        self._vheader_key_starts = self._vheader_key_lengths = None
        self._vheader_value_starts = self._vheader_value_lengths = None

    def __len__(self) -> int:
        return self.count

    def _slice(self, start: int, length: int) -> bytes | None:
        if length < 0:
            return None
        return bytes(self.buffer[start : start + length])

    def key(self, i: int) -> bytes | None:
        return self._slice(self.key_starts[i], self.key_lengths[i])

    def value(self, i: int) -> bytes | None:
        return self._slice(self.value_starts[i], self.value_lengths[i])

    def headers(self, i: int) -> list[tuple[str, bytes | None]]:
        out = []
        index = self.header_index
        key_starts, key_lengths = self.header_key_starts, self.header_key_lengths
        for h in range(index[i], index[i + 1]):
            start = key_starts[h]
            out.append(
                (
                    bytes(self.buffer[start : start + key_lengths[h]]).decode("utf-8"),
                    self._slice(self.header_value_starts[h], self.header_value_lengths[h]),
                )
            )
        return out

    def record(self, i: int) -> DecodedRecord:
        """Record ``i`` as ``records.decode_batch_records`` would give it."""
        return DecodedRecord(
            self.offsets[i],
            self.timestamps[i],
            self.key(i),
            self.value(i),
            tuple(self.headers(i)),
            self.is_control,
        )

    def records(self) -> list[DecodedRecord]:
        return [self.record(i) for i in range(self.count)]

    def first_at_or_after(self, offset: int) -> int:
        """Index of the first record whose offset is >= ``offset`` (``count`` if none)."""
        offsets = self.offsets
        lo, hi = 0, self.count
        while lo < hi:  # offsets increase within a batch
            mid = (lo + hi) // 2
            if offsets[mid] < offset:
                lo = mid + 1
            else:
                hi = mid
        return lo


def decompress_section(
    codec: int, data: bytes | memoryview, max_bytes: int = READ_MAX_DECOMPRESSED_BYTES
) -> bytes:
    """A compressed batch's records section, inflated by ``records.py`` within
    ``max_bytes`` (the one place the codec reaches for decompression; its errors are
    records.py's)."""
    return decompress(codec, data, max_bytes)


def decode_batch_columns(
    buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader
) -> BatchColumns:
    """Decode the records of the batch at ``pos`` (decompressing if needed) into columns.

    Raises ``CorruptRecordError`` for a malformed records section, and what
    ``records.decompress`` raises for a bad, unsupported or oversized compression.
    """
    return decode_columns_raw(buf, pos, _raw(header))


def _raw(header: BatchHeader) -> RawHeader:
    return (
        header.base_offset,
        header.batch_length,
        header.partition_leader_epoch,
        header.magic,
        header.crc,
        header.attributes,
        header.last_offset_delta,
        header.base_timestamp,
        header.max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        header.records_count,
    )


def decode_columns_raw(buf: bytes | bytearray | memoryview, pos: int, t: RawHeader) -> BatchColumns:
    """``decode_batch_columns`` from the raw header tuple (``records.unpack_header``): the
    form for walks over many batches, which need no ``BatchHeader`` object."""
    start = pos + BATCH_OVERHEAD
    end = pos + t[1] + LOG_OVERHEAD
    attributes = t[5]
    codec = attributes & 0x07
    if codec != COMPRESSION_NONE:
        buf = decompress_section(codec, memoryview(buf)[start:end])
        start, end = 0, len(buf)
    log_append = (attributes >> 3) & 1
    decoded = decode_records(buf, start, end, t[12], t[0], t[7], t[8] if log_append else None)
    return BatchColumns(buf, decoded, log_append, bool(attributes & _CONTROL_BIT))


def gather_binary(
    segments: Sequence[tuple[Any, bytes, bytes, int, int]],
) -> tuple[bytes | None, bytes, bytes, int]:
    """Copy rows of (buffer, starts, lengths, lo, hi) segments into one Arrow binary
    column: ``(validity bitmap or None, int32 offsets, data, null count)``."""
    return gather(segments)


def batch_from_body(
    body: bytes | bytearray,
    *,
    count: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    compression: int = COMPRESSION_NONE,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
    transactional: bool = False,
    control: bool = False,
    log_append_time: bool = False,
) -> bytes:
    """A complete v2 batch (header, CRC32C) around an encoded records section."""
    payload = body if compression == COMPRESSION_NONE else _compress(compression, bytes(body))
    attributes = compression & 0x07
    if log_append_time:
        attributes |= _TIMESTAMP_TYPE_BIT
    if transactional:
        attributes |= _TRANSACTIONAL_BIT
    if control:
        attributes |= _CONTROL_BIT
    out = bytearray(BATCH_OVERHEAD + len(payload))
    _HEADER.pack_into(
        out,
        0,
        base_offset,
        BATCH_OVERHEAD - LOG_OVERHEAD + len(payload),
        partition_leader_epoch,
        2,
        0,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    )
    out[BATCH_OVERHEAD:] = payload
    _U32.pack_into(out, _CRC_POS, crc32c(memoryview(out)[_CRC_START:]))
    return bytes(out)
