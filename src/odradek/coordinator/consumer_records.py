"""The KIP-848 consumer-group records of ``__consumer_offsets``, in Kafka's formats.

Keys are non-flexible (int16 key version + strings); values are flexible
(compact strings and arrays, tagged fields), value version 0, as Kafka 4.0
writes them (``group-coordinator/src/main/resources/common/message``):

=== =========================================== ======================================
key record                                      value
=== =========================================== ======================================
3   ConsumerGroupMetadata (group)               group epoch
4   ConsumerGroupPartitionMetadata (group)      subscribed topics: id, name, partitions
5   ConsumerGroupMemberMetadata (group, member) subscription, client, timeouts, assignor,
                                                tagged ClassicMemberMetadata (migration)
6   ConsumerGroupTargetAssignmentMetadata       target assignment epoch
7   ConsumerGroupTargetAssignmentMember         the member's target partitions
8   ConsumerGroupCurrentMemberAssignment        member epoch, previous epoch, state,
                                                assigned and pending-revocation partitions
16  ConsumerGroupRegularExpression (group, re)  the topics a regex resolved to
=== =========================================== ======================================

A tombstone (null value) deletes what its key names. Unknown tagged fields are
skipped, so records of a newer Kafka (4.1's metadata hash, ...) still load.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from odradek.coordinator.metadata import Assignment, normalize
from odradek.coordinator.records import RecordFormatError, RecordReader, RecordWriter
from odradek.coordinator.types import CoordinatorRecord

GROUP_METADATA = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_ASSIGNMENT_METADATA = 6
TARGET_ASSIGNMENT_MEMBER = 7
CURRENT_MEMBER_ASSIGNMENT = 8
REGULAR_EXPRESSION = 16
CONSUMER_KEY_VERSIONS = frozenset(
    {
        GROUP_METADATA,
        PARTITION_METADATA,
        MEMBER_METADATA,
        TARGET_ASSIGNMENT_METADATA,
        TARGET_ASSIGNMENT_MEMBER,
        CURRENT_MEMBER_ASSIGNMENT,
        REGULAR_EXPRESSION,
    }
)
_PER_MEMBER = frozenset({MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT})
VALUE_VERSION = 0
_CLASSIC_MEMBER_METADATA_TAG = 0


@dataclass(frozen=True, slots=True)
class ConsumerRecordKey:
    """``kind`` is the key version; ``member`` the member id (5, 7, 8) or the regex (16)."""

    kind: int
    group: str
    member: str | None = None


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """What a member that speaks the classic protocol inside a consumer group adds."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class GroupEpochValue:
    epoch: int


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    topic_id: uuid.UUID
    name: str
    partitions: int


@dataclass(frozen=True, slots=True)
class PartitionMetadataValue:
    topics: tuple[TopicMetadata, ...]


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic: ClassicMemberMetadata | None = None


@dataclass(frozen=True, slots=True)
class TargetAssignmentEpochValue:
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class TargetAssignmentMemberValue:
    partitions: Assignment


@dataclass(frozen=True, slots=True)
class CurrentAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: Assignment
    pending_revocation: Assignment


@dataclass(frozen=True, slots=True)
class RegexValue:
    topics: tuple[str, ...]
    version: int  # the metadata image it was resolved against
    timestamp_ms: int


ConsumerRecordValue = (
    GroupEpochValue
    | PartitionMetadataValue
    | MemberMetadataValue
    | TargetAssignmentEpochValue
    | TargetAssignmentMemberValue
    | CurrentAssignmentValue
    | RegexValue
)


# --- keys ---------------------------------------------------------------------------


def encode_consumer_key(key: ConsumerRecordKey) -> bytes:
    w = RecordWriter()
    w.i16(key.kind)
    w.string(key.group)
    if key.kind in _PER_MEMBER or key.kind == REGULAR_EXPRESSION:
        if key.member is None:
            raise RecordFormatError(f"key {key.kind} needs a member id or a regex")
        w.string(key.member)
    return w.getvalue()


def decode_consumer_key(data: bytes) -> ConsumerRecordKey | None:
    """The key if it is a consumer-group record's, else None (another record type)."""
    r = RecordReader(data)
    kind = r.i16()
    if kind not in CONSUMER_KEY_VERSIONS:
        return None
    group = r.required_string()
    member = r.required_string() if kind in _PER_MEMBER or kind == REGULAR_EXPRESSION else None
    return ConsumerRecordKey(kind, group, member)


# --- values ---------------------------------------------------------------------------


def _write_topic_partitions(w: RecordWriter, assignment: Assignment) -> None:
    topics = sorted(assignment.items(), key=lambda item: item[0].bytes)
    w.compact_array_len(len(topics))
    for topic_id, partitions in topics:
        w.uuid(topic_id)
        w.compact_array_len(len(partitions))
        for p in sorted(partitions):
            w.i32(p)
        w.tagged_fields()


def _read_topic_partitions(r: RecordReader) -> Assignment:
    out: dict[uuid.UUID, list[int]] = {}
    for _ in range(r.array_len(flexible=True)):
        topic_id = r.uuid()
        out[topic_id] = [r.i32() for _ in range(r.array_len(flexible=True))]
        r.skip_tagged_fields()
    return normalize(out)


def _write_classic(meta: ClassicMemberMetadata) -> bytes:
    w = RecordWriter()
    w.i8(1)  # the nullable struct is present
    w.i32(meta.session_timeout_ms)
    w.compact_array_len(len(meta.protocols))
    for name, metadata in meta.protocols:
        w.compact_string(name)
        w.compact_bytes(metadata)
        w.tagged_fields()
    w.tagged_fields()
    return w.getvalue()


def _read_classic(raw: bytes) -> ClassicMemberMetadata | None:
    r = RecordReader(raw)
    if r.i8() <= 0:  # -1 (or a zero varint): null
        return None
    session = r.i32()
    protocols = []
    for _ in range(r.array_len(flexible=True)):
        name = r.required_string(flexible=True)
        metadata = r.bytes_(flexible=True)
        r.skip_tagged_fields()
        protocols.append((name, metadata))
    r.skip_tagged_fields()
    return ClassicMemberMetadata(session, tuple(protocols))


def encode_consumer_value(value: ConsumerRecordValue) -> bytes:
    w = RecordWriter()
    w.i16(VALUE_VERSION)
    if isinstance(value, GroupEpochValue):
        w.i32(value.epoch)
    elif isinstance(value, PartitionMetadataValue):
        w.compact_array_len(len(value.topics))
        for t in value.topics:
            w.uuid(t.topic_id)
            w.compact_string(t.name)
            w.i32(t.partitions)
            w.compact_array_len(0)  # per-partition racks: unused since Kafka 4.0
            w.tagged_fields()
    elif isinstance(value, MemberMetadataValue):
        w.compact_string(value.instance_id)
        w.compact_string(value.rack_id)
        w.compact_string(value.client_id)
        w.compact_string(value.client_host)
        w.compact_array_len(len(value.subscribed_topic_names))
        for name in value.subscribed_topic_names:
            w.compact_string(name)
        w.compact_string(value.subscribed_topic_regex)
        w.i32(value.rebalance_timeout_ms)
        w.compact_string(value.server_assignor)
        tagged = {}
        if value.classic is not None:
            tagged[_CLASSIC_MEMBER_METADATA_TAG] = _write_classic(value.classic)
        w.tagged_fields(tagged)
        return w.getvalue()
    elif isinstance(value, TargetAssignmentEpochValue):
        w.i32(value.assignment_epoch)
    elif isinstance(value, TargetAssignmentMemberValue):
        _write_topic_partitions(w, value.partitions)
    elif isinstance(value, CurrentAssignmentValue):
        w.i32(value.member_epoch)
        w.i32(value.previous_member_epoch)
        w.i8(value.state)
        _write_topic_partitions(w, value.assigned)
        _write_topic_partitions(w, value.pending_revocation)
    elif isinstance(value, RegexValue):
        w.compact_array_len(len(value.topics))
        for name in value.topics:
            w.compact_string(name)
        w.i64(value.version)
        w.i64(value.timestamp_ms)
    else:  # pragma: no cover - the union above is exhaustive
        raise TypeError(f"not a consumer-group record value: {value!r}")
    w.tagged_fields()
    return w.getvalue()


def decode_consumer_value(kind: int, data: bytes) -> ConsumerRecordValue:
    r = RecordReader(data)
    version = r.i16()
    if version < 0:
        raise RecordFormatError(f"bad value version {version} for key {kind}")
    value: ConsumerRecordValue
    tagged: dict[int, bytes]
    if kind == GROUP_METADATA:
        value = GroupEpochValue(r.i32())
    elif kind == PARTITION_METADATA:
        topics = []
        for _ in range(r.array_len(flexible=True)):
            topic_id = r.uuid()
            name = r.required_string(flexible=True)
            partitions = r.i32()
            for _ in range(r.array_len(flexible=True)):
                r.i32()  # partition
                for _ in range(r.array_len(flexible=True)):
                    r.string(flexible=True)  # rack
                r.skip_tagged_fields()
            r.skip_tagged_fields()
            topics.append(TopicMetadata(topic_id, name, partitions))
        value = PartitionMetadataValue(tuple(topics))
    elif kind == MEMBER_METADATA:
        instance_id = r.string(flexible=True)
        rack_id = r.string(flexible=True)
        client_id = r.required_string(flexible=True)
        client_host = r.required_string(flexible=True)
        names = tuple(r.required_string(flexible=True) for _ in range(r.array_len(flexible=True)))
        regex = r.string(flexible=True)
        rebalance_timeout = r.i32()
        assignor = r.string(flexible=True)
        tagged = r.tagged_fields()
        classic = None
        if _CLASSIC_MEMBER_METADATA_TAG in tagged:
            classic = _read_classic(tagged[_CLASSIC_MEMBER_METADATA_TAG])
        return MemberMetadataValue(
            instance_id,
            rack_id,
            client_id,
            client_host,
            names,
            regex,
            rebalance_timeout,
            assignor,
            classic,
        )
    elif kind == TARGET_ASSIGNMENT_METADATA:
        value = TargetAssignmentEpochValue(r.i32())
    elif kind == TARGET_ASSIGNMENT_MEMBER:
        value = TargetAssignmentMemberValue(_read_topic_partitions(r))
    elif kind == CURRENT_MEMBER_ASSIGNMENT:
        value = CurrentAssignmentValue(
            r.i32(), r.i32(), r.i8(), _read_topic_partitions(r), _read_topic_partitions(r)
        )
    elif kind == REGULAR_EXPRESSION:
        topics_ = tuple(r.required_string(flexible=True) for _ in range(r.array_len(flexible=True)))
        value = RegexValue(topics_, r.i64(), r.i64())
    else:
        raise RecordFormatError(f"not a consumer-group key version: {kind}")
    r.skip_tagged_fields()
    return value


# --- record factories ------------------------------------------------------------------


def consumer_record(
    kind: int, group: str, value: ConsumerRecordValue | None, member: str | None = None
) -> CoordinatorRecord:
    key = encode_consumer_key(ConsumerRecordKey(kind, group, member))
    return CoordinatorRecord(key, None if value is None else encode_consumer_value(value))
