"""Consumer-protocol blobs: byte-exact against the Java schemas, and against kafka-python."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor as KpCoop
from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from kafka.coordinator.assignors.sticky.user_data import StickyAssignorUserData as KpUserData
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment as KpAssignment
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription as KpSubscription

from odradek.protocol.consumer_protocol import (
    Assignment,
    ConsumerProtocolError,
    StickyAssignorUserData,
    Subscription,
    TopicPartitions,
    decode_cooperative_user_data,
    decode_sticky_user_data,
    encode_cooperative_user_data,
    encode_sticky_user_data,
    parse_assignment,
    parse_subscription,
    subscribed_topics,
)


# Field writers straight from the schema's primitive types.
def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def string(s: str | None) -> bytes:
    if s is None:
        return i16(-1)
    return i16(len(s.encode())) + s.encode()


def nbytes(b: bytes | None) -> bytes:
    return i32(-1) if b is None else i32(len(b)) + b


def tps(groups: list[tuple[str, list[int]]]) -> bytes:
    out = i32(len(groups))
    for topic, parts in groups:
        out += string(topic) + i32(len(parts)) + b"".join(i32(p) for p in parts)
    return out


OWNED = (("orders", (0, 2)), ("audit", (5,)))
SUB = Subscription(("orders", "audit"), b"\x01\x02", OWNED, 7, "rack-a")

# ---------------------------------------------------------------- byte-exact encodings


def test_subscription_v0_literal_bytes() -> None:
    sub = Subscription(("ab",), None)
    assert sub.encode(0) == (
        b"\x00\x00"  # version 0
        b"\x00\x00\x00\x01"  # 1 topic
        b"\x00\x02ab"  # "ab"
        b"\xff\xff\xff\xff"  # user_data null
    )


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_subscription_versions_byte_exact(version: int) -> None:
    expected = i16(version) + i32(2) + string("orders") + string("audit") + nbytes(b"\x01\x02")
    if version >= 1:
        expected += tps([("orders", [0, 2]), ("audit", [5])])
    if version >= 2:
        expected += i32(7)
    if version >= 3:
        expected += string("rack-a")
    assert SUB.encode(version) == expected
    decoded = Subscription.decode(expected)
    assert decoded.version == version
    assert decoded.topics == SUB.topics
    assert decoded.user_data == SUB.user_data
    # Fields newer than the version are dropped on write and read back as their defaults.
    assert decoded.owned_partitions == (OWNED if version >= 1 else ())
    assert decoded.generation_id == (7 if version >= 2 else -1)
    assert decoded.rack_id == ("rack-a" if version >= 3 else None)


def test_subscription_defaults_encode_highest_version_with_nulls() -> None:
    sub = Subscription(("t",))
    assert sub.encode() == (
        i16(3) + i32(1) + string("t") + nbytes(None) + i32(0) + i32(-1) + string(None)
    )
    assert sub.generation is None
    assert Subscription.of(["t"], owned=[("t", 1), ("u", 0), ("t", 0)]).owned_partitions == (
        ("t", (1, 0)),
        ("u", (0,)),
    )


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_assignment_versions_byte_exact(version: int) -> None:
    a = Assignment((("orders", (1, 3)), ("audit", ())), b"ud")
    expected = i16(version) + tps([("orders", [1, 3]), ("audit", [])]) + nbytes(b"ud")
    assert a.encode(version) == expected
    assert Assignment.decode(expected) == Assignment(a.partitions, b"ud", version)


def test_assignment_literal_bytes_and_null_user_data() -> None:
    raw = b"\x00\x01\x00\x00\x00\x01\x00\x01t\x00\x00\x00\x01\x00\x00\x00\x04" + (
        b"\xff\xff\xff\xff"
    )
    a = Assignment.decode(raw)
    assert a == Assignment((("t", (4,)),), None, 1)
    assert a.topic_partitions() == [("t", 4)]
    assert a.encode() == raw  # re-encodes at the version it was read with
    assert a.encode(3) == b"\x00\x03" + raw[2:]
    assert Assignment.decode(b"") == Assignment(())


def test_higher_versions_read_known_prefix() -> None:
    body = SUB.encode(3)[2:]
    sub = Subscription.decode(i16(9) + body + b"future fields")
    assert (sub.version, sub.owned_partitions, sub.generation_id, sub.rack_id) == (
        9,
        OWNED,
        7,
        "rack-a",
    )
    a = Assignment.decode(i16(4) + tps([("t", [0])]) + nbytes(None) + b"\x00\x07more")
    assert a.partitions == (("t", (0,)),) and a.version == 4


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\x00",
        i16(-1) + i32(0) + nbytes(None),
        i16(0) + i32(1) + string(None) + nbytes(None),  # null topic
        i16(0) + i32(-1) + nbytes(None),  # null topics array
        i16(0) + i32(2) + string("a"),  # truncated
        i16(1) + i32(0) + nbytes(None),  # v1 without owned partitions
        i16(0) + i32(1) + i16(2) + b"\xff\xfe" + nbytes(None),  # bad utf-8
    ],
)
def test_malformed_subscriptions_raise(raw: bytes) -> None:
    with pytest.raises(ConsumerProtocolError):
        parse_subscription(raw)


def test_malformed_assignments_raise() -> None:
    for raw in (i16(-2) + i32(0) + nbytes(None), i16(0) + i32(1) + string("t") + i32(3)):
        with pytest.raises(ConsumerProtocolError):
            parse_assignment(raw)
    with pytest.raises(ConsumerProtocolError):
        Subscription(("t",)).encode(4)
    with pytest.raises(ConsumerProtocolError):
        Assignment(()).encode(-1)


def test_subscribed_topics() -> None:
    assert subscribed_topics(SUB.encode(0)) == frozenset({"orders", "audit"})


# ---------------------------------------------------------------- kafka-python interop

names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
topic_parts = st.lists(
    st.tuples(names, st.lists(st.integers(-(2**31), 2**31 - 1), max_size=5)), max_size=4
)


def _kp_sub_kwargs(
    version: int,
    topics: list[str],
    user_data: bytes | None,
    owned: list[tuple[str, list[int]]],
    generation: int,
    rack: str | None,
) -> dict[str, object]:
    kw: dict[str, object] = {"version": version, "topics": topics, "user_data": user_data}
    if version >= 1:
        kw["owned_partitions"] = [
            KpSubscription.TopicPartition(topic=t, partitions=ps) for t, ps in owned
        ]
    if version >= 2:
        kw["generation_id"] = generation
    if version >= 3:
        kw["rack_id"] = rack
    return kw


def _frozen(owned: list[tuple[str, list[int]]]) -> TopicPartitions:
    return tuple((t, tuple(ps)) for t, ps in owned)


@settings(max_examples=150, deadline=None)
@given(
    version=st.integers(0, 3),
    topics=st.lists(names, max_size=4),
    user_data=st.none() | st.binary(max_size=16),
    owned=topic_parts,
    generation=st.integers(-1, 2**31 - 1),
    rack=st.none() | names,
)
def test_kafka_python_subscription_both_ways(
    version: int,
    topics: list[str],
    user_data: bytes | None,
    owned: list[tuple[str, list[int]]],
    generation: int,
    rack: str | None,
) -> None:
    kp = KpSubscription(**_kp_sub_kwargs(version, topics, user_data, owned, generation, rack))
    kp_bytes = kp.encode()
    ours = Subscription(
        tuple(topics),
        user_data,
        _frozen(owned) if version >= 1 else (),
        generation if version >= 2 else -1,
        rack if version >= 3 else None,
        version,
    )
    assert Subscription.decode(kp_bytes) == ours
    assert ours.encode() == kp_bytes
    back = KpSubscription.decode(ours.encode())
    assert list(back.topics) == topics
    assert back.user_data == user_data
    if version >= 1:
        assert [(tp.topic, list(tp.partitions)) for tp in back.owned_partitions] == owned


@settings(max_examples=100, deadline=None)
@given(version=st.integers(0, 3), parts=topic_parts, user_data=st.none() | st.binary(max_size=8))
def test_kafka_python_assignment_both_ways(
    version: int, parts: list[tuple[str, list[int]]], user_data: bytes | None
) -> None:
    kp = KpAssignment(version=version, assigned_partitions=parts, user_data=user_data)
    ours = Assignment(_frozen(parts), user_data, version)
    assert kp.encode() == ours.encode()
    assert Assignment.decode(kp.encode()) == ours
    back = KpAssignment.decode(ours.encode())
    assert [(t, list(ps)) for t, ps in back.assigned_partitions] == parts


def test_real_kafka_python_assignor_metadata_decodes() -> None:
    """What kafka-python's sticky and cooperative-sticky members put into JoinGroup."""
    assignment = KpAssignment(version=0, assigned_partitions=[("orders", [2, 0])], user_data=b"")
    sticky = StickyPartitionAssignor()
    sticky.on_assignment(assignment, 5)
    raw = sticky.metadata({"orders"}).encode(version=0)
    sub = Subscription.decode(raw)
    assert sub.topics == ("orders",) and sub.version == 0
    assert decode_sticky_user_data(sub.user_data) == ([("orders", 2), ("orders", 0)], 5)

    coop = KpCoop()
    coop.on_assignment(assignment, 5)
    sub = Subscription.decode(coop.metadata({"orders"}).encode())
    assert sub.version == 1 and sub.user_data == b""
    assert sub.owned() == [("orders", 0), ("orders", 2)]
    assert sub.generation is None
    assert decode_cooperative_user_data(sub.user_data) == -1  # Java's unreadable fallback


# ---------------------------------------------------------------- assignor user data


def test_sticky_user_data_v1_byte_exact() -> None:
    raw = encode_sticky_user_data([("t", 0), ("u", 3), ("t", 1)], 9)
    assert raw == tps([("t", [0, 1]), ("u", [3])]) + i32(9)
    assert decode_sticky_user_data(raw) == ([("t", 0), ("t", 1), ("u", 3)], 9)
    # kafka-python's struct (without its version prefix) is the same bytes.
    assert KpUserData([("t", [0, 1]), ("u", [3])], 9).encode(header=False) == raw


def test_sticky_user_data_v0_and_garbage() -> None:
    v0 = tps([("t", [4, 5])])
    assert decode_sticky_user_data(v0) == ([("t", 4), ("t", 5)], None)
    assert decode_sticky_user_data(None) == ([], None)
    assert decode_sticky_user_data(b"") == ([], None)
    assert decode_sticky_user_data(b"\x07\x07\x07") == ([], None)
    # Trailing bytes after a v1 struct are ignored, as Java's Struct read does.
    assert decode_sticky_user_data(tps([("t", [1])]) + i32(3) + b"xx") == ([("t", 1)], 3)


def test_sticky_user_data_kafka_python_3_prefixed_form() -> None:
    raw = KpUserData([("t", [0, 1])], 4).encode()
    assert raw[:2] == b"\x00\x01"
    assert StickyAssignorUserData.decode(raw) == StickyAssignorUserData((("t", (0, 1)),), 4)


@settings(max_examples=100, deadline=None)
@given(parts=topic_parts, generation=st.integers(-(2**31), 2**31 - 1))
def test_sticky_user_data_roundtrip(parts: list[tuple[str, list[int]]], generation: int) -> None:
    ud = StickyAssignorUserData(_frozen(parts), generation)
    assert StickyAssignorUserData.decode(ud.encode()) == ud


def test_cooperative_user_data() -> None:
    assert encode_cooperative_user_data(12) == b"\x00\x00\x00\x0c"
    assert decode_cooperative_user_data(b"\x00\x00\x00\x0c") == 12
    assert decode_cooperative_user_data(None) is None
    assert decode_cooperative_user_data(b"\x01") == -1
