"""Hand-written Produce requests and responses: the request encoder (the producer's hot
path), the broker's request reader and its response encoder.

kio's generic writer takes 30-50 us per Produce request, about as long as the
records inside take to encode; this writes the same bytes directly. Versions 3
to 12 (9 and later are flexible: compact strings and arrays, empty tagged
fields); v13 names topics by id and is not written here. ``tests/protocol/
test_produce_encoder.py`` checks the bytes against kio's for every version.

``parse_produce_request`` reads versions 3 to 13 as kio does, with one
difference: kio copies each partition's records (about 200 ms for 100 MB on a
small machine, holding the GIL, so the broker's event loop stops meanwhile; and
a copy of every byte produced, 0.5 CPU s per GB), while here the records are
read-only ``memoryview`` slices of the request, never copied. The request may be
any buffer (bytes, bytearray, memoryview): the views read it, so it must not
change while the request is served.

``encode_produce_response`` writes the broker's answer, v3 to 13, as kio would
(``tests/protocol/test_produce_response_encoder.py`` checks the bytes for every
version), in a tenth of kio's time: with a few partitions per request, kio's
generic writer cost more than the append itself.
"""

from __future__ import annotations

import functools
import struct
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from odradek.protocol.codec import EncodedBody
from odradek.protocol.fetch import EncodedResponse

__all__ = [
    "FIRST_FLEXIBLE_VERSION",
    "MAX_VERSION",
    "MIN_VERSION",
    "ProduceDecodeError",
    "ProduceRequest",
    "encode_produce_request",
    "encode_produce_response",
    "parse_produce_request",
]

MIN_VERSION = 3  # the first version with record batches (magic 2)
MAX_VERSION = 12  # written; read up to READ_MAX_VERSION
READ_MAX_VERSION = 13
FIRST_FLEXIBLE_VERSION = 9
FIRST_TOPIC_ID_VERSION = 13

_I16 = struct.Struct(">h")
_I16_I32 = struct.Struct(">hi")  # acks, timeout
_I32 = struct.Struct(">i")

TopicData = Sequence[tuple[str, Sequence[tuple[int, bytes]]]]
"""[(topic, [(partition, record batches), ...]), ...]"""


_SMALL_UVARINTS = [bytes((n,)) for n in range(0x80)]  # one byte each: lengths and counts


def _uvarint(n: int) -> bytes:
    if n < 0x80:
        return _SMALL_UVARINTS[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode_produce_request(
    version: int,
    transactional_id: str | None,
    acks: int,
    timeout_ms: int,
    topic_data: TopicData,
) -> EncodedBody:
    """The body of a Produce request of ``version``, ready for ``codec.encode_request``."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"Produce v{version} is not written by this encoder")
    flexible = version >= FIRST_FLEXIBLE_VERSION
    parts: list[bytes] = []
    put = parts.append
    tid = None if transactional_id is None else transactional_id.encode()
    if flexible:
        put(b"\x00" if tid is None else _uvarint(len(tid) + 1) + tid)
        put(_I16_I32.pack(acks, timeout_ms))
        put(_uvarint(len(topic_data) + 1))
        for name, partitions in topic_data:
            raw = name.encode()
            put(_uvarint(len(raw) + 1))
            put(raw)
            put(_uvarint(len(partitions) + 1))
            for index, records in partitions:
                put(_I32.pack(index))
                put(_uvarint(len(records) + 1))
                put(records)
                put(b"\x00")  # partition tagged fields
            put(b"\x00")  # topic tagged fields
        put(b"\x00")  # request tagged fields
    else:
        put(_I16.pack(-1) if tid is None else _I16.pack(len(tid)) + tid)
        put(_I16_I32.pack(acks, timeout_ms))
        put(_I32.pack(len(topic_data)))
        for name, partitions in topic_data:
            raw = name.encode()
            put(_I16.pack(len(raw)))
            put(raw)
            put(_I32.pack(len(partitions)))
            for index, records in partitions:
                put(_I32.pack(index))
                put(_I32.pack(len(records)))
                put(records)
    return EncodedBody(b"".join(parts), flexible)


# --- the broker's reader -------------------------------------------------------------------


class ProduceDecodeError(ValueError):
    """A Produce request body that cannot be read."""


# The request's classes are not frozen: several are built for every Produce request,
# and a frozen dataclass's __init__ costs four times a plain one. Read-only by use.
@dataclass(slots=True)
class PartitionProduceData:
    index: int
    records: memoryview | None  # a read-only view of the request


@dataclass(slots=True)
class TopicProduceData:
    name: str  # "" from v13, which names topics by id
    topic_id: uuid.UUID | None  # v13 on
    partition_data: tuple[PartitionProduceData, ...]


@dataclass(slots=True)
class ProduceRequest:
    """The fields kio's ProduceRequest has, `timeout` in milliseconds."""

    transactional_id: str | None
    acks: int
    timeout: int
    topic_data: tuple[TopicProduceData, ...]


# The reader walks the request with plain functions over (view, position, end): the
# hot path of every Produce, where a cursor object's method calls cost more than the
# reads themselves. Each returns what it read and the position after it.


def _cut(end: int) -> ProduceDecodeError:
    return ProduceDecodeError(f"the request ends at byte {end}, inside a field")


def _uvarint_at(view: memoryview, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= end:
            raise _cut(end)
        byte = view[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise ProduceDecodeError("a varint longer than 5 bytes")


def _length_at(
    view: memoryview, pos: int, end: int, flexible: bool, narrow: bool
) -> tuple[int, int]:
    """A string's (`narrow`: int16), bytes' or array's length; -1 for null."""
    if flexible:
        if pos < end and view[pos] < 0x80:  # a one-byte varint, the common case
            return view[pos] - 1, pos + 1
        n, pos = _uvarint_at(view, pos, end)
        return n - 1, pos
    fmt = _I16 if narrow else _I32
    if pos + fmt.size > end:
        raise _cut(end)
    return fmt.unpack_from(view, pos)[0], pos + fmt.size


def _string_at(view: memoryview, pos: int, end: int, flexible: bool) -> tuple[str | None, int]:
    n, pos = _length_at(view, pos, end, flexible, True)
    if n < 0:
        return None, pos
    if pos + n > end:
        raise _cut(end)
    try:
        return str(view[pos : pos + n], "utf-8"), pos + n
    except UnicodeDecodeError:
        raise ProduceDecodeError("a string that is not UTF-8") from None


def _array_at(view: memoryview, pos: int, end: int, flexible: bool, what: str) -> tuple[int, int]:
    n, pos = _length_at(view, pos, end, flexible, False)
    if n < 0:
        raise ProduceDecodeError(f"a null {what} array")
    return n, pos


def _skip_tagged_fields_at(view: memoryview, pos: int, end: int) -> int:
    if pos < end and view[pos] == 0:  # no tagged fields, the common case
        return pos + 1
    count, pos = _uvarint_at(view, pos, end)
    for _ in range(count):
        _tag, pos = _uvarint_at(view, pos, end)
        size, pos = _uvarint_at(view, pos, end)
        pos += size
        if pos > end:
            raise _cut(end)
    return pos


def parse_produce_request(
    payload: bytes | bytearray | memoryview, pos: int, version: int
) -> ProduceRequest:
    """Read a Produce request body (v3 to 13) from ``pos`` (after the request header).

    Raises ``ProduceDecodeError`` for anything malformed; trailing bytes are ignored,
    as Kafka's parser does. The records are read-only views of ``payload``: they keep
    it alive, and it must not change while they are in use.
    """
    if not MIN_VERSION <= version <= READ_MAX_VERSION:
        raise ValueError(f"Produce v{version} requests are not read by this decoder")
    flexible = version >= FIRST_FLEXIBLE_VERSION
    by_id = version >= FIRST_TOPIC_ID_VERSION
    view = memoryview(payload)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    view = view.toreadonly()
    end = len(view)
    # The one-byte forms (a null or short string, a count below 127, no tagged fields)
    # are read in line: a producer's request is nearly all of them, and each helper call
    # costs more than the read. Anything else goes through the helpers.
    if flexible and pos < end and view[pos] == 0:
        transactional_id, pos = None, pos + 1
    else:
        transactional_id, pos = _string_at(view, pos, end, flexible)
    if pos + 6 > end:
        raise _cut(end)
    acks, timeout = _I16_I32.unpack_from(view, pos)
    pos += 6
    topics = []
    if flexible and pos < end and 0 < view[pos] < 0x80:
        n_topics, pos = view[pos] - 1, pos + 1
    else:
        n_topics, pos = _array_at(view, pos, end, flexible, "topic_data")
    for _ in range(n_topics):
        if by_id:
            if pos + 16 > end:
                raise _cut(end)
            name, topic_id = "", uuid.UUID(bytes=bytes(view[pos : pos + 16]))
            pos += 16
        else:
            found, pos = _string_at(view, pos, end, flexible)
            if found is None:
                raise ProduceDecodeError("a null topic name")
            name, topic_id = found, None
        partitions = []
        if flexible and pos < end and 0 < view[pos] < 0x80:
            n_partitions, pos = view[pos] - 1, pos + 1
        else:
            n_partitions, pos = _array_at(view, pos, end, flexible, "partition_data")
        for _ in range(n_partitions):
            if pos + 4 > end:
                raise _cut(end)
            (index,) = _I32.unpack_from(view, pos)
            n, pos = _length_at(view, pos + 4, end, flexible, False)
            if n < 0:
                records = None
            elif pos + n > end:
                raise _cut(end)
            else:
                records = view[pos : pos + n]
                pos += n
            partitions.append(PartitionProduceData(index, records))
            if flexible:
                if pos < end and view[pos] == 0:
                    pos += 1
                else:
                    pos = _skip_tagged_fields_at(view, pos, end)
        if flexible:
            if pos < end and view[pos] == 0:
                pos += 1
            else:
                pos = _skip_tagged_fields_at(view, pos, end)
        topics.append(TopicProduceData(name, topic_id, tuple(partitions)))
    if flexible:
        _skip_tagged_fields_at(view, pos, end)
    return ProduceRequest(transactional_id, acks, timeout, tuple(topics))


# --- the broker's response writer ------------------------------------------------------------

FIRST_HINTS_VERSION = 10  # KIP-951: CurrentLeader (partition tag 0), NodeEndpoints (tag 0)
_PARTITION_V2 = struct.Struct(">ihqq")  # index, error code, base offset, log append time
_PARTITION_V5 = struct.Struct(">ihqqq")  # ... and the log start offset
_I32_I32 = struct.Struct(">ii")
_CURRENT_LEADER_TAG = b"\x01\x00\x09"  # one tagged field: tag 0, 9 bytes
_NO_TOPIC_ID = bytes(16)


def _string(text: str | None, flexible: bool) -> bytes:
    if text is None:
        return b"\x00" if flexible else b"\xff\xff"
    raw = text.encode()
    return (_uvarint(len(raw) + 1) if flexible else _I16.pack(len(raw))) + raw


def encode_produce_response(
    version: int,
    correlation_id: int,
    *,
    throttle_ms: int,
    topics: Iterable[tuple[str | None, uuid.UUID | None, Sequence[Mapping[str, Any]]]],
    node_endpoints: Sequence[Mapping[str, Any]] = (),
) -> EncodedResponse:
    """A Produce response frame of ``version`` (3 to 13), in one part.

    ``topics``: ``(name, topic id, partitions)`` (the id from v13, the name before);
    each partition a mapping with ``index``, ``error_code``, ``base_offset``,
    ``log_append_time``, ``log_start_offset`` (-1: none), ``error_message`` (None or
    text), optionally ``record_errors`` (mappings with ``batch_index`` and
    ``batch_index_error_message``) and ``current_leader`` (None, or a mapping with
    ``leader_id`` and ``leader_epoch``: KIP-951's tag 0, v10+, written unless it is
    the default -1 / -1, as Kafka's generated code writes tags). ``node_endpoints``:
    mappings with ``node_id``, ``host``, ``port`` and ``rack`` (v10+, the response's
    tag 0, written when not empty).
    """
    if not MIN_VERSION <= version <= READ_MAX_VERSION:
        raise ValueError(f"Produce v{version} responses are not written by this encoder")
    if not node_endpoints and isinstance(topics, list | tuple) and len(topics) == 1:
        single = _encode_single_partition(version, correlation_id, throttle_ms, topics[0])
        if single is not None:
            return single
    return _encode_any(version, correlation_id, throttle_ms, topics, node_endpoints)


def _encode_any(
    version: int,
    correlation_id: int,
    throttle_ms: int,
    topics: Iterable[tuple[str | None, uuid.UUID | None, Sequence[Mapping[str, Any]]]],
    node_endpoints: Sequence[Mapping[str, Any]],
) -> EncodedResponse:
    """`encode_produce_response` for any shape, field by field."""
    flexible = version >= FIRST_FLEXIBLE_VERSION
    by_id = version >= FIRST_TOPIC_ID_VERSION
    hints = version >= FIRST_HINTS_VERSION
    with_start = version >= 5
    with_errors = version >= 8
    buf = bytearray(b"\x00\x00\x00\x00")  # the size prefix, filled in at the end
    buf += _I32.pack(correlation_id)
    if flexible:
        buf += b"\x00"  # response header v1: no tagged fields
    if not isinstance(topics, list | tuple):  # (not the Sequence ABC: its check is slow)
        topics = list(topics)
    buf += _uvarint(len(topics) + 1) if flexible else _I32.pack(len(topics))
    for name, topic_id, partitions in topics:
        if by_id:
            buf += _NO_TOPIC_ID if topic_id is None else topic_id.bytes
        else:
            buf += _string(name or "", flexible)
        buf += _uvarint(len(partitions) + 1) if flexible else _I32.pack(len(partitions))
        for p in partitions:
            if with_start:
                buf += _PARTITION_V5.pack(
                    p["index"],
                    p["error_code"],
                    p["base_offset"],
                    p["log_append_time"],
                    p["log_start_offset"],
                )
            else:
                buf += _PARTITION_V2.pack(
                    p["index"], p["error_code"], p["base_offset"], p["log_append_time"]
                )
            if with_errors:
                record_errors = p.get("record_errors") or ()
                n = len(record_errors)
                buf += _uvarint(n + 1) if flexible else _I32.pack(n)
                for e in record_errors:
                    buf += _I32.pack(e["batch_index"])
                    buf += _string(e["batch_index_error_message"], flexible)
                    if flexible:
                        buf += b"\x00"
                buf += _string(p["error_message"], flexible)
            if flexible:
                leader = p.get("current_leader") if hints else None
                if leader is None or leader["leader_id"] == leader["leader_epoch"] == -1:
                    buf += b"\x00"  # no partition tagged fields
                else:
                    buf += _CURRENT_LEADER_TAG
                    buf += _I32_I32.pack(leader["leader_id"], leader["leader_epoch"])
                    buf += b"\x00"
        if flexible:
            buf += b"\x00"  # topic tagged fields
    buf += _I32.pack(throttle_ms)
    if flexible:
        if node_endpoints and hints:
            field = bytearray(_uvarint(len(node_endpoints) + 1))
            for n in node_endpoints:
                field += _I32.pack(n["node_id"]) + _string(n["host"], True)
                field += _I32.pack(n["port"]) + _string(n["rack"], True) + b"\x00"
            buf += b"\x01\x00" + _uvarint(len(field)) + field  # one tagged field, tag 0
        else:
            buf += b"\x00"  # response tagged fields
    _I32.pack_into(buf, 0, len(buf) - 4)
    return EncodedResponse([buf], len(buf))


# The common answer (a producer's request names one partition of one topic, appended
# without error) in one struct pack: the same bytes as `_encode_any` writes for it
# (tests/protocol/test_produce_response_encoder.py), in a third of the time.


@functools.cache
def _single_partition_layout(version: int, name_size: int) -> struct.Struct:
    """The answer's layout for one topic (its name ``name_size`` bytes, or its id from
    v13) and one partition with no error: size prefix, correlation id, ..., throttle."""
    flexible = version >= FIRST_FLEXIBLE_VERSION
    fmt = ">ii"
    if flexible:
        fmt += "B"  # response header v1: no tagged fields
    fmt += "B" if flexible else "i"  # topics: 1
    if version >= FIRST_TOPIC_ID_VERSION:
        fmt += "16s"
    else:
        fmt += ("B" if flexible else "h") + f"{name_size}s"
    fmt += "B" if flexible else "i"  # partitions: 1
    fmt += "ihqqq" if version >= 5 else "ihqq"
    if version >= 8:
        fmt += "BB" if flexible else "ih"  # no record errors, a null error message
    if flexible:
        fmt += "BB"  # partition and topic tagged fields
    fmt += "i"  # throttle
    if flexible:
        fmt += "B"  # response tagged fields
    return struct.Struct(fmt)


def _encode_single_partition(
    version: int,
    correlation_id: int,
    throttle_ms: int,
    topic: tuple[str | None, uuid.UUID | None, Sequence[Mapping[str, Any]]],
) -> EncodedResponse | None:
    """The common answer in one pack, or None when ``topic`` is not of its shape."""
    name, topic_id, partitions = topic
    if len(partitions) != 1:
        return None
    p = partitions[0]
    if p["error_code"] or p["error_message"] is not None or p.get("record_errors"):
        return None
    if version >= FIRST_HINTS_VERSION and p.get("current_leader") is not None:
        return None  # (only an error names the leader; left to the general writer)
    flexible = version >= FIRST_FLEXIBLE_VERSION
    fields: list[Any] = [0, correlation_id]
    if flexible:
        fields.append(0)
    fields.append(2 if flexible else 1)
    if version >= FIRST_TOPIC_ID_VERSION:
        raw = _NO_TOPIC_ID if topic_id is None else topic_id.bytes
        fields.append(raw)
    else:
        raw = (name or "").encode()
        if flexible:
            if len(raw) + 1 >= 0x80:
                return None  # a name's length in more than one varint byte
            fields.append(len(raw) + 1)
        else:
            fields.append(len(raw))
        fields.append(raw)
    fields.append(2 if flexible else 1)
    fields += (p["index"], 0, p["base_offset"], p["log_append_time"])
    if version >= 5:
        fields.append(p["log_start_offset"])
    if version >= 8:
        fields += (1, 0) if flexible else (0, -1)
    if flexible:
        fields += (0, 0)
    fields.append(throttle_ms)
    if flexible:
        fields.append(0)
    layout = _single_partition_layout(version, len(raw))
    buf = bytearray(layout.size)
    fields[0] = layout.size - 4
    layout.pack_into(buf, 0, *fields)
    return EncodedResponse([buf], layout.size)
