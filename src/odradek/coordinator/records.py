"""``__consumer_offsets`` key/value codecs, in Kafka's binary formats.

Key = int16 key version + struct; value = int16 value version + struct.
Key version 0/1 is an offset commit, 2 is classic group metadata; the KIP-848
consumer-group records (key versions 3-8 and 16) are in ``consumer_records``;
other key versions (share and streams groups) are reported as ``UnknownKey`` so
the loader can skip them, as Kafka does for record types it does not know.

Writers use OffsetCommitValue v3 (v1 when an expire timestamp is present) and
GroupMetadataValue v3, as Kafka does; readers accept every version up to 4
(the first flexible one), ignoring unknown tagged fields.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from odradek.coordinator.types import CoordinatorRecord

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
GROUP_METADATA_VALUE_VERSION = 3
MAX_STRING_BYTES = 32767  # int16 length prefix of the non-flexible key/value versions


class RecordFormatError(ValueError):
    """A key or value that cannot be decoded."""


# --- decoded shapes ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class UnknownKey:
    version: int


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1  # only stored in value v1


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberMetadataValue, ...]


# --- primitive writer / reader ---------------------------------------------------


class RecordWriter:
    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def i16(self, v: int) -> None:
        self._parts.append(struct.pack(">h", v))

    def i32(self, v: int) -> None:
        self._parts.append(struct.pack(">i", v))

    def i64(self, v: int) -> None:
        self._parts.append(struct.pack(">q", v))

    def string(self, v: str | None) -> None:
        if v is None:
            self.i16(-1)
            return
        data = v.encode("utf-8")
        if len(data) > MAX_STRING_BYTES:
            raise RecordFormatError(
                f"a string of {len(data)} bytes does not fit a record field "
                f"(at most {MAX_STRING_BYTES})"
            )
        self.i16(len(data))
        self._parts.append(data)

    def bytes_(self, v: bytes | None) -> None:
        if v is None:
            self.i32(-1)
            return
        self.i32(len(v))
        self._parts.append(bytes(v))

    # Flexible (compact) encodings, used by the KIP-848 record values.

    def i8(self, v: int) -> None:
        self._parts.append(struct.pack(">b", v))

    def uvarint(self, v: int) -> None:
        out = bytearray()
        while v >= 0x80:
            out.append((v & 0x7F) | 0x80)
            v >>= 7
        out.append(v)
        self._parts.append(bytes(out))

    def compact_string(self, v: str | None) -> None:
        if v is None:
            self.uvarint(0)
            return
        data = v.encode("utf-8")
        self.uvarint(len(data) + 1)
        self._parts.append(data)

    def compact_bytes(self, v: bytes) -> None:
        self.uvarint(len(v) + 1)
        self._parts.append(bytes(v))

    def compact_array_len(self, n: int) -> None:
        self.uvarint(n + 1)

    def uuid(self, v: uuid.UUID) -> None:
        self._parts.append(v.bytes)

    def tagged_fields(self, fields: dict[int, bytes] | None = None) -> None:
        """A tagged-field section: ``{tag: encoded value}`` in tag order (none by default)."""
        fields = fields or {}
        self.uvarint(len(fields))
        for tag in sorted(fields):
            self.uvarint(tag)
            self.uvarint(len(fields[tag]))
            self._parts.append(fields[tag])

    def getvalue(self) -> bytes:
        return b"".join(self._parts)


class RecordReader:
    def __init__(self, data: bytes) -> None:
        self._data = memoryview(data)
        self._pos = 0

    def _take(self, n: int) -> memoryview:
        if n < 0 or self._pos + n > len(self._data):
            raise RecordFormatError("truncated record")
        chunk = self._data[self._pos : self._pos + n]
        self._pos += n
        return chunk

    def i16(self) -> int:
        return int(struct.unpack(">h", self._take(2))[0])

    def i32(self) -> int:
        return int(struct.unpack(">i", self._take(4))[0])

    def i64(self) -> int:
        return int(struct.unpack(">q", self._take(8))[0])

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            b = self._take(1)[0]
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 63:
                raise RecordFormatError("varint too long")

    def string(self, flexible: bool = False) -> str | None:
        n = self.uvarint() - 1 if flexible else self.i16()
        if n < 0:
            return None
        try:
            return bytes(self._take(n)).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RecordFormatError("invalid utf-8") from exc

    def required_string(self, flexible: bool = False) -> str:
        s = self.string(flexible)
        if s is None:
            raise RecordFormatError("null where a string is required")
        return s

    def bytes_(self, flexible: bool = False) -> bytes:
        n = self.uvarint() - 1 if flexible else self.i32()
        if n < 0:
            return b""  # null bytes are read as empty, as Kafka's loader treats them
        return bytes(self._take(n))

    def array_len(self, flexible: bool = False) -> int:
        n = self.uvarint() - 1 if flexible else self.i32()
        return max(n, 0)

    def skip_tagged_fields(self) -> None:
        self.tagged_fields()

    def tagged_fields(self) -> dict[int, bytes]:
        """Read a tagged-field section: ``{tag: raw value}`` (callers decode the known ones)."""
        out: dict[int, bytes] = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            out[tag] = bytes(self._take(self.uvarint()))
        return out

    def i8(self) -> int:
        return int(struct.unpack(">b", self._take(1))[0])

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=bytes(self._take(16)))

    def done(self) -> bool:
        return self._pos == len(self._data)


# --- keys ------------------------------------------------------------------------


def encode_offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    w = RecordWriter()
    w.i16(OFFSET_COMMIT_KEY_VERSION)
    w.string(group)
    w.string(topic)
    w.i32(partition)
    return w.getvalue()


def encode_group_metadata_key(group: str) -> bytes:
    w = RecordWriter()
    w.i16(GROUP_METADATA_KEY_VERSION)
    w.string(group)
    return w.getvalue()


def decode_key(data: bytes) -> OffsetCommitKey | GroupMetadataKey | UnknownKey:
    r = RecordReader(data)
    version = r.i16()
    if version in (0, 1):
        return OffsetCommitKey(r.required_string(), r.required_string(), r.i32())
    if version == 2:
        return GroupMetadataKey(r.required_string())
    return UnknownKey(version)


# --- offset commit value -------------------------------------------------------


def encode_offset_commit_value(value: OffsetCommitValue) -> bytes:
    w = RecordWriter()
    if value.expire_timestamp >= 0:
        # v1 is the only version that can hold an explicit expire timestamp.
        w.i16(1)
        w.i64(value.offset)
        w.string(value.metadata)
        w.i64(value.commit_timestamp)
        w.i64(value.expire_timestamp)
    else:
        w.i16(3)
        w.i64(value.offset)
        w.i32(value.leader_epoch)
        w.string(value.metadata)
        w.i64(value.commit_timestamp)
    return w.getvalue()


def decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    r = RecordReader(data)
    version = r.i16()
    if version < 0:
        raise RecordFormatError(f"bad offset commit value version {version}")
    flexible = version >= 4
    offset = r.i64()
    leader_epoch = r.i32() if version >= 3 else -1
    metadata = r.required_string(flexible)
    commit_ts = r.i64()
    expire_ts = r.i64() if version == 1 else -1
    if flexible:
        r.skip_tagged_fields()
    return OffsetCommitValue(offset, leader_epoch, metadata, commit_ts, expire_ts)


# --- group metadata value --------------------------------------------------------


def encode_group_metadata_value(value: GroupMetadataValue) -> bytes:
    w = RecordWriter()
    w.i16(GROUP_METADATA_VALUE_VERSION)
    w.string(value.protocol_type)
    w.i32(value.generation)
    w.string(value.protocol)
    w.string(value.leader)
    w.i64(value.current_state_timestamp)
    w.i32(len(value.members))
    for m in value.members:
        w.string(m.member_id)
        w.string(m.group_instance_id)
        w.string(m.client_id)
        w.string(m.client_host)
        w.i32(m.rebalance_timeout)
        w.i32(m.session_timeout)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
    return w.getvalue()


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    r = RecordReader(data)
    version = r.i16()
    if version < 0:
        raise RecordFormatError(f"bad group metadata value version {version}")
    flex = version >= 4
    protocol_type = r.required_string(flex)
    generation = r.i32()
    protocol = r.string(flex)
    leader = r.string(flex)
    state_ts = r.i64() if version >= 2 else -1
    members = []
    for _ in range(r.array_len(flex)):
        member_id = r.required_string(flex)
        instance_id = r.string(flex) if version >= 3 else None
        client_id = r.required_string(flex)
        client_host = r.required_string(flex)
        rebalance_timeout = r.i32() if version >= 1 else -1
        session_timeout = r.i32()
        if version == 0:
            # v0 had no rebalance timeout; Kafka used the session timeout.
            rebalance_timeout = session_timeout
        subscription = r.bytes_(flex)
        assignment = r.bytes_(flex)
        if flex:
            r.skip_tagged_fields()
        members.append(
            MemberMetadataValue(
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance_timeout,
                session_timeout,
                subscription,
                assignment,
            )
        )
    if flex:
        r.skip_tagged_fields()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, state_ts, tuple(members))


# --- record factories --------------------------------------------------------------


def offset_commit_record(
    group: str, topic: str, partition: int, value: OffsetCommitValue
) -> CoordinatorRecord:
    return CoordinatorRecord(
        encode_offset_commit_key(group, topic, partition), encode_offset_commit_value(value)
    )


def offset_tombstone(group: str, topic: str, partition: int) -> CoordinatorRecord:
    return CoordinatorRecord(encode_offset_commit_key(group, topic, partition), None)


def group_metadata_record(group: str, value: GroupMetadataValue) -> CoordinatorRecord:
    return CoordinatorRecord(encode_group_metadata_key(group), encode_group_metadata_value(value))


def group_tombstone(group: str) -> CoordinatorRecord:
    return CoordinatorRecord(encode_group_metadata_key(group), None)
