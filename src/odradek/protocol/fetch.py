"""Fetch responses by hand: written around records the caller sends itself, read without copies.

Fetch is the one API whose responses carry bulk data, so both ends skip kio here:

* ``encode_fetch_response`` (the broker) writes a response frame as *parts*:
  bytes, and where a partition's records are not bytes but a spliced part (an
  object with a ``length``, e.g. a region of a segment file the server sends
  with ``sendfile``), the encoder writes the records' length prefix and leaves
  the part in the list, as Kafka's broker does with its ``Send`` objects.
* ``encode_fetch_request`` (the client) writes a consumer's Fetch request
  (v4 to 12), which kio's generic writer takes ten times longer to write, and
  ``parse_fetch_request`` (the broker) reads any Fetch request (v4 to 18),
  which kio's generic reader takes ten times longer to read.
* ``parse_fetch_response`` (the client) reads a response frame into small
  objects whose ``records`` are ``memoryview`` slices of the frame: nothing is
  copied, and the field names are kio's, so code reading kio's entities reads
  these too.

Versions 4 to 18 (12 and later are flexible: compact strings, arrays and
records, tagged fields; 13 and later name topics by id). Of a partition's
tagged fields only ``DivergingEpoch`` (tag 0, v12+: KIP-320, the leader's
answer to a fetch whose ``LastFetchedEpoch`` shows the logs parted) is written
and read; the others the broker never sets (current leader, snapshot id, node
endpoints) are not written, and skipped when read. ``tests/protocol/
test_fetch_codec.py`` checks the bytes against kio's for every version, both
ways.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from odradek.protocol.codec import EncodedBody

__all__ = [
    "FIRST_FLEXIBLE_VERSION",
    "MAX_VERSION",
    "MIN_VERSION",
    "NO_DIVERGING_EPOCH",
    "AbortedTransaction",
    "EncodedResponse",
    "EpochEndOffset",
    "FetchDecodeError",
    "FetchPartition",
    "FetchRequest",
    "FetchResponse",
    "FetchTopic",
    "encode_fetch_request",
    "encode_fetch_response",
    "parse_fetch_request",
    "parse_fetch_response",
]

MIN_VERSION = 4
MAX_VERSION = 18
FIRST_FLEXIBLE_VERSION = 12
FIRST_TOPIC_ID_VERSION = 13

# Records up to this size are copied into the response's bytes; larger ones stay parts.
INLINE_RECORDS_BYTES = 32 * 1024

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I32_I16 = struct.Struct(">ih")  # partition index, error code
_I64 = struct.Struct(">q")
_I64_I64 = struct.Struct(">qq")
_I64_I64_I64 = struct.Struct(">qqq")
_I32_I16_I32 = struct.Struct(">ihi")  # throttle, error code, session id
_I32_I32_I32 = struct.Struct(">iii")
_I32_I64 = struct.Struct(">iq")
_NO_TOPIC_ID = bytes(16)
# tag 0 (DivergingEpoch), 13 bytes: epoch, end offset, no tags of its own
_DIVERGING_EPOCH_TAG = b"\x00\x0d"
# tag 1 (CurrentLeader, KIP-951), 9 bytes: leader id, leader epoch, no tags of its own
_CURRENT_LEADER_TAG = b"\x01\x09"
_I32_I32 = struct.Struct(">ii")
FIRST_NODE_ENDPOINTS_VERSION = 16


def _compact_string(text: str | None) -> bytes:
    if text is None:
        return b"\x00"
    raw = text.encode()
    return _uvarint(len(raw) + 1) + raw


def _node_endpoints(nodes: Sequence[Mapping[str, Any]]) -> bytes:
    """The response's NodeEndpoints (tag 0, v16+): node id, host, port, rack each."""
    out = bytearray(_uvarint(len(nodes) + 1))
    for n in nodes:
        out += _I32.pack(n["node_id"]) + _compact_string(n["host"]) + _I32.pack(n["port"])
        out += _compact_string(n["rack"]) + b"\x00"
    return bytes(out)


class FetchDecodeError(ValueError):
    """A Fetch response that cannot be read."""


# --------------------------------------------------------------------------- writing

REQUEST_MAX_VERSION = 12
_FETCH_HEAD = struct.Struct(">iiiib")  # replica id, max wait, min bytes, max bytes, isolation
_SESSION = struct.Struct(">ii")


def encode_fetch_request(
    version: int,
    *,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    isolation_level: int,
    session_id: int,
    session_epoch: int,
    topics: Sequence[tuple[str, Sequence[tuple[int, ...]]]],
    forgotten: Sequence[tuple[str, Sequence[int]]] = (),
    rack_id: str = "",
    replica_id: int = -1,
) -> EncodedBody:
    """A Fetch request body, v4 to 12: a consumer's (replica id -1) or a follower's.

    ``topics``: ``(name, [(partition, fetch offset, partition max bytes), ...])``, or
    with ``(partition, fetch offset, partition max bytes, current leader epoch, log
    start offset)`` items (a follower's, or a consumer that knows leader epochs),
    optionally followed by the last fetched epoch (v12+, KIP-320: the epoch of the
    last batch the fetcher holds; -1, not sent, when absent);
    ``forgotten``: ``(name, [partition, ...])`` (v7+, fetch sessions).
    """
    if not MIN_VERSION <= version <= REQUEST_MAX_VERSION:
        raise ValueError(f"Fetch v{version} requests are not written by this encoder")
    flexible = version >= FIRST_FLEXIBLE_VERSION
    out = bytearray(
        _FETCH_HEAD.pack(replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level)
    )
    if version >= 7:
        out += _SESSION.pack(session_id, session_epoch)

    def count(n: int) -> None:
        out.extend(_uvarint(n + 1) if flexible else _I32.pack(n))

    def string(value: str) -> None:
        raw = value.encode()
        out.extend(_uvarint(len(raw) + 1) if flexible else _I16.pack(len(raw)))
        out.extend(raw)

    count(len(topics))
    for name, partitions in topics:
        string(name)
        count(len(partitions))
        for item in partitions:
            partition, offset, partition_max = item[0], item[1], item[2]
            leader_epoch, log_start = (item[3], item[4]) if len(item) > 3 else (-1, -1)
            last_fetched_epoch = item[5] if len(item) > 5 else -1
            out += _I32.pack(partition)
            if version >= 9:
                out += _I32.pack(leader_epoch)  # current leader epoch
            out += _I64.pack(offset)
            if version >= 12:
                out += _I32.pack(last_fetched_epoch)
            if version >= 5:
                out += _I64.pack(log_start)  # log start offset (followers only)
            out += _I32.pack(partition_max)
            if flexible:
                out += b"\x00"
        if flexible:
            out += b"\x00"
    if version >= 7:
        count(len(forgotten))
        for name, parts in forgotten:
            string(name)
            count(len(parts))
            for partition in parts:
                out += _I32.pack(partition)
            if flexible:
                out += b"\x00"
    if version >= 11:
        string(rack_id)
    if flexible:
        out += b"\x00"  # no tagged fields (cluster id)
    return EncodedBody(bytes(out), flexible)


class EncodedResponse:
    """A framed response as parts: bytes-likes, and spliced parts with a ``length``.

    ``parts[0]`` starts with the frame's size prefix; ``size`` counts every part.
    """

    __slots__ = ("parts", "size")

    def __init__(self, parts: list[Any], size: int) -> None:
        self.parts = parts
        self.size = size

    def spliced(self) -> list[Any]:
        """The parts that are not bytes (the caller sends and releases them)."""
        return [p for p in self.parts if not isinstance(p, bytes | bytearray | memoryview)]


def _uvarint(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _topic_id_bytes(topic_id: uuid.UUID | None) -> bytes:
    return _NO_TOPIC_ID if topic_id is None else topic_id.bytes


def encode_fetch_response(
    version: int,
    correlation_id: int,
    *,
    throttle_ms: int,
    error_code: int,
    session_id: int,
    topics: Iterable[tuple[str | None, uuid.UUID | None, Sequence[Mapping[str, Any]]]],
    node_endpoints: Sequence[Mapping[str, Any]] = (),
) -> EncodedResponse:
    """A Fetch response frame of ``version``.

    ``topics``: ``(name, topic id, partitions)``; each partition a mapping with
    ``partition_index``, ``error_code``, ``high_watermark``, ``last_stable_offset``,
    ``log_start_offset``, ``aborted_transactions`` (None, or mappings / objects with
    ``producer_id`` and ``first_offset``), ``preferred_read_replica`` and ``records``
    (None, bytes-like, or a spliced part with a ``length``); optionally
    ``diverging_epoch`` (None, or an object with ``epoch`` and ``end_offset``:
    written from v12 when the epoch is set, as Kafka writes a non-default tag) and
    ``current_leader`` (None, or a mapping with ``leader_id`` and ``leader_epoch``:
    KIP-951's tag 1, written from v12 when given). ``node_endpoints``: mappings with
    ``node_id``, ``host``, ``port`` and ``rack`` (v16+, the response's tag 0).
    """
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"Fetch v{version} is not written by this encoder")
    flexible = version >= FIRST_FLEXIBLE_VERSION
    by_id = version >= FIRST_TOPIC_ID_VERSION
    parts: list[Any] = []
    buf = bytearray(b"\x00\x00\x00\x00")  # the size prefix, filled in at the end
    size = 0
    buf += _I32.pack(correlation_id)
    if flexible:
        buf += b"\x00"  # response header v1: no tagged fields
    if version >= 7:
        buf += _I32_I16_I32.pack(throttle_ms, error_code, session_id)
    else:
        buf += _I32.pack(throttle_ms)
    topics = list(topics)
    buf += _uvarint(len(topics) + 1) if flexible else _I32.pack(len(topics))
    for name, topic_id, partitions in topics:
        if by_id:
            buf += _topic_id_bytes(topic_id)
        else:
            raw = (name or "").encode()
            buf += _uvarint(len(raw) + 1) if flexible else _I16.pack(len(raw))
            buf += raw
        buf += _uvarint(len(partitions) + 1) if flexible else _I32.pack(len(partitions))
        for p in partitions:
            buf += _I32_I16.pack(p["partition_index"], p["error_code"])
            buf += _I64_I64.pack(p["high_watermark"], p["last_stable_offset"])
            if version >= 5:
                buf += _I64.pack(p["log_start_offset"])
            aborted = p["aborted_transactions"]
            if aborted is None:
                buf += b"\x00" if flexible else _I32.pack(-1)
            else:
                aborted = list(aborted)
                buf += _uvarint(len(aborted) + 1) if flexible else _I32.pack(len(aborted))
                for txn in aborted:
                    if isinstance(txn, Mapping):
                        buf += _I64_I64.pack(txn["producer_id"], txn["first_offset"])
                    else:
                        buf += _I64_I64.pack(txn.producer_id, txn.first_offset)
                    if flexible:
                        buf += b"\x00"
            if version >= 11:
                buf += _I32.pack(p["preferred_read_replica"])
            records = p["records"]
            if records is None:
                buf += b"\x00" if flexible else _I32.pack(-1)
            else:
                inline = isinstance(records, bytes | bytearray | memoryview)
                length = len(records) if inline else int(records.length)
                buf += _uvarint(length + 1) if flexible else _I32.pack(length)
                if inline and length <= INLINE_RECORDS_BYTES:
                    buf += records
                elif length:
                    parts.append(buf)
                    size += len(buf)
                    parts.append(records)
                    size += length
                    buf = bytearray()
            if flexible:
                diverging = p.get("diverging_epoch")
                leader = p.get("current_leader")
                if diverging is not None and diverging.epoch < 0:
                    diverging = None
                if leader is not None and leader["leader_id"] == leader["leader_epoch"] == -1:
                    leader = None  # the default: not written (as Kafka's generated code)
                if diverging is None and leader is None:
                    buf += b"\x00"  # no partition tagged fields
                else:
                    buf += _uvarint((diverging is not None) + (leader is not None))
                    if diverging is not None:  # tag 0, 13 bytes, no tags of its own
                        buf += _DIVERGING_EPOCH_TAG
                        buf += _I32_I64.pack(diverging.epoch, diverging.end_offset)
                        buf += b"\x00"
                    if leader is not None:  # tag 1, 9 bytes, no tags of its own
                        buf += _CURRENT_LEADER_TAG
                        buf += _I32_I32.pack(leader["leader_id"], leader["leader_epoch"])
                        buf += b"\x00"
        if flexible:
            buf += b"\x00"  # topic tagged fields
    if flexible:
        if node_endpoints and version >= FIRST_NODE_ENDPOINTS_VERSION:
            field = _node_endpoints(node_endpoints)
            buf += b"\x01\x00" + _uvarint(len(field)) + field  # one tagged field, tag 0
        else:
            buf += b"\x00"  # response tagged fields
    parts.append(buf)
    size += len(buf)
    first = parts[0]
    _I32.pack_into(first, 0, size - 4)
    return EncodedResponse(parts, size)


# --------------------------------------------------------------------------- reading


class AbortedTransaction:
    __slots__ = ("first_offset", "producer_id")

    def __init__(self, producer_id: int, first_offset: int) -> None:
        self.producer_id = producer_id
        self.first_offset = first_offset

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, AbortedTransaction)
            and self.producer_id == other.producer_id
            and self.first_offset == other.first_offset
        )

    def __hash__(self) -> int:
        return hash((self.producer_id, self.first_offset))

    def __repr__(self) -> str:
        return f"AbortedTransaction({self.producer_id}, {self.first_offset})"


class EpochEndOffset:
    """A Fetch response partition's ``DivergingEpoch`` (kio's names): the largest epoch
    the leader has at or below the fetcher's last fetched one, and where it ends there.
    ``epoch`` -1: no divergence (the field was absent)."""

    __slots__ = ("end_offset", "epoch")

    def __init__(self, epoch: int, end_offset: int) -> None:
        self.epoch = epoch
        self.end_offset = end_offset

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, EpochEndOffset)
            and self.epoch == other.epoch
            and self.end_offset == other.end_offset
        )

    def __hash__(self) -> int:
        return hash((self.epoch, self.end_offset))

    def __repr__(self) -> str:
        return f"EpochEndOffset({self.epoch}, {self.end_offset})"


NO_DIVERGING_EPOCH = EpochEndOffset(-1, -1)  # kio's default: the field absent


class FetchPartition:
    """One partition of a Fetch response; ``records`` is a view of the frame (or None)."""

    __slots__ = (
        "aborted_transactions",
        "diverging_epoch",
        "error_code",
        "high_watermark",
        "last_stable_offset",
        "log_start_offset",
        "partition_index",
        "preferred_read_replica",
        "records",
    )

    def __init__(
        self,
        partition_index: int,
        error_code: int,
        high_watermark: int,
        last_stable_offset: int,
        log_start_offset: int,
        aborted_transactions: tuple[AbortedTransaction, ...] | None,
        preferred_read_replica: int,
        records: memoryview | None,
        diverging_epoch: EpochEndOffset = NO_DIVERGING_EPOCH,
    ) -> None:
        self.partition_index = partition_index
        self.error_code = error_code
        self.high_watermark = high_watermark
        self.last_stable_offset = last_stable_offset
        self.log_start_offset = log_start_offset
        self.aborted_transactions = aborted_transactions
        self.preferred_read_replica = preferred_read_replica
        self.records = records
        self.diverging_epoch = diverging_epoch

    def __repr__(self) -> str:
        size = None if self.records is None else len(self.records)
        return (
            f"FetchPartition({self.partition_index}, error={self.error_code}, "
            f"hw={self.high_watermark}, records={size} bytes)"
        )


class FetchTopic:
    """A topic (by name, or by id from v13) and its partitions, in a Fetch response or
    request (``FetchRequestTopic``: the request's partitions or forgotten indexes)."""

    __slots__ = ("partitions", "topic", "topic_id")

    def __init__(
        self, topic: str | None, topic_id: uuid.UUID | None, partitions: list[Any]
    ) -> None:
        self.topic = topic
        self.topic_id = topic_id
        self.partitions = partitions


class FetchResponse:
    __slots__ = ("error_code", "responses", "session_id", "throttle_time_ms")

    def __init__(
        self, throttle_time_ms: int, error_code: int, session_id: int, responses: list[FetchTopic]
    ) -> None:
        self.throttle_time_ms = throttle_time_ms
        self.error_code = error_code
        self.session_id = session_id
        self.responses = responses


class _Reader:
    """A cursor over a frame; every read is bounds-checked."""

    __slots__ = ("buf", "end", "pos", "view")

    def __init__(self, buf: bytes | bytearray | memoryview, pos: int) -> None:
        self.view = memoryview(buf)
        self.buf = buf
        self.pos = pos
        self.end = len(self.view)

    def need(self, n: int) -> int:
        pos = self.pos
        if n < 0 or pos + n > self.end:
            raise FetchDecodeError(f"Fetch response cut short at byte {pos} (needs {n} more)")
        self.pos = pos + n
        return pos

    def unpack(self, fmt: struct.Struct) -> tuple[Any, ...]:
        return fmt.unpack_from(self.view, self.need(fmt.size))

    def uvarint(self) -> int:
        value = shift = 0
        view = self.view
        while True:
            if self.pos >= self.end:
                raise FetchDecodeError("Fetch response cut short inside a varint")
            byte = view[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise FetchDecodeError("varint too long in Fetch response")

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self.need(self.uvarint())

    def partition_tagged_fields(self) -> EpochEndOffset:
        """A response partition's tagged fields: its DivergingEpoch (tag 0), the rest skipped."""
        diverging = NO_DIVERGING_EPOCH
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            size = self.uvarint()
            start = self.need(size)
            if tag == 0:
                inner = _Reader(self.view[: start + size], start)
                epoch, end_offset = inner.unpack(_I32_I64)
                inner.skip_tagged_fields()
                diverging = EpochEndOffset(epoch, end_offset)
        return diverging

    def array_length(self, flexible: bool) -> int:
        """Element count, -1 for null."""
        if flexible:
            return self.uvarint() - 1
        return int(self.unpack(_I32)[0])

    def string(self, flexible: bool) -> str | None:
        n = self.uvarint() - 1 if flexible else int(self.unpack(_I16)[0])
        if n < 0:
            return None
        start = self.need(n)
        try:
            return bytes(self.view[start : start + n]).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FetchDecodeError("topic name is not UTF-8") from exc

    def records(self, flexible: bool) -> memoryview | None:
        n = self.uvarint() - 1 if flexible else int(self.unpack(_I32)[0])
        if n < 0:
            return None
        start = self.need(n)
        return self.view[start : start + n]


def _count(n: int, what: str, nullable: bool = False) -> int:
    if n < 0 and not nullable:
        raise FetchDecodeError(f"null {what} array in Fetch response")
    return n


def parse_fetch_response(payload: bytes | bytearray | memoryview, version: int) -> FetchResponse:
    """Read a Fetch response frame payload (correlation id first, no size prefix).

    Records are ``memoryview`` slices of ``payload``: they keep it alive, and it
    must not change while they are in use.
    """
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"Fetch v{version} is not read by this decoder")
    flexible = version >= FIRST_FLEXIBLE_VERSION
    by_id = version >= FIRST_TOPIC_ID_VERSION
    r = _Reader(payload, 4)  # after the correlation id
    if flexible:
        r.skip_tagged_fields()
    if version >= 7:
        throttle, error_code, session_id = r.unpack(_I32_I16_I32)
    else:
        (throttle,) = r.unpack(_I32)
        error_code, session_id = 0, 0
    topics: list[FetchTopic] = []
    for _ in range(_count(r.array_length(flexible), "responses")):
        name: str | None = None
        topic_id: uuid.UUID | None = None
        if by_id:
            topic_id = _uuid(r)
        else:
            name = r.string(flexible)
        partitions: list[FetchPartition] = []
        for _ in range(_count(r.array_length(flexible), "partitions")):
            index, code = r.unpack(_I32_I16)
            if version >= 5:
                high, stable, log_start = r.unpack(_I64_I64_I64)
            else:
                high, stable = r.unpack(_I64_I64)
                log_start = -1
            n_aborted = r.array_length(flexible)
            aborted: tuple[AbortedTransaction, ...] | None = None
            if n_aborted >= 0:
                txns = []
                for _ in range(n_aborted):
                    producer_id, first_offset = r.unpack(_I64_I64)
                    txns.append(AbortedTransaction(producer_id, first_offset))
                    if flexible:
                        r.skip_tagged_fields()
                aborted = tuple(txns)
            replica = int(r.unpack(_I32)[0]) if version >= 11 else -1
            records = r.records(flexible)
            diverging = r.partition_tagged_fields() if flexible else NO_DIVERGING_EPOCH
            partitions.append(
                FetchPartition(
                    index, code, high, stable, log_start, aborted, replica, records, diverging
                )
            )
        if flexible:
            r.skip_tagged_fields()
        topics.append(FetchTopic(name, topic_id, partitions))
    if flexible:
        r.skip_tagged_fields()
    return FetchResponse(throttle, error_code, session_id, topics)


# --------------------------------------------------------------------------- requests


class FetchRequestPartition:
    __slots__ = (
        "current_leader_epoch",
        "fetch_offset",
        "last_fetched_epoch",
        "log_start_offset",
        "partition",
        "partition_max_bytes",
    )

    def __init__(
        self,
        partition: int,
        current_leader_epoch: int,
        fetch_offset: int,
        last_fetched_epoch: int,
        log_start_offset: int,
        partition_max_bytes: int,
    ) -> None:
        self.partition = partition
        self.current_leader_epoch = current_leader_epoch
        self.fetch_offset = fetch_offset
        self.last_fetched_epoch = last_fetched_epoch
        self.log_start_offset = log_start_offset
        self.partition_max_bytes = partition_max_bytes


FetchRequestTopic = FetchTopic


class FetchRequest:
    """A Fetch request as the broker's handler reads it (kio's field names; ``max_wait_ms``
    in milliseconds; ``replica_id`` from the v15+ ``replica_state`` too)."""

    __slots__ = (
        "cluster_id",
        "forgotten_topics_data",
        "isolation_level",
        "max_bytes",
        "max_wait_ms",
        "min_bytes",
        "rack_id",
        "replica_epoch",
        "replica_id",
        "session_epoch",
        "session_id",
        "topics",
    )

    def __init__(self) -> None:
        self.cluster_id: str | None = None
        self.replica_id = -1
        self.replica_epoch = -1
        self.max_wait_ms = 0
        self.min_bytes = 0
        self.max_bytes = 0x7FFFFFFF
        self.isolation_level = 0
        self.session_id = 0
        self.session_epoch = -1
        self.topics: list[FetchRequestTopic] = []
        self.forgotten_topics_data: list[FetchRequestTopic] = []
        self.rack_id = ""


_I8 = struct.Struct(">b")
_PARTITION_V4 = struct.Struct(">iqi")
_PARTITION_V5 = struct.Struct(">iqqi")
_PARTITION_V9 = struct.Struct(">iiqqi")
_PARTITION_V12 = struct.Struct(">iiqiqi")


def _uuid(r: _Reader) -> uuid.UUID:
    start = r.need(16)
    return uuid.UUID(bytes=bytes(r.view[start : start + 16]))


def parse_fetch_request(payload: bytes | memoryview, pos: int, version: int) -> FetchRequest:
    """Read a Fetch request body (v4 to 18) from ``pos`` (after the request header).

    Raises ``FetchDecodeError`` for anything malformed. Trailing bytes are ignored, as
    Kafka's parser does.
    """
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"Fetch v{version} requests are not read by this decoder")
    flexible = version >= FIRST_FLEXIBLE_VERSION
    by_id = version >= FIRST_TOPIC_ID_VERSION
    r = _Reader(payload, pos)
    out = FetchRequest()
    if version < 15:
        (out.replica_id,) = r.unpack(_I32)
    out.max_wait_ms, out.min_bytes, out.max_bytes = r.unpack(_I32_I32_I32)
    (out.isolation_level,) = r.unpack(_I8)
    if version >= 7:
        out.session_id, out.session_epoch = r.unpack(_SESSION)
    if version >= 12:
        layout = _PARTITION_V12
    elif version >= 9:
        layout = _PARTITION_V9
    elif version >= 5:
        layout = _PARTITION_V5
    else:
        layout = _PARTITION_V4
    for _ in range(_count(r.array_length(flexible), "topics")):
        name = None
        topic_id = None
        if by_id:
            topic_id = _uuid(r)
        else:
            name = r.string(flexible)
            if name is None:
                raise FetchDecodeError("null topic name in Fetch request")
        partitions = []
        for _ in range(_count(r.array_length(flexible), "partitions")):
            fields = r.unpack(layout)
            if layout is _PARTITION_V12:
                p = FetchRequestPartition(*fields)
            elif layout is _PARTITION_V9:
                index, leader_epoch, offset, log_start, max_bytes = fields
                p = FetchRequestPartition(index, leader_epoch, offset, -1, log_start, max_bytes)
            elif layout is _PARTITION_V5:
                index, offset, log_start, max_bytes = fields
                p = FetchRequestPartition(index, -1, offset, -1, log_start, max_bytes)
            else:
                index, offset, max_bytes = fields
                p = FetchRequestPartition(index, -1, offset, -1, -1, max_bytes)
            if flexible:
                r.skip_tagged_fields()  # replica directory id (v17), high watermark (v18)
            partitions.append(p)
        if flexible:
            r.skip_tagged_fields()
        out.topics.append(FetchRequestTopic(name, topic_id, partitions))
    if version >= 7:
        for _ in range(_count(r.array_length(flexible), "forgotten_topics_data")):
            name = None
            topic_id = None
            if by_id:
                topic_id = _uuid(r)
            else:
                name = r.string(flexible)
                if name is None:
                    raise FetchDecodeError("null forgotten topic name in Fetch request")
            forgotten = [
                int(r.unpack(_I32)[0])
                for _ in range(_count(r.array_length(flexible), "forgotten partitions"))
            ]
            if flexible:
                r.skip_tagged_fields()
            out.forgotten_topics_data.append(FetchRequestTopic(name, topic_id, forgotten))
    if version >= 11:
        rack = r.string(flexible)
        if rack is None:
            raise FetchDecodeError("null rack_id in Fetch request")
        out.rack_id = rack
    if flexible:
        for _ in range(r.uvarint()):
            tag = r.uvarint()
            size = r.uvarint()
            start = r.need(size)
            inner = _Reader(r.view[: start + size], start)
            if tag == 0:  # cluster id
                out.cluster_id = inner.string(True)
            elif tag == 1 and version >= 15:  # replica state
                out.replica_id, out.replica_epoch = inner.unpack(_I32_I64)
    return out
