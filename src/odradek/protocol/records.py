"""Kafka record batch v2 (magic 2): header view, validation, patching, and a small codec.

The broker keeps record batches opaque: on the hot path (Produce, Fetch) it only
parses the fixed 61-byte batch header, checks lengths and the CRC32C, and patches
fields that lie outside the CRC (base offset, partition leader epoch) in place.
The record-level encoder/decoder below exists for the group coordinator (which
writes and replays its own records in ``__consumer_offsets``), for
``offset_for_timestamp`` refinement, and for tests; it is deliberately not fast.

Produce-time validation (``validate_batches_raw``) follows Kafka's LogValidator
for magic 2: besides the header and CRC it walks every record without building
objects. An uncompressed batch gets the cheap walk (``_check_record_frames``:
record lengths tile the batch into exactly ``records_count`` records, whose
first and last offset deltas are 0 and n-1), in C when the compiled codec is
built (``_codec.record_frames_ok``; this module's walk words the error). A
compressed one is first inflated with a hard output bound (``decompress``), so
a small batch that would inflate to gigabytes is refused before it costs
memory, then walked completely (``_check_records``: every offset delta, key,
value and header length).

Batch layout (big endian), offsets in bytes::

    0  base_offset             int64
    8  batch_length            int32   (bytes after this field)
    12 partition_leader_epoch  int32
    16 magic                   int8    (2)
    17 crc                     uint32  (CRC32C of bytes 21..end)
    21 attributes              int16
    23 last_offset_delta       int32
    27 base_timestamp          int64
    35 max_timestamp           int64
    43 producer_id             int64
    51 producer_epoch          int16
    53 base_sequence           int32
    57 records_count           int32
    61 records ...
"""

from __future__ import annotations

import functools
import gzip
import struct
import zlib
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import crc32c as _crc32c_mod

from odradek.protocol.native import compiled_function

__all__ = [
    "BATCH_OVERHEAD",
    "COMPRESSION_GZIP",
    "COMPRESSION_LZ4",
    "COMPRESSION_NONE",
    "COMPRESSION_SNAPPY",
    "COMPRESSION_ZSTD",
    "CONTROL_ABORT",
    "CONTROL_COMMIT",
    "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "LOG_OVERHEAD",
    "MIN_BATCH_LENGTH",
    "READ_MAX_DECOMPRESSED_BYTES",
    "BatchHeader",
    "CorruptRecordError",
    "DecodedRecord",
    "InvalidRecordError",
    "RawHeader",
    "Record",
    "RecordError",
    "RecordListTooLargeError",
    "UnsupportedCompressionError",
    "batch_crc",
    "build_batch",
    "build_end_txn_marker",
    "control_type",
    "decode_batch_records",
    "decode_records",
    "decompress",
    "iter_batches",
    "marker_is_abort",
    "parse_header",
    "patch_base_offset",
    "patch_partition_leader_epoch",
    "recompress_batches",
    "set_log_append_time",
    "unpack_header",
    "validate_batches",
    "validate_batches_raw",
]

# --------------------------------------------------------------------------- errors


class RecordError(Exception):
    """Base of every storage-level error; carries the Kafka error code to answer with.

    ``odradek.log.errors.LogError`` is this very class (protocol cannot import log,
    so the base lives here and the log package re-exports it under its own name).
    """

    error_code: ClassVar[int] = -1  # UNKNOWN_SERVER_ERROR


class CorruptRecordError(RecordError):
    """CORRUPT_MESSAGE (2): bad CRC, bad length, truncated batch, unknown magic."""

    error_code: ClassVar[int] = 2


class InvalidRecordError(RecordError):
    """INVALID_RECORD (87): well-formed bytes that break a batch-level rule."""

    error_code: ClassVar[int] = 87


class UnsupportedCompressionError(RecordError):
    """UNSUPPORTED_COMPRESSION_TYPE (76): codec unknown or its library is missing."""

    error_code: ClassVar[int] = 76


class RecordListTooLargeError(RecordError):
    """RECORD_LIST_TOO_LARGE (18): a compressed batch inflates past the decompression bound."""

    error_code: ClassVar[int] = 18


# --------------------------------------------------------------------------- header

_HEADER = struct.Struct(">qiibIhiqqqhii")
LOG_OVERHEAD = 12  # base_offset + batch_length
BATCH_OVERHEAD = _HEADER.size  # 61
MIN_BATCH_LENGTH = BATCH_OVERHEAD - LOG_OVERHEAD  # 49
_CRC_START = 21  # attributes offset: CRC covers [21, end)
_CRC_POS = 17
_ATTR_POS = 21
_MAX_TS_POS = 35

_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")

COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4
_COMPRESSION_MASK = 0x07

DEFAULT_MAX_DECOMPRESSED_BYTES = 16 * 1024 * 1024
"""Default bound on what one compressed batch may inflate to (message.decompressed.max.bytes)."""
READ_MAX_DECOMPRESSED_BYTES = 256 * 1024 * 1024
"""Bound for decoders of batches no Odradek broker validated (the client reading any broker)."""
_MIN_RECORD_BYTES = 7  # length, attributes, timestamp and offset deltas, key, value, header count

_TIMESTAMP_TYPE_BIT = 0x08
_TRANSACTIONAL_BIT = 0x10
_CONTROL_BIT = 0x20

_INT32_MAX = 2**31 - 1

crc32c = _crc32c_mod.crc32c


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The fixed 61-byte header of a v2 record batch (records stay unparsed)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def compression(self) -> int:
        """Codec id: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd."""
        return self.attributes & 0x07

    @property
    def timestamp_type(self) -> int:
        """0 = CreateTime, 1 = LogAppendTime."""
        return (self.attributes >> 3) & 1

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_BIT)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record, wrapping at int32 max like Kafka; -1 if none."""
        if self.base_sequence < 0:
            return -1
        return _increment_sequence(self.base_sequence, self.last_offset_delta)

    @property
    def size(self) -> int:
        """Total bytes of the batch on the wire / on disk."""
        return self.batch_length + LOG_OVERHEAD


def _increment_sequence(seq: int, inc: int) -> int:
    """Kafka's int32 sequence arithmetic: wraps to 0 after Integer.MAX_VALUE."""
    if seq > _INT32_MAX - inc:
        return inc - (_INT32_MAX - seq) - 1
    return seq + inc


_unpack_header = _HEADER.unpack_from
unpack_header = _unpack_header
"""(buffer, position) -> the header as a ``RawHeader`` tuple: the cheap form for walks."""


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the batch header at ``pos``; raises struct.error if fewer than 61 bytes."""
    return BatchHeader(*_unpack_header(buf, pos))


def iter_batches(buf: bytes | bytearray | memoryview) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) of every complete batch; stop quietly at a torn tail.

    Used on trusted data (our own segments); a length below the minimum also
    stops the walk since nothing after it can be located.
    """
    end = len(buf)
    pos = 0
    while end - pos >= BATCH_OVERHEAD:
        h = BatchHeader(*_unpack_header(buf, pos))
        size = h.batch_length + LOG_OVERHEAD
        if h.batch_length < MIN_BATCH_LENGTH or pos + size > end:
            return
        yield pos, h
        pos += size


def batch_crc(buf: bytes | bytearray | memoryview, pos: int, size: int) -> int:
    """CRC32C over attributes..end of the batch at ``pos`` (what the header must hold)."""
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    return crc32c(mv[pos + _CRC_START : pos + size])


def validate_batches(
    buf: bytes | bytearray | memoryview,
    *,
    allow_control: bool = False,
    check_records: bool = True,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> list[BatchHeader]:
    """Check client-supplied batches completely; return their headers in order.

    Rules follow Kafka's produce-path validation: every batch complete, magic 2,
    sane length, CRC32C correct, a known codec, records_count >= 1 and equal to
    last_offset_delta + 1, idempotent batches carry a sequence, clients may not
    write control batches, and (``check_records``) the records themselves parse
    (see ``_check_records``; compressed ones after inflating at most
    ``max_decompressed_bytes``). Raises CorruptRecordError (2),
    RecordListTooLargeError (18), UnsupportedCompressionError (76) or
    InvalidRecordError (87).
    """
    return [
        BatchHeader(*t)
        for t in validate_batches_raw(
            buf,
            allow_control=allow_control,
            check_records=check_records,
            max_decompressed_bytes=max_decompressed_bytes,
        )
    ]


RawHeader = tuple[int, int, int, int, int, int, int, int, int, int, int, int, int]
"""Header fields as a plain tuple, in BatchHeader field order (hot-path form)."""


def validate_batches_raw(
    buf: bytes | bytearray | memoryview,
    *,
    allow_control: bool = False,
    check_records: bool = True,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> list[RawHeader]:
    """``validate_batches`` returning plain tuples: building dataclasses costs ~2 us each."""
    if check_records:
        # A client's uncompressed batches are checked in one compiled pass
        # (_codec.batches_ok, the same checks as below: tests/protocol/test_batch_codec.py);
        # when it says no (a check failed, a batch is compressed), or is not built, this
        # walk runs, and words the error.
        compiled = _batches_ok()
        if compiled is not None:
            checked = compiled(buf, crc32c, allow_control)
            if checked is not None:
                return checked  # type: ignore[no-any-return]
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    end = len(mv)
    if end == 0:
        raise InvalidRecordError("no record batch in produce data")
    data = _indexable(buf) if check_records else b""
    frames_ok = _record_frames_ok()
    headers: list[RawHeader] = []
    pos = 0
    while pos < end:
        remaining = end - pos
        if remaining < BATCH_OVERHEAD:
            raise CorruptRecordError(
                f"truncated record batch at byte {pos}: {remaining} bytes left, "
                f"a batch header needs {BATCH_OVERHEAD}"
            )
        t = _unpack_header(mv, pos)
        (_, length, _, magic, crc, attrs, lod, _, _, pid, _, seq, count) = t
        if length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(
                f"record batch at byte {pos} has batch_length {length}, "
                f"below the minimum {MIN_BATCH_LENGTH}"
            )
        size = length + LOG_OVERHEAD
        if size > remaining:
            raise CorruptRecordError(
                f"truncated record batch at byte {pos}: length says {size} bytes, "
                f"only {remaining} present"
            )
        if magic != 2:
            if 0 <= magic < 2:
                raise InvalidRecordError(
                    f"record batch at byte {pos} has magic {magic}; only magic 2 is accepted"
                )
            raise CorruptRecordError(f"record batch at byte {pos} has unknown magic {magic}")
        actual = crc32c(mv[pos + _CRC_START : pos + size])
        if actual != crc:
            raise CorruptRecordError(
                f"record batch at byte {pos} failed CRC32C: stored {crc:#010x}, "
                f"computed {actual:#010x}"
            )
        codec = attrs & _COMPRESSION_MASK
        if codec > COMPRESSION_ZSTD:
            raise UnsupportedCompressionError(
                f"record batch at byte {pos} uses unknown compression codec {codec}"
            )
        if lod < 0:
            raise InvalidRecordError(
                f"record batch at byte {pos} has negative last_offset_delta {lod}"
            )
        if count <= 0:
            raise InvalidRecordError(f"record batch at byte {pos} reports {count} records")
        if count != lod + 1:
            raise InvalidRecordError(
                f"record batch at byte {pos}: records_count {count} is inconsistent "
                f"with last_offset_delta {lod}"
            )
        if pid >= 0 and seq < 0 and not attrs & _CONTROL_BIT:
            # Transaction markers carry the producer id and epoch but no sequence.
            raise InvalidRecordError(
                f"record batch at byte {pos} has producer_id {pid} but invalid base_sequence {seq}"
            )
        if attrs & _CONTROL_BIT and not allow_control:
            raise InvalidRecordError("clients are not allowed to write control batches")
        if check_records:
            if codec == COMPRESSION_NONE:
                # The compiled walk answers (_codec.record_frames_ok, the same as this
                # module's walk: tests/protocol/test_batch_codec.py); when it says no, or
                # is not built, the Python walk runs (and words the error).
                if frames_ok is None or not frames_ok(
                    data, pos + BATCH_OVERHEAD, pos + size, count
                ):
                    _check_record_frames(data, pos + BATCH_OVERHEAD, pos + size, count, pos)
            else:
                inflated = decompress(
                    codec, mv[pos + BATCH_OVERHEAD : pos + size], max_decompressed_bytes
                )
                _check_records(inflated, 0, len(inflated), count, pos)
        headers.append(t)
        pos += size
    return headers


@functools.cache
def _batches_ok() -> Callable[[Any, Any, bool], list[RawHeader] | None] | None:
    """The compiled check of a client's uncompressed batches (``_codec.batches_ok``), or
    None: then this module's walk checks them (`odradek.protocol.native`)."""
    return compiled_function("batches_ok")  # type: ignore[no-any-return]


@functools.cache
def _record_frames_ok() -> Callable[[Any, int, int, int], bool] | None:
    """The compiled record-frame walk (``_codec.record_frames_ok``), or None: then this
    module's own walk checks every batch (`odradek.protocol.native`)."""
    return compiled_function("record_frames_ok")  # type: ignore[no-any-return]


def _indexable(buf: bytes | bytearray | memoryview) -> bytes | bytearray | memoryview:
    """The object itself when it is (or a memoryview spans all of) bytes: indexing is faster."""
    if isinstance(buf, memoryview):
        obj = buf.obj
        if isinstance(obj, bytes | bytearray) and buf.nbytes == len(obj) and buf.c_contiguous:
            return obj
    return buf


def _uvarint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Raw (still zigzagged) varint at ``pos``: (value, next position); IndexError past the end."""
    raw = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return raw, pos
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint is longer than 10 bytes")


def _check_records(
    buf: bytes | bytearray | memoryview, pos: int, end: int, count: int, batch_pos: int
) -> None:
    """Walk ``count`` records in ``buf[pos:end]`` without decoding them; raise if they lie.

    Each record's length must land inside the batch, its offset delta must be its
    index (Kafka producers write 0..n-1; Kafka refuses anything else), its key and
    value lengths must be -1 or non-negative, its header keys non-null, and its
    fields must end exactly at its length; the records must fill the batch
    exactly. Varints are read inline for the one- and two-byte cases, which are
    nearly all of them: this runs for every record of every produced batch.
    """
    if count * _MIN_RECORD_BYTES > end - pos:
        raise InvalidRecordError(
            f"record batch at byte {batch_pos}: records_count {count} cannot fit in "
            f"{end - pos} bytes of records"
        )
    index = 0
    want = 0  # zigzag encoding of the expected offset delta (2 * index)
    try:
        while index < count:
            b = buf[pos]
            if b < 0x80:
                v = b
                pos += 1
            else:
                c = buf[pos + 1]
                if c < 0x80:
                    v = (b & 0x7F) | (c << 7)
                    pos += 2
                else:
                    v, pos = _uvarint(buf, pos)
            record_end = pos + (v >> 1)
            if v & 1 or record_end > end:
                raise _RecordLie(index, "its length runs outside the batch")
            p = pos + 1  # attributes (unused by every format version so far)
            b = buf[p]  # timestamp delta: any value
            if b < 0x80:
                p += 1
            elif buf[p + 1] < 0x80:
                p += 2
            else:
                _, p = _uvarint(buf, p)
            b = buf[p]  # offset delta
            if b < 0x80:
                v = b
                p += 1
            else:
                c = buf[p + 1]
                if c < 0x80:
                    v = (b & 0x7F) | (c << 7)
                    p += 2
                else:
                    v, p = _uvarint(buf, p)
            if v != want:
                raise _RecordLie(index, f"its offset delta is {(v >> 1) ^ -(v & 1)}")
            for _ in (0, 1):  # key, then value: -1 (zigzag 1) or a length
                b = buf[p]
                if b < 0x80:
                    v = b
                    p += 1
                else:
                    c = buf[p + 1]
                    if c < 0x80:
                        v = (b & 0x7F) | (c << 7)
                        p += 2
                    else:
                        v, p = _uvarint(buf, p)
                if v & 1:
                    if v != 1:
                        raise _RecordLie(index, "a key or value has a negative length")
                else:
                    p += v >> 1
            b = buf[p]  # header count
            if b:
                p = _skip_headers(buf, p, index)
            else:
                p += 1
            if p != record_end:
                raise _RecordLie(index, "its fields do not add up to its length")
            pos = record_end
            index += 1
            want += 2
    except _RecordLie as lie:
        raise InvalidRecordError(
            f"record batch at byte {batch_pos}: record {lie.index} is invalid: {lie.reason}"
        ) from None
    except IndexError:
        raise InvalidRecordError(
            f"record batch at byte {batch_pos}: record {index} runs past the end of the batch"
        ) from None
    if pos != end:
        raise InvalidRecordError(
            f"record batch at byte {batch_pos}: {end - pos} bytes follow the last of its "
            f"{count} records (records_count does not match the records)"
        )


def _frame_steps() -> array:
    """For every first two bytes of a record: the record's size if its length is a one- or
    two-byte varint of a possible body (even, >= 6 bytes), 0 if impossible, -1 if longer."""
    steps = array("i", bytes(4 * 65536))
    for b0 in range(256):
        for b1 in range(256):
            if b0 < 0x80:
                n, used = b0, 1
            elif b1 < 0x80:
                n, used = (b0 & 0x7F) | (b1 << 7), 2
            else:
                steps[(b0 << 8) | b1] = -1
                continue
            if not n & 1 and n >> 1 >= _MIN_RECORD_BYTES - 1:
                steps[(b0 << 8) | b1] = used + (n >> 1)
    return steps


_FRAME_STEPS = _frame_steps()


def _check_record_frames(
    buf: bytes | bytearray | memoryview, pos: int, end: int, count: int, batch_pos: int
) -> None:
    """The cheap walk for uncompressed batches: record frames, and the ends' offset deltas.

    Each record's length must be possible and land inside the batch, the lengths
    must tile the batch into exactly ``count`` records, and the first record's
    offset delta must be 0 and the last one's ``count - 1``. Only each record's
    length is read, through a table of the first two bytes (one lookup per
    record): this runs for every record produced, at about 0.15 us each; the
    full walk (``_check_records``, for compressed batches, which are inflated
    anyway) costs about 1 us.
    """
    if count * _MIN_RECORD_BYTES > end - pos:
        raise InvalidRecordError(
            f"record batch at byte {batch_pos}: records_count {count} cannot fit in "
            f"{end - pos} bytes of records"
        )
    steps = _FRAME_STEPS
    start = last = pos
    try:
        for _ in range(count):
            last = pos
            step = steps[(buf[pos] << 8) | buf[pos + 1]]
            if step <= 0:
                if step == 0:
                    raise _RecordLie(-1, "impossible length")
                n, body = _uvarint(buf, pos)  # a length of three bytes or more
                if n & 1:
                    raise _RecordLie(-1, "negative length")
                step = body - pos + (n >> 1)
            pos += step
        if pos != end:
            raise InvalidRecordError(
                f"record batch at byte {batch_pos}: its records do not fill it "
                f"({end - pos:+d} bytes): records_count {count} does not match the records"
            )
        for index, at in ((0, start), (count - 1, last)):
            delta = _offset_delta_at(buf, at)
            if delta != index:
                raise InvalidRecordError(
                    f"record batch at byte {batch_pos}: record {index} has offset delta {delta}"
                )
    except _RecordLie:
        raise InvalidRecordError(
            f"record batch at byte {batch_pos}: a record length is impossible or runs past the "
            f"end of the batch (records_count {count})"
        ) from None
    except IndexError:
        raise InvalidRecordError(
            f"record batch at byte {batch_pos}: its records run past its end "
            f"(records_count {count})"
        ) from None


def _offset_delta_at(buf: bytes | bytearray | memoryview, pos: int) -> int:
    """The offset delta of the record starting at ``pos`` (after length and attributes)."""
    _, p = _uvarint(buf, pos)  # length
    _, p = _uvarint(buf, p + 1)  # timestamp delta, after the attributes byte
    v, _ = _uvarint(buf, p)
    return (v >> 1) ^ -(v & 1)


class _RecordLie(Exception):
    def __init__(self, index: int, reason: str) -> None:
        self.index = index
        self.reason = reason


def _skip_headers(buf: bytes | bytearray | memoryview, p: int, index: int) -> int:
    """Position after a record's header section (rarely used, so not inlined)."""
    n, p = _uvarint(buf, p)
    if n & 1:
        raise _RecordLie(index, "it has a negative header count")
    for _ in range(n >> 1):
        v, p = _uvarint(buf, p)
        if v & 1:
            raise _RecordLie(index, "a header key is null")
        p += v >> 1
        v, p = _uvarint(buf, p)
        if v & 1:
            if v != 1:
                raise _RecordLie(index, "a header value has a negative length")
        else:
            p += v >> 1
    return p


# --------------------------------------------------------------------------- patching


def patch_base_offset(buf: bytearray | memoryview, pos: int, new_base: int) -> None:
    """Overwrite the base offset in place; it is outside the CRC so nothing else changes."""
    _I64.pack_into(buf, pos, new_base)


def patch_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    """Overwrite the partition leader epoch in place (outside the CRC too)."""
    _I32.pack_into(buf, pos + 12, epoch)


def set_log_append_time(
    buf: bytearray | memoryview, pos: int, timestamp_ms: int, size: int | None = None
) -> None:
    """Stamp LogAppendTime: set timestamp-type bit and max_timestamp, then rewrite the CRC.

    Consumers use max_timestamp as every record's timestamp for LogAppendTime
    batches, so base_timestamp and record deltas are left untouched (as Kafka does).
    """
    if size is None:
        size = _I32.unpack_from(buf, pos + 8)[0] + LOG_OVERHEAD
    attrs = _I16.unpack_from(buf, pos + _ATTR_POS)[0]
    _I16.pack_into(buf, pos + _ATTR_POS, attrs | _TIMESTAMP_TYPE_BIT)
    _I64.pack_into(buf, pos + _MAX_TS_POS, timestamp_ms)
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    _U32.pack_into(buf, pos + _CRC_POS, crc32c(mv[pos + _CRC_START : pos + size]))


# --------------------------------------------------------------------------- varints


def _zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def _write_varint(out: bytearray, n: int) -> None:
    """Append a zigzag varint (Kafka uses the same encoding for varint and varlong)."""
    v = _zigzag(n) & 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Read a zigzag varint; returns (value, new position)."""
    shift = 0
    raw = 0
    while True:
        if pos >= len(buf):
            raise CorruptRecordError("varint runs past the end of the record data")
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint is longer than 10 bytes")
    return (raw >> 1) ^ -(raw & 1), pos


# --------------------------------------------------------------------------- compression

_XERIAL_MAGIC = b"\x82SNAPPY\x00"


def _snappy_module() -> Any:
    try:
        import cramjam

        return ("cramjam", cramjam)
    except ImportError:
        pass
    try:
        import snappy

        return ("snappy", snappy)
    except ImportError as exc:
        raise UnsupportedCompressionError("snappy needs cramjam or python-snappy") from exc


def _snappy_raw_decompress(data: bytes | memoryview) -> bytes:
    kind, mod = _snappy_module()
    if kind == "cramjam":
        return bytes(mod.snappy.decompress_raw(bytes(data)))
    return bytes(mod.uncompress(bytes(data)))


def _snappy_raw_compress(data: bytes) -> bytes:
    kind, mod = _snappy_module()
    if kind == "cramjam":
        return bytes(mod.snappy.compress_raw(data))
    return bytes(mod.compress(data))


def _snappy_raw_length(block: bytes | memoryview) -> int:
    """The uncompressed length a raw snappy block declares in its varint preamble."""
    n = 0
    for i in range(min(len(block), 5)):
        b = block[i]
        n |= (b & 0x7F) << (7 * i)
        if b < 0x80:
            return n
    raise CorruptRecordError("snappy block has no valid length preamble")


def _unsnappy(data: bytes | memoryview, limit: int) -> bytes:
    """Kafka's Java client frames snappy the xerial way; librdkafka may send raw blocks.

    Each raw block declares its length up front, so the bound is checked before
    anything is inflated.
    """
    data = bytes(data)
    if not data.startswith(_XERIAL_MAGIC):
        if _snappy_raw_length(data) > limit:
            raise _too_large(COMPRESSION_SNAPPY, limit)
        return _snappy_raw_decompress(data)
    pos = len(_XERIAL_MAGIC) + 8  # version + min compatible version
    blocks: list[bytes] = []
    total = 0
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptRecordError("truncated xerial snappy block header")
        (n,) = _I32.unpack_from(data, pos)
        pos += 4
        if n < 0 or pos + n > len(data):
            raise CorruptRecordError("truncated xerial snappy block")
        block = data[pos : pos + n]
        total += _snappy_raw_length(block)
        if total > limit:
            raise _too_large(COMPRESSION_SNAPPY, limit)
        blocks.append(_snappy_raw_decompress(block))
        pos += n
    return b"".join(blocks)


def _snappy_compress_xerial(data: bytes) -> bytes:
    out = bytearray(_XERIAL_MAGIC)
    out += _I32.pack(1) + _I32.pack(1)
    block = 32 * 1024
    for i in range(0, len(data), block):
        c = _snappy_raw_compress(data[i : i + block])
        out += _I32.pack(len(c))
        out += c
    return bytes(out)


_GZIP_MAGIC = b"\x1f\x8b"


def _gunzip(data: bytes | memoryview, limit: int) -> bytes:
    """Every gzip member in turn, as Java's GZIPInputStream reads them; trailing
    bytes that do not start another member are ignored, as it does too."""
    rest = bytes(data)
    parts: list[bytes] = []
    total = 0
    while True:
        inflater = zlib.decompressobj(wbits=31)
        part = inflater.decompress(rest, limit - total + 1)
        total += len(part)
        if total > limit:
            raise _too_large(COMPRESSION_GZIP, limit)
        if not inflater.eof:
            raise CorruptRecordError("gzip data ends before its end-of-stream marker")
        parts.append(part)
        rest = inflater.unused_data
        if not rest.startswith(_GZIP_MAGIC):
            break
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _unlz4(data: bytes | memoryview, limit: int) -> bytes:
    try:
        import lz4.frame
    except ImportError as exc:
        raise UnsupportedCompressionError("lz4 needs the lz4 package") from exc
    inflater = lz4.frame.LZ4FrameDecompressor()
    out = inflater.decompress(bytes(data), max_length=limit + 1)
    if len(out) > limit:
        raise _too_large(COMPRESSION_LZ4, limit)
    if not inflater.eof:
        raise CorruptRecordError("lz4 frame ends before its end mark")
    return bytes(out)


_ZSTD_MAX_WINDOW = 1 << 27  # zstd's own default decoder limit, stated explicitly
_ZSTD_READ = 1 << 20


def _unzstd(data: bytes | memoryview, limit: int) -> bytes:
    try:
        import zstandard
    except ImportError as exc:
        raise UnsupportedCompressionError("zstd needs the zstandard package") from exc
    reader = zstandard.ZstdDecompressor(max_window_size=_ZSTD_MAX_WINDOW).stream_reader(
        bytes(data), read_across_frames=True
    )
    parts: list[bytes] = []
    total = 0
    while True:
        part = reader.read(min(_ZSTD_READ, limit - total + 1))
        if not part:
            break
        total += len(part)
        if total > limit:
            raise _too_large(COMPRESSION_ZSTD, limit)
        parts.append(part)
    return parts[0] if len(parts) == 1 else b"".join(parts)


_CODEC_NAMES = {1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
_INFLATERS = {
    COMPRESSION_GZIP: _gunzip,
    COMPRESSION_SNAPPY: _unsnappy,
    COMPRESSION_LZ4: _unlz4,
    COMPRESSION_ZSTD: _unzstd,
}


def _too_large(codec: int, limit: int) -> RecordListTooLargeError:
    return RecordListTooLargeError(
        f"{_CODEC_NAMES[codec]} records inflate to more than {limit} bytes "
        f"(message.decompressed.max.bytes)"
    )


def decompress(codec: int, data: bytes | memoryview, max_bytes: int) -> bytes:
    """Inflate a batch's record section, never producing more than ``max_bytes``.

    Every codec is inflated incrementally (snappy blocks declare their size up
    front), so memory stays within the bound however small the input is.
    Raises RecordListTooLargeError past the bound, CorruptRecordError when the
    codec rejects the data, UnsupportedCompressionError for an unknown codec or a
    missing library. Optional libraries are imported lazily.
    """
    inflate = _INFLATERS.get(codec)
    if inflate is None:
        raise UnsupportedCompressionError(f"unknown compression codec {codec}")
    try:
        return inflate(data, max_bytes)
    except RecordError:
        raise
    except Exception as exc:  # codec libraries raise their own types
        raise CorruptRecordError(f"cannot decompress records (codec {codec}): {exc}") from exc


_GZIP_DEFAULT_LEVEL = 6  # zlib's default, which Kafka's gzip level -1 stands for


def _compress(codec: int, data: bytes, level: int | None = None) -> bytes:
    """Compress a record section; `level` None means the codec library's default."""
    if codec == COMPRESSION_GZIP:
        if level is None:
            return gzip.compress(data)
        return gzip.compress(data, compresslevel=_GZIP_DEFAULT_LEVEL if level < 0 else level)
    if codec == COMPRESSION_SNAPPY:
        return _snappy_compress_xerial(data)
    if codec == COMPRESSION_LZ4:
        import lz4.frame

        # Kafka's LZ4 reader wants independent blocks and no content checksum.
        options: dict[str, Any] = {"block_linked": False, "content_checksum": False}
        if level is not None:
            options["compression_level"] = min(level, lz4.frame.COMPRESSIONLEVEL_MAX)
        return bytes(lz4.frame.compress(data, **options))
    if codec == COMPRESSION_ZSTD:
        import zstandard

        if level is None:
            return bytes(zstandard.ZstdCompressor().compress(data))
        return bytes(zstandard.ZstdCompressor(level=level).compress(data))
    raise UnsupportedCompressionError(f"unknown compression codec {codec}")


def recompress_batches(
    data: bytes | bytearray | memoryview,
    codec: int,
    level: int | None = None,
    *,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> bytes:
    """The same batches with their records compressed by `codec` (a topic's compression.type).

    Batches already in `codec`, and control batches, are kept byte for byte. Every
    other header field (offsets, timestamps, producer id, epoch, sequence, flags)
    is kept; batch_length, the codec bits and the CRC are rewritten. The caller
    validates the batches first: a batch is only rewritten after its CRC passed.
    """
    out = bytearray()
    for pos, h in iter_batches(data):
        end = pos + h.size
        if h.compression == codec or h.is_control:
            out += data[pos:end]
            continue
        section = bytes(data[pos + BATCH_OVERHEAD : end])
        if h.compression != COMPRESSION_NONE:
            section = decompress(h.compression, section, max_decompressed_bytes)
        if codec != COMPRESSION_NONE:
            section = _compress(codec, section, level)
        start = len(out)
        out += data[pos : pos + BATCH_OVERHEAD]
        out += section
        _I32.pack_into(out, start + 8, BATCH_OVERHEAD - LOG_OVERHEAD + len(section))
        _I16.pack_into(out, start + _ATTR_POS, (h.attributes & ~0x07) | codec)
        with memoryview(out) as view:  # released before `out` grows again
            _U32.pack_into(out, start + _CRC_POS, crc32c(view[start + _CRC_START :]))
    return bytes(out)


# --------------------------------------------------------------------------- record codec

Headers = tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True, slots=True)
class Record:
    """A record as stored inside a batch: deltas relative to the batch base."""

    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()


@dataclass(frozen=True, slots=True)
class DecodedRecord:
    """A record with absolute offset and timestamp, as a consumer would see it."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()
    is_control: bool = False


def _encode_record(out: bytearray, rec: Record) -> None:
    body = bytearray()
    body.append(0)  # record attributes: unused
    _write_varint(body, rec.timestamp_delta)
    _write_varint(body, rec.offset_delta)
    if rec.key is None:
        _write_varint(body, -1)
    else:
        _write_varint(body, len(rec.key))
        body += rec.key
    if rec.value is None:
        _write_varint(body, -1)
    else:
        _write_varint(body, len(rec.value))
        body += rec.value
    _write_varint(body, len(rec.headers))
    for hk, hv in rec.headers:
        kb = hk.encode("utf-8")
        _write_varint(body, len(kb))
        body += kb
        if hv is None:
            _write_varint(body, -1)
        else:
            _write_varint(body, len(hv))
            body += hv
    _write_varint(out, len(body))
    out += body


def _read_bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    n, pos = _read_varint(buf, pos)
    if n < 0:
        return None, pos
    if pos + n > len(buf):
        raise CorruptRecordError("record field runs past the end of the record")
    return bytes(buf[pos : pos + n]), pos + n


def _decode_record(buf: bytes, pos: int) -> tuple[Record, int]:
    length, pos = _read_varint(buf, pos)
    end = pos + length
    if length < 0 or end > len(buf):
        raise CorruptRecordError("record length runs past the end of the batch")
    pos += 1  # attributes
    ts_delta, pos = _read_varint(buf, pos)
    off_delta, pos = _read_varint(buf, pos)
    key, pos = _read_bytes(buf, pos)
    value, pos = _read_bytes(buf, pos)
    count, pos = _read_varint(buf, pos)
    if count < 0:
        raise CorruptRecordError(f"negative header count {count}")
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(count):
        hk, pos = _read_bytes(buf, pos)
        if hk is None:
            raise CorruptRecordError("record header key is null")
        hv, pos = _read_bytes(buf, pos)
        headers.append((hk.decode("utf-8"), hv))
    if pos != end:
        raise CorruptRecordError("record length does not match its content")
    return Record(off_delta, ts_delta, key, value, tuple(headers)), end


RecordInput = tuple[bytes | None, bytes | None, Headers] | Record


def build_batch(
    records: Sequence[RecordInput],
    *,
    base_offset: int = 0,
    timestamp_ms: int,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    compression: int = COMPRESSION_NONE,
    partition_leader_epoch: int = -1,
    transactional: bool = False,
    control: bool = False,
    log_append_time: bool = False,
) -> bytes:
    """Encode one v2 batch with a correct CRC.

    ``records`` are (key, value, headers) tuples stamped with ``timestamp_ms``
    and consecutive offset deltas, or ``Record`` objects with explicit deltas
    (relative to ``base_offset`` / ``timestamp_ms``).
    """
    recs: list[Record] = []
    for i, r in enumerate(records):
        if isinstance(r, Record):
            recs.append(r)
        else:
            key, value, headers = r
            recs.append(Record(i, 0, key, value, tuple(headers)))
    if not recs:
        raise ValueError("a record batch needs at least one record")
    body = bytearray()
    for rec in recs:
        _encode_record(body, rec)
    payload = (
        bytes(body) if compression == COMPRESSION_NONE else _compress(compression, bytes(body))
    )
    last_delta = max(r.offset_delta for r in recs)
    max_ts = max(timestamp_ms + r.timestamp_delta for r in recs)
    attributes = compression & 0x07
    if log_append_time:
        attributes |= _TIMESTAMP_TYPE_BIT
    if transactional:
        attributes |= _TRANSACTIONAL_BIT
    if control:
        attributes |= _CONTROL_BIT
    out = bytearray(BATCH_OVERHEAD)
    _HEADER.pack_into(
        out,
        0,
        base_offset,
        BATCH_OVERHEAD - LOG_OVERHEAD + len(payload),
        partition_leader_epoch,
        2,
        0,
        attributes,
        last_delta,
        timestamp_ms,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        len(recs),
    )
    out += payload
    _U32.pack_into(out, _CRC_POS, crc32c(memoryview(out)[_CRC_START:]))
    return bytes(out)


def decode_batch_records(
    buf: bytes | bytearray | memoryview,
    pos: int,
    header: BatchHeader,
    *,
    max_decompressed_bytes: int = READ_MAX_DECOMPRESSED_BYTES,
) -> list[DecodedRecord]:
    """Decode the records of one batch (decompressing at most ``max_decompressed_bytes``)."""
    start = pos + BATCH_OVERHEAD
    end = pos + header.size
    raw: bytes = bytes(buf[start:end])
    if header.compression != COMPRESSION_NONE:
        raw = decompress(header.compression, raw, max_decompressed_bytes)
    out: list[DecodedRecord] = []
    rpos = 0
    log_append = header.timestamp_type == 1
    control = header.is_control
    for _ in range(header.records_count):
        rec, rpos = _decode_record(raw, rpos)
        ts = header.max_timestamp if log_append else header.base_timestamp + rec.timestamp_delta
        out.append(
            DecodedRecord(
                header.base_offset + rec.offset_delta, ts, rec.key, rec.value, rec.headers, control
            )
        )
    if rpos != len(raw):
        raise CorruptRecordError("trailing bytes after the last record of a batch")
    return out


def decode_records(buf: bytes | bytearray | memoryview) -> list[DecodedRecord]:
    """Decode every record of every complete batch in ``buf`` (a torn tail is ignored)."""
    out: list[DecodedRecord] = []
    for pos, h in iter_batches(buf):
        out.extend(decode_batch_records(buf, pos, h))
    return out


# --------------------------------------------------------------------------- transaction markers

CONTROL_ABORT = 0
CONTROL_COMMIT = 1
_CONTROL_KEY = struct.Struct(">hh")  # version 0, control type
_END_TXN_VALUE = struct.Struct(">hi")  # version 0, coordinator epoch


def build_end_txn_marker(
    producer_id: int,
    producer_epoch: int,
    *,
    commit: bool,
    timestamp_ms: int,
    coordinator_epoch: int = 0,
) -> bytes:
    """A COMMIT or ABORT control batch (Kafka's EndTransactionMarker) for one producer.

    Transactional and control bits set, the producer's id and epoch, no sequence;
    one record whose key is (version 0, type) and value (version 0, coordinator epoch).
    """
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = _END_TXN_VALUE.pack(0, coordinator_epoch)
    return build_batch(
        [(key, value, ())],
        timestamp_ms=timestamp_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=-1,
        transactional=True,
        control=True,
    )


def marker_is_abort(buf: bytes | bytearray | memoryview, pos: int = 0) -> bool:
    """Whether the control batch at ``pos`` is an ABORT marker (reads its first record's key).

    Markers are uncompressed with one record; anything unreadable counts as not
    an abort (the caller has validated the batch already).
    """
    try:
        _, p = _read_varint(buf, pos + BATCH_OVERHEAD)  # record length
        p += 1  # record attributes
        _, p = _read_varint(buf, p)  # timestamp delta
        _, p = _read_varint(buf, p)  # offset delta
        key_len, p = _read_varint(buf, p)
        if key_len < _CONTROL_KEY.size:
            return False
        return int(_CONTROL_KEY.unpack_from(buf, p)[1]) == CONTROL_ABORT
    except (CorruptRecordError, struct.error):
        return False


def control_type(key: bytes | None) -> int:
    """The type of a control record from its key: CONTROL_ABORT, CONTROL_COMMIT, or another
    (unknown) type; -1 when the key is too short to say."""
    if key is None or len(key) < _CONTROL_KEY.size:
        return -1
    return int(_CONTROL_KEY.unpack_from(key, 0)[1])
