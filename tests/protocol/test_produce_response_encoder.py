"""The broker's hand-written Produce response encoder writes what kio writes, every version."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol.apikeys import ApiKey
from odradek.protocol.codec import build, decode_response, encode_response, response_type
from odradek.protocol.produce import (
    FIRST_TOPIC_ID_VERSION,
    MIN_VERSION,
    READ_MAX_VERSION,
    _encode_any,
    _encode_single_partition,
    encode_produce_response,
)

i64 = st.integers(-(2**63), 2**63 - 1)
texts = st.text(max_size=12)
leaders = st.fixed_dictionaries(
    {"leader_id": st.integers(-1, 2**31 - 1), "leader_epoch": st.integers(-1, 2**31 - 1)}
)
partitions = st.lists(
    st.fixed_dictionaries(
        {
            "index": st.integers(-(2**31), 2**31 - 1),
            "error_code": st.sampled_from([0, 1, 6, 19, 47, 53, 87]),
            "base_offset": i64,
            # kio models the time as a datetime (ms since the epoch), -1 as None
            "log_append_time": st.just(-1) | st.integers(0, 2**42),
            "log_start_offset": i64,
            "error_message": st.none() | texts,
        },
        optional={
            "record_errors": st.lists(
                st.fixed_dictionaries(
                    {
                        "batch_index": st.integers(-(2**31), 2**31 - 1),
                        "batch_index_error_message": st.none() | texts,
                    }
                ),
                max_size=2,
            ),
            "current_leader": st.none() | leaders | st.just({"leader_id": -1, "leader_epoch": -1}),
        },
    ),
    max_size=4,
)
topics = st.lists(st.tuples(st.text(min_size=1, max_size=12), st.uuids(), partitions), max_size=3)
node_endpoints = st.lists(
    st.fixed_dictionaries(
        {
            "node_id": st.integers(0, 2**31 - 1),
            "host": st.text(min_size=1, max_size=12),
            "port": st.integers(1, 65535),
            "rack": st.none() | st.text(max_size=6),
        }
    ),
    max_size=3,
)


def kio_bytes(version: int, correlation: int, throttle: int, data: list, nodes: list) -> bytes:
    by_id = version >= FIRST_TOPIC_ID_VERSION
    responses = []
    for name, topic_id, parts in data:
        entries = []
        for p in parts:
            entry = {"record_errors": (), **p}
            if entry.get("current_leader") is None:
                entry.pop("current_leader", None)  # kio's default: -1 / -1
            entries.append(entry)
        responses.append(
            {
                **({"topic_id": topic_id} if by_id else {"name": name}),
                "partition_responses": entries,
            }
        )
    body = build(
        response_type(ApiKey.PRODUCE, version),
        {"responses": responses, "throttle_time": throttle, "node_endpoints": nodes},
    )
    return encode_response(ApiKey.PRODUCE, version, correlation, body)


@pytest.mark.parametrize("version", range(MIN_VERSION, READ_MAX_VERSION + 1))
@settings(max_examples=30, deadline=None)
@given(
    correlation=st.integers(-(2**31), 2**31 - 1),
    throttle=st.integers(0, 2**31 - 1),
    data=topics,
    nodes=node_endpoints,
)
def test_written_as_kio_writes(version: int, correlation: int, throttle: int, data, nodes) -> None:
    ours = encode_produce_response(
        version,
        correlation,
        throttle_ms=throttle,
        topics=[(name, topic_id, parts) for name, topic_id, parts in data],
        node_endpoints=nodes,
    )
    wire = b"".join(ours.parts)
    assert len(wire) == ours.size
    assert wire == kio_bytes(version, correlation, throttle, data, nodes)


@pytest.mark.parametrize("version", [3, 9, 10, 13])
def test_hints_are_read_back_by_kio(version: int) -> None:
    """A refused partition's current leader and the leaders' endpoints reach the client."""
    leader = {"leader_id": 2, "leader_epoch": 7}
    part = {
        "index": 1,
        "error_code": 6,  # NOT_LEADER_OR_FOLLOWER
        "base_offset": -1,
        "log_append_time": -1,
        "log_start_offset": -1,
        "error_message": "not the leader",
        "current_leader": leader,
    }
    node = {"node_id": 2, "host": "127.0.0.1", "port": 9093, "rack": None}
    topic_id = uuid.uuid4()
    ours = encode_produce_response(
        version, 5, throttle_ms=0, topics=[("t", topic_id, [part])], node_endpoints=[node]
    )
    correlation, body = decode_response(ApiKey.PRODUCE, version, bytes(ours.parts[0])[4:])
    assert correlation == 5
    (topic,) = body.responses
    (partition,) = topic.partition_responses
    assert partition.index == 1 and partition.error_code == 6
    if version >= 10:
        assert (partition.current_leader.leader_id, partition.current_leader.leader_epoch) == (2, 7)
        assert [(n.node_id, n.host, n.port) for n in body.node_endpoints] == [
            (2, "127.0.0.1", 9093)
        ]
    if version >= FIRST_TOPIC_ID_VERSION:
        assert topic.topic_id == topic_id
    else:
        assert topic.name == "t"


def test_versions_outside_the_range_are_refused() -> None:
    for version in (MIN_VERSION - 1, READ_MAX_VERSION + 1):
        with pytest.raises(ValueError, match="not written"):
            encode_produce_response(version, 1, throttle_ms=0, topics=[])


appended = st.fixed_dictionaries(
    {
        "index": st.integers(-(2**31), 2**31 - 1),
        "error_code": st.just(0),
        "base_offset": i64,
        "log_append_time": st.just(-1) | st.integers(0, 2**42),
        "log_start_offset": i64,
        "error_message": st.none(),
    },
    optional={
        "record_errors": st.just([]) | st.just(()),
        "current_leader": st.none(),
    },
)


@pytest.mark.parametrize("version", range(MIN_VERSION, READ_MAX_VERSION + 1))
@settings(max_examples=40, deadline=None)
@given(
    correlation=st.integers(-(2**31), 2**31 - 1),
    throttle=st.integers(0, 2**31 - 1),
    name=st.text(min_size=1, max_size=130),
    topic_id=st.none() | st.uuids(),
    part=appended,
)
def test_the_common_answer_in_one_pack(
    version: int, correlation: int, throttle: int, name: str, topic_id, part
) -> None:
    """One partition of one topic appended without error (a producer's usual request)
    takes the one-pack writer: the same bytes as the general writer's and kio's."""
    topics = [(name, topic_id, [part])]
    ours = encode_produce_response(version, correlation, throttle_ms=throttle, topics=topics)
    wire = b"".join(ours.parts)
    assert len(wire) == ours.size
    general = _encode_any(version, correlation, throttle, topics, ())
    assert wire == b"".join(general.parts)
    if topic_id is not None or version < FIRST_TOPIC_ID_VERSION:
        assert wire == kio_bytes(version, correlation, throttle, topics, [])
    if len(name.encode()) < 0x7F or version >= FIRST_TOPIC_ID_VERSION or version < 9:
        assert _encode_single_partition(version, correlation, throttle, topics[0]) is not None
