"""The hand-written Fetch response writer and reader agree with kio byte for byte."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol.apikeys import ApiKey
from odradek.protocol.codec import (
    RequestHeader,
    build,
    decode_response,
    encode_request,
    encode_response,
    parse_request_header,
    request_type,
    response_type,
)
from odradek.protocol.fetch import (
    INLINE_RECORDS_BYTES,
    MAX_VERSION,
    MIN_VERSION,
    NO_DIVERGING_EPOCH,
    REQUEST_MAX_VERSION,
    EpochEndOffset,
    FetchDecodeError,
    encode_fetch_request,
    encode_fetch_response,
    parse_fetch_request,
    parse_fetch_response,
)

i64 = st.integers(-(2**63), 2**63 - 1)
partitions = st.lists(
    st.fixed_dictionaries(
        {
            "partition_index": st.integers(0, 2**31 - 1),
            "error_code": st.sampled_from([0, 1, 3, 70, 100]),
            "high_watermark": i64,
            "last_stable_offset": i64,
            "log_start_offset": i64,
            "aborted_transactions": st.none()
            | st.lists(
                st.fixed_dictionaries({"producer_id": i64, "first_offset": i64}), max_size=3
            ),
            "preferred_read_replica": st.integers(-1, 5),
            "records": st.none() | st.binary(max_size=200),
            "diverging_epoch": st.none()
            | st.fixed_dictionaries({"epoch": st.integers(0, 2**31 - 1), "end_offset": i64}),
            "current_leader": st.none()
            | st.fixed_dictionaries(
                {"leader_id": st.integers(-1, 2**31 - 1), "leader_epoch": st.integers(-1, 99)}
            ),
        }
    ),
    max_size=4,
)
topics = st.lists(
    st.tuples(st.text(min_size=1, max_size=12), st.uuids(), partitions),
    max_size=4,
)
# KIP-951's NodeEndpoints (v16+): the leaders named by CurrentLeader
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


def _kio_partition(version: int, partition: dict[str, Any]) -> dict[str, Any]:
    """A partition as kio builds it: DivergingEpoch only from v12, its default when absent."""
    tagged = ("diverging_epoch", "current_leader")
    out = {k: v for k, v in partition.items() if k not in tagged}
    for key in tagged:
        if version >= 12 and partition.get(key) is not None:
            out[key] = partition[key]
    return out


def _ours(partition: dict[str, Any]) -> dict[str, Any]:
    """A partition as the broker hands it to our encoder (DivergingEpoch an object)."""
    diverging = partition.get("diverging_epoch")
    if diverging is None:
        return partition
    return {**partition, "diverging_epoch": EpochEndOffset(**diverging)}


def _kio_bytes(
    version: int, correlation: int, values: dict[str, Any], topics_: list, nodes: list = ()
) -> bytes:
    if version >= 16:
        values = {**values, "node_endpoints": nodes}
    entity = build(
        response_type(ApiKey.FETCH, version),
        {
            **values,
            "responses": [
                {
                    "topic": name,
                    "topic_id": tid,
                    "partitions": [_kio_partition(version, p) for p in parts],
                }
                for name, tid, parts in topics_
            ],
        },
    )
    return encode_response(ApiKey.FETCH, version, correlation, entity)


def _joined(encoded: Any) -> bytes:
    return b"".join(bytes(p) for p in encoded.parts)


@pytest.mark.parametrize("version", range(MIN_VERSION, MAX_VERSION + 1))
@settings(max_examples=30, deadline=None)
@given(
    correlation=st.integers(-(2**31), 2**31 - 1),
    throttle=st.integers(0, 2**31 - 1),
    error_code=st.sampled_from([0, 70, 71]),
    session_id=st.integers(0, 2**31 - 1),
    data=topics,
    nodes=node_endpoints,
)
def test_written_as_kio_writes_and_read_as_kio_reads(
    version: int,
    correlation: int,
    throttle: int,
    error_code: int,
    session_id: int,
    data: Any,
    nodes: list[dict[str, Any]],
) -> None:
    values = {"throttle_time": throttle, "error_code": error_code, "session_id": session_id}
    ours = encode_fetch_response(
        version,
        correlation,
        throttle_ms=throttle,
        error_code=error_code,
        session_id=session_id,
        topics=[(name, tid, [_ours(p) for p in parts]) for name, tid, parts in data],
        node_endpoints=nodes,
    )
    expected = _kio_bytes(version, correlation, values, data, nodes)
    assert _joined(ours) == expected
    assert ours.size == len(expected)

    _, entity = decode_response(ApiKey.FETCH, version, expected[4:])
    parsed = parse_fetch_response(expected[4:], version)
    assert parsed.throttle_time_ms == entity.throttle_time // datetime.timedelta(milliseconds=1)
    if version >= 7:
        assert (parsed.error_code, parsed.session_id) == (entity.error_code, entity.session_id)
    assert len(parsed.responses) == len(entity.responses)
    for mine, theirs in zip(parsed.responses, entity.responses, strict=True):
        if version >= 13:
            assert mine.topic_id == theirs.topic_id
        else:
            assert mine.topic == theirs.topic
        for p, q in zip(mine.partitions, theirs.partitions, strict=True):
            assert (p.partition_index, p.error_code, p.high_watermark) == (
                q.partition_index,
                q.error_code,
                q.high_watermark,
            )
            assert p.last_stable_offset == q.last_stable_offset
            assert p.log_start_offset == (q.log_start_offset if version >= 5 else -1)
            assert p.preferred_read_replica == (q.preferred_read_replica if version >= 11 else -1)
            if q.aborted_transactions is None:
                assert p.aborted_transactions is None
            else:
                assert [(a.producer_id, a.first_offset) for a in p.aborted_transactions] == [
                    (a.producer_id, a.first_offset) for a in q.aborted_transactions
                ]
            assert (None if p.records is None else bytes(p.records)) == q.records
            if version >= 12:
                theirs_diverging = (q.diverging_epoch.epoch, q.diverging_epoch.end_offset)
            else:
                theirs_diverging = (-1, -1)
            assert (p.diverging_epoch.epoch, p.diverging_epoch.end_offset) == theirs_diverging


class Region:
    """A spliced part: what the broker sends with sendfile."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.length = len(data)


@pytest.mark.parametrize("version", [4, 11, 12, 13, 18])
def test_spliced_records_stay_parts_and_large_bytes_are_not_copied(version: int) -> None:
    big = bytes(range(256)) * ((INLINE_RECORDS_BYTES // 256) + 1)
    region = Region(b"r" * 5000)

    def partition(index: int, records: Any) -> dict[str, Any]:
        return {
            "partition_index": index,
            "error_code": 0,
            "high_watermark": 10,
            "last_stable_offset": 10,
            "log_start_offset": 0,
            "aborted_transactions": None,
            "preferred_read_replica": -1,
            "records": records,
        }

    tid = uuid.uuid4()
    data = [("t", tid, [partition(0, region), partition(1, big), partition(2, b"small")])]
    encoded = encode_fetch_response(
        version, 9, throttle_ms=0, error_code=0, session_id=0, topics=data
    )
    assert encoded.spliced() == [region]
    assert any(p is big for p in encoded.parts)  # no copy of large records
    flat = b"".join(p.data if isinstance(p, Region) else bytes(p) for p in encoded.parts)
    plain = [("t", tid, [partition(0, region.data), partition(1, big), partition(2, b"small")])]
    values = {"throttle_time": 0, "error_code": 0, "session_id": 0}
    assert flat == _kio_bytes(version, 9, values, plain)
    assert encoded.size == len(flat)


@pytest.mark.parametrize("version", [4, 12])
def test_truncated_responses_are_refused(version: int) -> None:
    data = [("t", None, [{**_EMPTY, "records": b"x" * 50}])]
    encoded = encode_fetch_response(
        version, 1, throttle_ms=0, error_code=0, session_id=0, topics=data
    )
    frame = _joined(encoded)[4:]
    parse_fetch_response(frame, version)
    for cut in (5, len(frame) // 2, len(frame) - 1):
        with pytest.raises(FetchDecodeError):
            parse_fetch_response(frame[:cut], version)


def test_records_are_views_of_the_frame() -> None:
    data = [("t", None, [{**_EMPTY, "records": b"abcdef"}])]
    frame = bytearray(
        _joined(
            encode_fetch_response(11, 1, throttle_ms=0, error_code=0, session_id=0, topics=data)
        )[4:]
    )
    records = parse_fetch_response(frame, 11).responses[0].partitions[0].records
    assert isinstance(records, memoryview) and records.obj is frame
    assert bytes(records) == b"abcdef"


def test_diverging_epoch_is_read_among_tags_the_reader_skips() -> None:
    """A leader's DivergingEpoch (tag 0) next to CurrentLeader and SnapshotId (tags 1, 2,
    which Kafka's brokers set and this reader skips); absent before v12."""
    partition = {
        **_EMPTY,
        "diverging_epoch": {"epoch": 4, "end_offset": 1234},
        "current_leader": {"leader_id": 2, "leader_epoch": 7},
        "snapshot_id": {"end_offset": 99, "epoch": 3},
    }
    entity = build(
        response_type(ApiKey.FETCH, 12),
        {
            "throttle_time": 0,
            "error_code": 0,
            "session_id": 0,
            "responses": [{"topic": "t", "partitions": [partition]}],
        },
    )
    frame = encode_response(ApiKey.FETCH, 12, 1, entity)[4:]
    parsed = parse_fetch_response(frame, 12).responses[0].partitions[0]
    assert parsed.diverging_epoch == EpochEndOffset(4, 1234)
    older = _joined(
        encode_fetch_response(
            11, 1, throttle_ms=0, error_code=0, session_id=0, topics=[("t", None, [_EMPTY])]
        )
    )[4:]
    assert parse_fetch_response(older, 11).responses[0].partitions[0].diverging_epoch is (
        NO_DIVERGING_EPOCH
    )


_EMPTY: dict[str, Any] = {
    "partition_index": 0,
    "error_code": 0,
    "high_watermark": 0,
    "last_stable_offset": 0,
    "log_start_offset": 0,
    "aborted_transactions": None,
    "preferred_read_replica": -1,
    "records": None,
}


names = st.text(min_size=1, max_size=12)


@pytest.mark.parametrize("version", range(MIN_VERSION, REQUEST_MAX_VERSION + 1))
@settings(max_examples=30, deadline=None)
@given(
    wait=st.integers(0, 2**31 - 1),
    min_bytes=st.integers(0, 2**31 - 1),
    max_bytes=st.integers(0, 2**31 - 1),
    isolation=st.sampled_from([0, 1]),
    session=st.tuples(st.integers(0, 2**31 - 1), st.integers(-1, 2**31 - 1)),
    topics_=st.lists(
        st.tuples(
            names,
            st.lists(
                st.tuples(st.integers(0, 2**31 - 1), i64, st.integers(0, 2**31 - 1))
                | st.tuples(
                    st.integers(0, 2**31 - 1),
                    i64,
                    st.integers(0, 2**31 - 1),
                    st.integers(-1, 2**31 - 1),  # current leader epoch
                    i64,  # log start offset
                    st.integers(-1, 2**31 - 1),  # last fetched epoch
                ),
                max_size=3,
            ),
        ),
        max_size=3,
    ),
    forgotten=st.lists(
        st.tuples(names, st.lists(st.integers(0, 2**31 - 1), max_size=3)), max_size=2
    ),
    rack=st.text(max_size=5),
)
def test_requests_written_as_kio_writes(
    version: int, wait, min_bytes, max_bytes, isolation, session, topics_, forgotten, rack
) -> None:
    header = RequestHeader(ApiKey.FETCH, version, 3, "c")
    ours = encode_fetch_request(
        version,
        max_wait_ms=wait,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=isolation,
        session_id=session[0],
        session_epoch=session[1],
        topics=topics_,
        forgotten=forgotten,
        rack_id=rack,
    )
    entity = build(
        request_type(ApiKey.FETCH, version),
        {
            "cluster_id": None,
            "replica_id": -1,
            "max_wait": wait,
            "min_bytes": min_bytes,
            "max_bytes": max_bytes,
            "isolation_level": isolation,
            "session_id": session[0],
            "session_epoch": session[1],
            "topics": [
                {
                    "topic": name,
                    "partitions": [
                        {
                            "partition": item[0],
                            "current_leader_epoch": item[3] if len(item) > 3 else -1,
                            "fetch_offset": item[1],
                            "last_fetched_epoch": item[5] if len(item) > 5 else -1,
                            "log_start_offset": item[4] if len(item) > 3 else -1,
                            "partition_max_bytes": item[2],
                        }
                        for item in parts
                    ],
                }
                for name, parts in topics_
            ],
            "forgotten_topics_data": [
                {"topic": name, "partitions": parts} for name, parts in forgotten
            ],
            "rack_id": rack,
        },
    )
    assert encode_request(header, ours) == encode_request(header, entity)


uuids = st.uuids() | st.just(uuid.UUID(int=0))


@pytest.mark.parametrize("version", range(MIN_VERSION, MAX_VERSION + 1))
@settings(max_examples=30, deadline=None)
@given(
    wait=st.integers(0, 2**31 - 1),
    sizes=st.tuples(st.integers(-(2**31), 2**31 - 1), st.integers(-(2**31), 2**31 - 1)),
    isolation=st.sampled_from([0, 1]),
    session=st.tuples(st.integers(-(2**31), 2**31 - 1), st.integers(-(2**31), 2**31 - 1)),
    replica=st.tuples(st.integers(-(2**31), 2**31 - 1), i64),
    cluster=st.none() | st.text(max_size=8),
    data=st.data(),
)
def test_requests_read_as_kio_reads(
    version: int, wait, sizes, isolation, session, replica, cluster, data
) -> None:
    i32 = st.integers(-(2**31), 2**31 - 1)
    partition = st.fixed_dictionaries(
        {
            "partition": i32,
            "current_leader_epoch": i32,
            "fetch_offset": i64,
            "last_fetched_epoch": i32,
            "log_start_offset": i64,
            "partition_max_bytes": i32,
            "replica_directory_id": uuids,
            "high_watermark": i64,
        }
    )
    topics_ = data.draw(
        st.lists(
            st.fixed_dictionaries(
                {"topic": names, "topic_id": uuids, "partitions": st.lists(partition, max_size=3)}
            ),
            max_size=3,
        )
    )
    forgotten = data.draw(
        st.lists(
            st.fixed_dictionaries(
                {"topic": names, "topic_id": uuids, "partitions": st.lists(i32, max_size=3)}
            ),
            max_size=2,
        )
    )
    values = {
        "cluster_id": cluster,
        "replica_id": replica[0],
        "replica_state": {"replica_id": replica[0], "replica_epoch": replica[1]},
        "max_wait": wait,
        "min_bytes": sizes[0],
        "max_bytes": sizes[1],
        "isolation_level": isolation,
        "session_id": session[0],
        "session_epoch": session[1],
        "topics": topics_,
        "forgotten_topics_data": forgotten,
        "rack_id": data.draw(st.text(max_size=5)),
    }
    entity = build(request_type(ApiKey.FETCH, version), values)
    frame = encode_request(RequestHeader(ApiKey.FETCH, version, 1, "c"), entity)[4:]
    _, pos = parse_request_header(frame)
    if version >= 12:
        pos += 1  # no tagged fields in the request header
    ours = parse_fetch_request(frame, pos, version)
    assert ours.max_wait_ms == entity.max_wait // datetime.timedelta(milliseconds=1)
    assert (ours.min_bytes, ours.max_bytes, ours.isolation_level) == (
        entity.min_bytes,
        entity.max_bytes,
        entity.isolation_level,
    )
    if version >= 15:
        assert (ours.replica_id, ours.replica_epoch) == (
            entity.replica_state.replica_id,
            entity.replica_state.replica_epoch,
        )
    else:
        assert ours.replica_id == entity.replica_id
    if version >= 12:
        assert ours.cluster_id == entity.cluster_id
    if version >= 7:
        assert (ours.session_id, ours.session_epoch) == (entity.session_id, entity.session_epoch)
        assert [
            (t.topic_id if version >= 13 else t.topic, list(t.partitions))
            for t in ours.forgotten_topics_data
        ] == [
            (t.topic_id if version >= 13 else t.topic, list(t.partitions))
            for t in entity.forgotten_topics_data
        ]
    if version >= 11:
        assert ours.rack_id == entity.rack_id
    fields = ["partition", "fetch_offset", "partition_max_bytes"]
    fields += ["log_start_offset"] if version >= 5 else []
    fields += ["current_leader_epoch"] if version >= 9 else []
    fields += ["last_fetched_epoch"] if version >= 12 else []
    assert len(ours.topics) == len(entity.topics)
    for mine, theirs in zip(ours.topics, entity.topics, strict=True):
        if version >= 13:
            assert mine.topic_id == theirs.topic_id
        else:
            assert mine.topic == theirs.topic
        assert [[getattr(p, f) for f in fields] for p in mine.partitions] == [
            [getattr(p, f) for f in fields] for p in theirs.partitions
        ]


def test_truncated_requests_are_refused() -> None:
    values = {
        "replica_id": -1,
        "max_wait": 500,
        "min_bytes": 1,
        "max_bytes": 1000,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": "t",
                "partitions": [
                    {
                        "partition": 0,
                        "fetch_offset": 5,
                        "log_start_offset": -1,
                        "current_leader_epoch": -1,
                        "partition_max_bytes": 100,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    entity = build(request_type(ApiKey.FETCH, 11), values)
    frame = encode_request(RequestHeader(ApiKey.FETCH, 11, 1, "c"), entity)[4:]
    _, pos = parse_request_header(frame)
    assert parse_fetch_request(frame, pos, 11).topics[0].partitions[0].fetch_offset == 5
    for cut in range(pos, len(frame) - 1, 7):
        with pytest.raises(FetchDecodeError):
            parse_fetch_request(frame[:cut], pos, 11)
