"""The "consumer" protocol blobs carried inside JoinGroup / SyncGroup, and assignor user data.

This is the single implementation of these formats in Odradek: the coordinator reads
subscriptions through it (``odradek.coordinator.consumer_protocol`` re-exports it) and the
client's assignors write and read them.

Wire formats (Kafka's ``ConsumerProtocolSubscription`` / ``ConsumerProtocolAssignment``
JSON schemas, versions 0-3, never flexible; every blob starts with an int16 version)::

    Subscription  v0: topics [string], user_data nullable bytes
                  v1: + owned_partitions [topic string, partitions [int32]]
                  v2: + generation_id int32 (default -1)
                  v3: + rack_id nullable string
    Assignment  v0-3: assigned_partitions [topic string, partitions [int32]],
                      user_data nullable bytes        (same layout in every version)

Arrays have an int32 count, strings an int16 length, bytes an int32 length (-1 = null).
Like Java's ``ConsumerProtocol``, a blob with a version above the highest known one is read
with the highest known layout (new versions may only append fields) and bytes after the known
fields are ignored; a negative version is an error. The fields added after v0 are all
"ignorable", so writing an older version silently drops them, as Java does.

Assignor user data (not versioned on the wire):

* ``StickyAssignorUserData`` (Java's ``StickyAssignor``): v0 = previous_assignment
  [topic, [int32]]; v1 adds generation int32; no version prefix. Always written as v1; read
  by trying v1, then v0, and ignored when neither parses. kafka-python 3.x's
  ``StickyPartitionAssignor`` writes the same struct behind an int16 version, which is
  accepted as a third try.
* ``CooperativeStickyAssignor`` user data: a single int32 generation, needed only to read
  the generation of members that send subscription v0/v1.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

CONSUMER_PROTOCOL_TYPE = "consumer"
SUBSCRIPTION_MAX_VERSION = 3
ASSIGNMENT_MAX_VERSION = 3
DEFAULT_GENERATION = -1

# (topic, partition) pairs; a NamedTuple TopicPartition compares and hashes equal to these.
TopicPartitionPair = tuple[str, int]
# Partitions grouped by topic, exactly as the wire carries them.
TopicPartitions = tuple[tuple[str, tuple[int, ...]], ...]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class ConsumerProtocolError(ValueError):
    """The blob is not a valid consumer-protocol structure."""


# ---------------------------------------------------------------------------- helpers


def group_by_topic(partitions: Iterable[TopicPartitionPair]) -> TopicPartitions:
    """Group (topic, partition) pairs by topic, topics in order of first appearance."""
    grouped: dict[str, list[int]] = {}
    for topic, partition in partitions:
        lst = grouped.get(topic)
        if lst is None:
            grouped[topic] = [partition]
        else:
            lst.append(partition)
    return tuple((topic, tuple(parts)) for topic, parts in grouped.items())


def flatten(grouped: TopicPartitions) -> list[TopicPartitionPair]:
    """The inverse of :func:`group_by_topic`."""
    return [(topic, p) for topic, parts in grouped for p in parts]


def _freeze_topic_partitions(value: Iterable[tuple[str, Iterable[int]]]) -> TopicPartitions:
    return tuple((topic, tuple(parts)) for topic, parts in value)


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.data):
            raise ConsumerProtocolError("truncated consumer protocol blob")
        out = self.data[self.pos : end]
        self.pos = end
        return out

    def i16(self) -> int:
        if self.pos + 2 > len(self.data):
            raise ConsumerProtocolError("truncated consumer protocol blob")
        (v,) = _I16.unpack_from(self.data, self.pos)
        self.pos += 2
        return int(v)

    def i32(self) -> int:
        if self.pos + 4 > len(self.data):
            raise ConsumerProtocolError("truncated consumer protocol blob")
        (v,) = _I32.unpack_from(self.data, self.pos)
        self.pos += 4
        return int(v)

    def nullable_string(self) -> str | None:
        n = self.i16()
        if n < 0:
            return None
        try:
            return self.take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConsumerProtocolError("invalid utf-8 in string") from exc

    def string(self) -> str:
        s = self.nullable_string()
        if s is None:
            raise ConsumerProtocolError("null where a non-nullable string is required")
        return s

    def nullable_bytes(self) -> bytes | None:
        n = self.i32()
        return None if n < 0 else self.take(n)

    def count(self) -> int:
        n = self.i32()
        if n < 0:
            # Non-nullable arrays; Java rejects a null array here.
            raise ConsumerProtocolError("null array in consumer protocol blob")
        if n > len(self.data) - self.pos:  # every element takes at least one byte
            raise ConsumerProtocolError("array count larger than the blob")
        return n

    def int32_array(self) -> tuple[int, ...]:
        n = self.count()
        end = self.pos + 4 * n
        if end > len(self.data):
            raise ConsumerProtocolError("truncated consumer protocol blob")
        values = struct.unpack_from(f">{n}i", self.data, self.pos)
        self.pos = end
        return tuple(values)

    def topic_partitions(self) -> TopicPartitions:
        return tuple((self.string(), self.int32_array()) for _ in range(self.count()))


class _Writer:
    __slots__ = ("parts",)

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def i16(self, v: int) -> None:
        self.parts.append(_I16.pack(v))

    def i32(self, v: int) -> None:
        self.parts.append(_I32.pack(v))

    def nullable_string(self, s: str | None) -> None:
        if s is None:
            self.i16(-1)
            return
        data = s.encode("utf-8")
        if len(data) > 0x7FFF:
            raise ConsumerProtocolError("string longer than 32767 bytes")
        self.i16(len(data))
        self.parts.append(data)

    def nullable_bytes(self, b: bytes | None) -> None:
        if b is None:
            self.i32(-1)
            return
        self.i32(len(b))
        self.parts.append(bytes(b))

    def topic_partitions(self, tps: TopicPartitions) -> None:
        self.i32(len(tps))
        for topic, parts in tps:
            self.nullable_string(topic)
            self.i32(len(parts))
            self.parts.append(struct.pack(f">{len(parts)}i", *parts))

    def getvalue(self) -> bytes:
        return b"".join(self.parts)


# ---------------------------------------------------------------------------- subscription


@dataclass(frozen=True, slots=True)
class Subscription:
    """A member's subscription (Java's ``ConsumerPartitionAssignor.Subscription``).

    ``version`` is the version a decoded blob carried, and the version :meth:`encode` writes
    when none is given (default: the highest, as Java writes). ``group_instance_id`` is not
    part of the blob: the group leader fills it from the JoinGroup member list so that the
    range and round-robin assignors order static members like Java does.
    """

    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: TopicPartitions = ()
    generation_id: int = DEFAULT_GENERATION
    rack_id: str | None = None
    version: int = SUBSCRIPTION_MAX_VERSION
    group_instance_id: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.topics, tuple):
            object.__setattr__(self, "topics", tuple(self.topics))
        owned = self.owned_partitions
        if not isinstance(owned, tuple) or any(not isinstance(ps, tuple) for _, ps in owned):
            object.__setattr__(self, "owned_partitions", _freeze_topic_partitions(owned))

    @classmethod
    def of(
        cls,
        topics: Iterable[str],
        *,
        user_data: bytes | None = None,
        owned: Iterable[TopicPartitionPair] = (),
        generation_id: int = DEFAULT_GENERATION,
        rack_id: str | None = None,
        group_instance_id: str | None = None,
    ) -> Subscription:
        """Build a subscription from flat (topic, partition) owned pairs."""
        return cls(
            tuple(topics),
            user_data,
            group_by_topic(owned),
            generation_id,
            rack_id,
            SUBSCRIPTION_MAX_VERSION,
            group_instance_id,
        )

    def owned(self) -> list[TopicPartitionPair]:
        """Owned partitions as flat (topic, partition) pairs."""
        return flatten(self.owned_partitions)

    @property
    def generation(self) -> int | None:
        """Java's ``Subscription.generationId()``: None when absent (-1 or before v2)."""
        return self.generation_id if self.generation_id >= 0 else None

    def encode(self, version: int | None = None) -> bytes:
        v = self.version if version is None else version
        if not 0 <= v <= SUBSCRIPTION_MAX_VERSION:
            raise ConsumerProtocolError(f"cannot write subscription version {v}")
        w = _Writer()
        w.i16(v)
        w.i32(len(self.topics))
        for topic in self.topics:
            w.nullable_string(topic)
        w.nullable_bytes(self.user_data)
        if v >= 1:
            w.topic_partitions(self.owned_partitions)
        if v >= 2:
            w.i32(self.generation_id)
        if v >= 3:
            w.nullable_string(self.rack_id)
        return w.getvalue()

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview) -> Subscription:
        r = _Reader(bytes(data))
        version = r.i16()
        if version < 0:
            raise ConsumerProtocolError(f"unsupported subscription version {version}")
        v = min(version, SUBSCRIPTION_MAX_VERSION)
        topics = tuple(r.string() for _ in range(r.count()))
        user_data = r.nullable_bytes()
        owned = r.topic_partitions() if v >= 1 else ()
        generation = r.i32() if v >= 2 else DEFAULT_GENERATION
        rack = r.nullable_string() if v >= 3 else None
        return cls(topics, user_data, owned, generation, rack, version)


# ---------------------------------------------------------------------------- assignment


@dataclass(frozen=True, slots=True)
class Assignment:
    """A member's assignment (Java's ``ConsumerPartitionAssignor.Assignment``)."""

    partitions: TopicPartitions
    user_data: bytes | None = None
    version: int = ASSIGNMENT_MAX_VERSION

    def __post_init__(self) -> None:
        ps = self.partitions
        if not isinstance(ps, tuple) or any(not isinstance(p, tuple) for _, p in ps):
            object.__setattr__(self, "partitions", _freeze_topic_partitions(ps))

    @classmethod
    def of(
        cls, partitions: Iterable[TopicPartitionPair], user_data: bytes | None = None
    ) -> Assignment:
        """Build an assignment from flat (topic, partition) pairs."""
        return cls(group_by_topic(partitions), user_data)

    def topic_partitions(self) -> list[TopicPartitionPair]:
        """Assigned partitions as flat (topic, partition) pairs."""
        return flatten(self.partitions)

    def encode(self, version: int | None = None) -> bytes:
        v = self.version if version is None else version
        if not 0 <= v <= ASSIGNMENT_MAX_VERSION:
            raise ConsumerProtocolError(f"cannot write assignment version {v}")
        w = _Writer()
        w.i16(v)
        w.topic_partitions(self.partitions)
        w.nullable_bytes(self.user_data)
        return w.getvalue()

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview) -> Assignment:
        if not data:
            # SyncGroup hands an empty blob to a member the leader assigned nothing;
            # clients read it as an empty assignment.
            return cls(())
        r = _Reader(bytes(data))
        version = r.i16()
        if version < 0:
            raise ConsumerProtocolError(f"unsupported assignment version {version}")
        partitions = r.topic_partitions()
        user_data = r.nullable_bytes()
        return cls(partitions, user_data, version)


# ---------------------------------------------------------------------------- functions


def encode_subscription(sub: Subscription, version: int | None = None) -> bytes:
    return sub.encode(version)


def parse_subscription(data: bytes | bytearray | memoryview) -> Subscription:
    return Subscription.decode(data)


def encode_assignment(assignment: Assignment, version: int | None = None) -> bytes:
    return assignment.encode(version)


def parse_assignment(data: bytes | bytearray | memoryview) -> Assignment:
    return Assignment.decode(data)


def subscribed_topics(data: bytes | bytearray | memoryview) -> frozenset[str]:
    """Topics of a subscription blob (what the coordinator needs)."""
    return frozenset(Subscription.decode(data).topics)


# ---------------------------------------------------------------------------- user data


@dataclass(frozen=True, slots=True)
class StickyAssignorUserData:
    """Java ``StickyAssignor`` user data: previous assignment and (v1) its generation."""

    previous_assignment: TopicPartitions
    generation: int | None = None

    def partitions(self) -> list[TopicPartitionPair]:
        return flatten(self.previous_assignment)

    def encode(self) -> bytes:
        """Always written as v1, like Java (a missing generation is written as -1)."""
        w = _Writer()
        w.topic_partitions(self.previous_assignment)
        w.i32(DEFAULT_GENERATION if self.generation is None else self.generation)
        return w.getvalue()

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview | None) -> StickyAssignorUserData:
        """Try v1, then v0; data that parses as neither means "no previous assignment"."""
        if not data:
            return cls(())
        raw = bytes(data)
        try:
            r = _Reader(raw)
            prev = r.topic_partitions()
            return cls(prev, r.i32())
        except ConsumerProtocolError:
            pass
        try:
            return cls(_Reader(raw).topic_partitions(), None)
        except ConsumerProtocolError:
            pass
        # kafka-python 3.x writes this struct with an int16 version in front, which Java
        # cannot read; accept it as a last resort (a Java-format blob never gets here).
        try:
            r = _Reader(raw)
            version = r.i16()
            if version in (0, 1):
                prev = r.topic_partitions()
                return cls(prev, r.i32() if version == 1 else None)
        except ConsumerProtocolError:
            pass
        return cls(())


def encode_sticky_user_data(
    partitions: Iterable[TopicPartitionPair], generation: int | None
) -> bytes:
    return StickyAssignorUserData(group_by_topic(partitions), generation).encode()


def decode_sticky_user_data(
    data: bytes | bytearray | memoryview | None,
) -> tuple[list[TopicPartitionPair], int | None]:
    ud = StickyAssignorUserData.decode(data)
    return ud.partitions(), ud.generation


def encode_cooperative_user_data(generation: int) -> bytes:
    """Java ``CooperativeStickyAssignor`` user data: just the generation, int32."""
    return _I32.pack(generation)


def decode_cooperative_user_data(data: bytes | bytearray | memoryview | None) -> int | None:
    """The generation in cooperative-sticky user data.

    None when there is no user data; -1 when it cannot be read (Java's fallback).
    """
    if data is None:
        return None
    if len(data) < 4:
        return DEFAULT_GENERATION
    return int(_I32.unpack_from(bytes(data[:4]))[0])


__all__ = [
    "ASSIGNMENT_MAX_VERSION",
    "CONSUMER_PROTOCOL_TYPE",
    "DEFAULT_GENERATION",
    "SUBSCRIPTION_MAX_VERSION",
    "Assignment",
    "ConsumerProtocolError",
    "StickyAssignorUserData",
    "Subscription",
    "TopicPartitionPair",
    "TopicPartitions",
    "decode_cooperative_user_data",
    "decode_sticky_user_data",
    "encode_assignment",
    "encode_cooperative_user_data",
    "encode_sticky_user_data",
    "flatten",
    "group_by_topic",
    "parse_assignment",
    "parse_subscription",
    "subscribed_topics",
]
