"""Reader/writer for the "consumer" protocol blobs carried inside JoinGroup/SyncGroup.

ConsumerProtocolSubscription v0-3: version i16, topics [string], user_data
nullable bytes, then v1+ owned_partitions [topic, [int32]], v2+ generation_id
int32, v3+ rack_id nullable string. ConsumerProtocolAssignment v0-3: version
i16, assigned_partitions [topic, [int32]], user_data nullable bytes. Neither is
flexible. Like Kafka, a version above 3 is read as the highest known one.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

CONSUMER_PROTOCOL_TYPE = "consumer"
_MAX_KNOWN_VERSION = 3


class ConsumerProtocolError(ValueError):
    """The blob is not a valid consumer-protocol structure."""


@dataclass(frozen=True, slots=True)
class Subscription:
    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[tuple[str, tuple[int, ...]], ...] = ()
    generation_id: int = -1
    rack_id: str | None = None
    version: int = 0


@dataclass(frozen=True, slots=True)
class Assignment:
    partitions: tuple[tuple[str, tuple[int, ...]], ...]
    user_data: bytes | None = None
    version: int = 0


class _Buf:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ConsumerProtocolError("truncated consumer protocol blob")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def i16(self) -> int:
        return int(struct.unpack(">h", self.take(2))[0])

    def i32(self) -> int:
        return int(struct.unpack(">i", self.take(4))[0])

    def string(self) -> str | None:
        n = self.i16()
        if n < 0:
            return None
        try:
            return self.take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConsumerProtocolError("invalid utf-8") from exc

    def required_string(self) -> str:
        s = self.string()
        if s is None:
            raise ConsumerProtocolError("null topic name")
        return s

    def nullable_bytes(self) -> bytes | None:
        n = self.i32()
        return None if n < 0 else self.take(n)

    def topic_partitions(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        out = []
        for _ in range(max(self.i32(), 0)):
            topic = self.required_string()
            parts = tuple(self.i32() for _ in range(max(self.i32(), 0)))
            out.append((topic, parts))
        return tuple(out)


def parse_subscription(data: bytes) -> Subscription:
    b = _Buf(bytes(data))
    version = b.i16()
    if version < 0:
        raise ConsumerProtocolError(f"negative subscription version {version}")
    v = min(version, _MAX_KNOWN_VERSION)
    topics = tuple(b.required_string() for _ in range(max(b.i32(), 0)))
    user_data = b.nullable_bytes()
    owned = b.topic_partitions() if v >= 1 else ()
    generation = b.i32() if v >= 2 else -1
    rack = b.string() if v >= 3 else None
    return Subscription(topics, user_data, owned, generation, rack, version)


def parse_assignment(data: bytes) -> Assignment:
    if not data:
        # Kafka clients treat an empty assignment blob as "nothing assigned".
        return Assignment(())
    b = _Buf(bytes(data))
    version = b.i16()
    if version < 0:
        raise ConsumerProtocolError(f"negative assignment version {version}")
    partitions = b.topic_partitions()
    user_data = b.nullable_bytes()
    return Assignment(partitions, user_data, version)


def subscribed_topics(data: bytes) -> frozenset[str]:
    """Topics of a subscription blob (only the v0 prefix is needed)."""
    return frozenset(parse_subscription(data).topics)


def _w_string(out: list[bytes], s: str | None) -> None:
    if s is None:
        out.append(struct.pack(">h", -1))
        return
    data = s.encode("utf-8")
    out.append(struct.pack(">h", len(data)))
    out.append(data)


def _w_bytes(out: list[bytes], b: bytes | None) -> None:
    if b is None:
        out.append(struct.pack(">i", -1))
        return
    out.append(struct.pack(">i", len(b)))
    out.append(b)


def _w_topic_partitions(out: list[bytes], tps: tuple[tuple[str, tuple[int, ...]], ...]) -> None:
    out.append(struct.pack(">i", len(tps)))
    for topic, parts in tps:
        _w_string(out, topic)
        out.append(struct.pack(">i", len(parts)))
        out.extend(struct.pack(">i", p) for p in parts)


def encode_subscription(sub: Subscription) -> bytes:
    v = sub.version
    if not 0 <= v <= _MAX_KNOWN_VERSION:
        raise ConsumerProtocolError(f"cannot write subscription version {v}")
    out = [struct.pack(">h", v), struct.pack(">i", len(sub.topics))]
    for t in sub.topics:
        _w_string(out, t)
    _w_bytes(out, sub.user_data)
    if v >= 1:
        _w_topic_partitions(out, sub.owned_partitions)
    if v >= 2:
        out.append(struct.pack(">i", sub.generation_id))
    if v >= 3:
        _w_string(out, sub.rack_id)
    return b"".join(out)


def encode_assignment(assignment: Assignment) -> bytes:
    out = [struct.pack(">h", assignment.version)]
    _w_topic_partitions(out, assignment.partitions)
    _w_bytes(out, assignment.user_data)
    return b"".join(out)
