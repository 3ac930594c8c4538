"""Record codecs (Kafka's __consumer_offsets formats) and the consumer-protocol helper."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from odradek.coordinator.consumer_protocol import (
    Assignment,
    Subscription,
    encode_assignment,
    encode_subscription,
    parse_assignment,
    parse_subscription,
)
from odradek.coordinator.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    UnknownKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
)

text = st.text(max_size=20)


def test_offset_commit_key_bytes() -> None:
    key = encode_offset_commit_key("g", "t", 3)
    assert key == b"\x00\x01" + b"\x00\x01g" + b"\x00\x01t" + b"\x00\x00\x00\x03"
    assert decode_key(key) == OffsetCommitKey("g", "t", 3)
    assert decode_key(b"\x00\x00\x00\x01g\x00\x01t\x00\x00\x00\x03") == OffsetCommitKey("g", "t", 3)


def test_group_key_and_unknown_keys() -> None:
    assert encode_group_metadata_key("ab") == b"\x00\x02\x00\x02ab"
    assert decode_key(b"\x00\x02\x00\x02ab") == GroupMetadataKey("ab")
    assert decode_key(b"\x00\x05\x00\x01x") == UnknownKey(5)


def test_offset_value_v3_bytes() -> None:
    v = OffsetCommitValue(10, 2, "m", 1000)
    data = encode_offset_commit_value(v)
    assert data == struct.pack(">hqih", 3, 10, 2, 1) + b"m" + struct.pack(">q", 1000)
    assert decode_offset_commit_value(data) == v


def test_offset_value_v0_v2_v4_decoding() -> None:
    v0 = struct.pack(">hqh", 0, 7, 0) + struct.pack(">q", 5)
    assert decode_offset_commit_value(v0) == OffsetCommitValue(7, -1, "", 5)
    v2 = struct.pack(">hqh", 2, 7, 1) + b"x" + struct.pack(">q", 5)
    assert decode_offset_commit_value(v2) == OffsetCommitValue(7, -1, "x", 5)
    # v4 is flexible: compact string, then a tagged field (e.g. 4.1's TopicId) to skip.
    v4 = struct.pack(">hqi", 4, 7, 3) + b"\x02y" + struct.pack(">q", 5) + b"\x01\x00\x02ab"
    assert decode_offset_commit_value(v4) == OffsetCommitValue(7, 3, "y", 5)


members = st.builds(
    MemberMetadataValue,
    text,
    st.none() | text,
    text,
    text,
    st.integers(0, 2**31 - 1),
    st.integers(0, 2**31 - 1),
    st.binary(max_size=30),
    st.binary(max_size=30),
)
groups = st.builds(
    GroupMetadataValue,
    text,
    st.integers(-1, 2**31 - 1),
    st.none() | text,
    st.none() | text,
    st.integers(-1, 2**62),
    st.lists(members, max_size=4).map(tuple),
)


@given(groups)
def test_group_value_roundtrip(value: GroupMetadataValue) -> None:
    data = encode_group_metadata_value(value)
    assert data[:2] == b"\x00\x03"
    assert decode_group_metadata_value(data) == value


@given(
    st.integers(-1, 2**62),
    st.integers(-1, 2**31 - 1),
    text,
    st.integers(0, 2**62),
    st.integers(-1, 2**62),
)
def test_offset_value_roundtrip(offset: int, epoch: int, meta: str, ts: int, expire: int) -> None:
    v = OffsetCommitValue(offset, epoch, meta, ts, expire)
    got = decode_offset_commit_value(encode_offset_commit_value(v))
    if expire >= 0:  # v1 carries no leader epoch
        assert got == OffsetCommitValue(offset, -1, meta, ts, expire)
    else:
        assert got == v


def test_group_value_v0_decoding() -> None:
    def s(x: str) -> bytes:
        return struct.pack(">h", len(x)) + x.encode()

    data = (
        struct.pack(">h", 0)
        + s("consumer")
        + struct.pack(">i", 4)
        + s("range")
        + s("m1")
        + struct.pack(">i", 1)
        + s("m1")
        + s("cid")
        + s("/h")
        + struct.pack(">i", 9000)
        + struct.pack(">i", 2)
        + b"ab"
        + struct.pack(">i", 0)
    )
    v = decode_group_metadata_value(data)
    assert v.generation == 4 and v.current_state_timestamp == -1
    assert v.members == (MemberMetadataValue("m1", None, "cid", "/h", 9000, 9000, b"ab", b""),)


@given(
    st.lists(text, max_size=4).map(tuple),
    st.none() | st.binary(max_size=8),
    st.lists(st.tuples(text, st.lists(st.integers(0, 99), max_size=3).map(tuple)), max_size=3).map(
        tuple
    ),
    st.integers(0, 3),
)
def test_subscription_roundtrip(
    topics: tuple[str, ...],
    user_data: bytes | None,
    owned: tuple[tuple[str, tuple[int, ...]], ...],
    version: int,
) -> None:
    sub = Subscription(
        topics,
        user_data,
        owned if version >= 1 else (),
        7 if version >= 2 else -1,
        "rack" if version >= 3 else None,
        version,
    )
    assert parse_subscription(encode_subscription(sub)) == sub


def test_assignment_roundtrip_and_empty() -> None:
    a = Assignment((("t", (0, 2)),), b"u", 1)
    assert parse_assignment(encode_assignment(a)) == a
    assert parse_assignment(b"") == Assignment(())
