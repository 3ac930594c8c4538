"""Kafka record batch v2 (magic 2): header view, validation, patching, and a small codec.

The broker keeps record batches opaque: on the hot path (Produce, Fetch) it only
parses the fixed 61-byte batch header, checks lengths and the CRC32C, and patches
fields that lie outside the CRC (base offset, partition leader epoch) in place.
The record-level encoder/decoder below exists for the group coordinator (which
writes and replays its own records in ``__consumer_offsets``), for
``offset_for_timestamp`` refinement, and for tests; it is deliberately not fast.

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

import gzip
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import crc32c as _crc32c_mod

__all__ = [
    "BATCH_OVERHEAD",
    "COMPRESSION_GZIP",
    "COMPRESSION_LZ4",
    "COMPRESSION_NONE",
    "COMPRESSION_SNAPPY",
    "COMPRESSION_ZSTD",
    "LOG_OVERHEAD",
    "MIN_BATCH_LENGTH",
    "BatchHeader",
    "CorruptRecordError",
    "DecodedRecord",
    "InvalidRecordError",
    "RawHeader",
    "Record",
    "RecordError",
    "UnsupportedCompressionError",
    "batch_crc",
    "build_batch",
    "decode_batch_records",
    "decode_records",
    "iter_batches",
    "parse_header",
    "patch_base_offset",
    "patch_partition_leader_epoch",
    "recompress_batches",
    "set_log_append_time",
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
    buf: bytes | bytearray | memoryview, *, allow_control: bool = False
) -> list[BatchHeader]:
    """Check client-supplied batches completely; return their headers in order.

    Rules follow Kafka's produce-path validation: every batch complete, magic 2,
    sane length, CRC32C correct, records_count >= 1 and equal to
    last_offset_delta + 1, idempotent batches carry a sequence, and clients may
    not write control batches. Raises CorruptRecordError / InvalidRecordError.
    """
    return [BatchHeader(*t) for t in validate_batches_raw(buf, allow_control=allow_control)]


RawHeader = tuple[int, int, int, int, int, int, int, int, int, int, int, int, int]
"""Header fields as a plain tuple, in BatchHeader field order (hot-path form)."""


def validate_batches_raw(
    buf: bytes | bytearray | memoryview, *, allow_control: bool = False
) -> list[RawHeader]:
    """``validate_batches`` returning plain tuples: building dataclasses costs ~2 us each."""
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    end = len(mv)
    if end == 0:
        raise InvalidRecordError("no record batch in produce data")
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
        if pid >= 0 and seq < 0:
            raise InvalidRecordError(
                f"record batch at byte {pos} has producer_id {pid} but invalid base_sequence {seq}"
            )
        if attrs & _CONTROL_BIT and not allow_control:
            raise InvalidRecordError("clients are not allowed to write control batches")
        headers.append(t)
        pos += size
    return headers


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


def _snappy_decompress(data: bytes | memoryview) -> bytes:
    """Kafka's Java client frames snappy the xerial way; librdkafka may send raw blocks."""
    data = bytes(data)
    if not data.startswith(_XERIAL_MAGIC):
        return _snappy_raw_decompress(data)
    pos = len(_XERIAL_MAGIC) + 8  # version + min compatible version
    out = bytearray()
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptRecordError("truncated xerial snappy block header")
        (n,) = _I32.unpack_from(data, pos)
        pos += 4
        if n < 0 or pos + n > len(data):
            raise CorruptRecordError("truncated xerial snappy block")
        out += _snappy_raw_decompress(data[pos : pos + n])
        pos += n
    return bytes(out)


def _snappy_compress_xerial(data: bytes) -> bytes:
    out = bytearray(_XERIAL_MAGIC)
    out += _I32.pack(1) + _I32.pack(1)
    block = 32 * 1024
    for i in range(0, len(data), block):
        c = _snappy_raw_compress(data[i : i + block])
        out += _I32.pack(len(c))
        out += c
    return bytes(out)


def _decompress(codec: int, data: bytes | memoryview) -> bytes:
    """Decompress a batch's record section; optional libraries are imported lazily."""
    try:
        if codec == COMPRESSION_GZIP:
            return gzip.decompress(data)
        if codec == COMPRESSION_SNAPPY:
            return _snappy_decompress(data)
        if codec == COMPRESSION_LZ4:
            try:
                import lz4.frame
            except ImportError as exc:
                raise UnsupportedCompressionError("lz4 needs the lz4 package") from exc
            return bytes(lz4.frame.decompress(bytes(data)))
        if codec == COMPRESSION_ZSTD:
            try:
                import zstandard
            except ImportError as exc:
                raise UnsupportedCompressionError("zstd needs the zstandard package") from exc
            return bytes(zstandard.ZstdDecompressor().decompressobj().decompress(bytes(data)))
    except RecordError:
        raise
    except Exception as exc:  # codec libraries raise their own types
        raise CorruptRecordError(f"cannot decompress records (codec {codec}): {exc}") from exc
    raise UnsupportedCompressionError(f"unknown compression codec {codec}")


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
    data: bytes | bytearray | memoryview, codec: int, level: int | None = None
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
            section = _decompress(h.compression, section)
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
    buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader
) -> list[DecodedRecord]:
    """Decode the records of one batch (decompressing if needed)."""
    start = pos + BATCH_OVERHEAD
    end = pos + header.size
    raw: bytes = bytes(buf[start:end])
    if header.compression != COMPRESSION_NONE:
        raw = _decompress(header.compression, raw)
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
