"""``__transaction_state`` key/value codecs, in Kafka's formats (``TransactionLogKey`` and
``TransactionLogValue``).

Key: int16 version 0, then the transactional id (int16-length string).
Value: int16 version, then producer id (int64), producer epoch (int16),
transaction timeout ms (int32), state id (int8), partitions (nullable array of
topic + int32 array; null for Empty), last update and start timestamps (int64).
Version 1 is the first flexible version (compact strings and arrays, tagged
fields: previous producer id, next producer id, client transaction version).

Odradek writes value v0, as Kafka does until ``transaction.version`` 2 is
enabled, and reads v0 and v1. A tombstone (null value) removes the id.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from odradek.transaction.state import TxnState

KEY_VERSION = 0
VALUE_VERSION = 0

__all__ = [
    "RecordFormatError",
    "TxnLogValue",
    "decode_txn_key",
    "decode_txn_value",
    "encode_txn_key",
    "encode_txn_value",
]


class RecordFormatError(ValueError):
    """A key or value that cannot be decoded."""


MAX_STRING_BYTES = 32767  # an int16-length string: the longest transactional id a key holds


def fits_record(value: str) -> bool:
    """Whether ``value`` fits a record's int16-length string."""
    return len(value) * 4 <= MAX_STRING_BYTES or len(value.encode("utf-8")) <= MAX_STRING_BYTES


class _Writer:
    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def pack(self, fmt: str, *values: int) -> None:
        self.parts.append(struct.pack(fmt, *values))

    def string(self, value: str) -> None:
        data = value.encode("utf-8")
        if len(data) > MAX_STRING_BYTES:
            raise RecordFormatError(f"a string of {len(data)} bytes does not fit a record")
        self.pack(">h", len(data))
        self.parts.append(data)

    def getvalue(self) -> bytes:
        return b"".join(self.parts)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = memoryview(data)
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise RecordFormatError("truncated transaction log record")
        chunk = bytes(self.data[self.pos : self.pos + n])
        self.pos += n
        return chunk

    def unpack(self, fmt: str) -> int:
        return int(struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0])

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            b = self.take(1)[0]
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 63:
                raise RecordFormatError("varint too long")

    def string(self, flexible: bool) -> str:
        n = self.uvarint() - 1 if flexible else self.unpack(">h")
        if n < 0:
            raise RecordFormatError("null where a string is required")
        try:
            return self.take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RecordFormatError("invalid utf-8") from exc

    def array_len(self, flexible: bool) -> int:
        return self.uvarint() - 1 if flexible else self.unpack(">i")

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())


@dataclass(frozen=True, slots=True)
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[tuple[str, int]]
    last_update_ms: int
    start_ms: int
    previous_producer_id: int = -1  # only in v1 (tagged)


def encode_txn_key(transactional_id: str) -> bytes:
    w = _Writer()
    w.pack(">h", KEY_VERSION)
    w.string(transactional_id)
    return w.getvalue()


def decode_txn_key(data: bytes) -> str | None:
    """The transactional id, or None for a key version this broker does not know."""
    r = _Reader(data)
    if r.unpack(">h") != KEY_VERSION:
        return None
    return r.string(False)


def encode_txn_value(value: TxnLogValue) -> bytes:
    if value.state is TxnState.EMPTY and value.partitions:
        raise RecordFormatError("an Empty transaction has no partitions")
    w = _Writer()
    w.pack(
        ">hqhib",
        VALUE_VERSION,
        value.producer_id,
        value.producer_epoch,
        value.timeout_ms,
        value.state.id,
    )
    if value.state is TxnState.EMPTY:
        w.pack(">i", -1)
    else:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(value.partitions):
            by_topic.setdefault(topic, []).append(partition)
        w.pack(">i", len(by_topic))
        for topic, partitions in by_topic.items():
            w.string(topic)
            w.pack(">i", len(partitions))
            for p in partitions:
                w.pack(">i", p)
    w.pack(">qq", value.last_update_ms, value.start_ms)
    return w.getvalue()


def decode_txn_value(data: bytes) -> TxnLogValue:
    r = _Reader(data)
    version = r.unpack(">h")
    if version not in (0, 1):
        raise RecordFormatError(f"unknown transaction log value version {version}")
    flexible = version >= 1
    producer_id = r.unpack(">q")
    epoch = r.unpack(">h")
    timeout = r.unpack(">i")
    state_id = r.unpack(">b")
    try:
        state = TxnState.from_id(state_id)
    except ValueError as exc:
        raise RecordFormatError(str(exc)) from exc
    partitions: set[tuple[str, int]] = set()
    for _ in range(max(r.array_len(flexible), 0)):
        topic = r.string(flexible)
        for _ in range(max(r.array_len(flexible), 0)):
            partitions.add((topic, r.unpack(">i")))
        if flexible:
            r.skip_tagged_fields()
    last_update = r.unpack(">q")
    start = r.unpack(">q")
    previous = -1
    if flexible:
        previous = _read_previous_producer_id(r)
    if state is TxnState.EMPTY:
        partitions.clear()  # Kafka ignores them for Empty
    return TxnLogValue(
        producer_id, epoch, timeout, state, frozenset(partitions), last_update, start, previous
    )


def _read_previous_producer_id(r: _Reader) -> int:
    """v1's tagged fields: tag 0 is the previous producer id; the others are skipped."""
    previous = -1
    for _ in range(r.uvarint()):
        tag = r.uvarint()
        size = r.uvarint()
        field = r.take(size)
        if tag == 0 and size == 8:
            (previous,) = struct.unpack(">q", field)
    return previous
