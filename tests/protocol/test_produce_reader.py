"""The broker's hand-written Produce reader reads what kio reads, every version."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.broker.apis.produce import read_request
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.codec import (
    DecodeError,
    RequestHeader,
    build,
    decode_request_body,
    encode_request,
    parse_request_header,
    request_type,
)
from odradek.protocol.produce import (
    FIRST_TOPIC_ID_VERSION,
    MIN_VERSION,
    READ_MAX_VERSION,
)

partitions = st.lists(
    st.tuples(st.integers(-(2**31), 2**31 - 1), st.none() | st.binary(max_size=300)), max_size=4
)
topics = st.lists(st.tuples(st.text(min_size=1, max_size=20), st.uuids(), partitions), max_size=4)


def request_bytes(version: int, tid: str | None, acks: int, timeout: int, data: list) -> bytes:
    by_id = version >= FIRST_TOPIC_ID_VERSION
    entity = build(
        request_type(ApiKey.PRODUCE, version),
        {
            "transactional_id": tid,
            "acks": acks,
            "timeout": timeout,
            "topic_data": [
                {
                    **({"topic_id": topic_id} if by_id else {"name": name}),
                    "partition_data": [{"index": i, "records": r} for i, r in parts],
                }
                for name, topic_id, parts in data
            ],
        },
    )
    return encode_request(RequestHeader(ApiKey.PRODUCE, version, 7, "client"), entity)[4:]


def both_readers(payload: bytes) -> tuple[object, object]:
    header, pos = parse_request_header(payload)
    return read_request(header, payload, pos), decode_request_body(header, payload, pos)


@pytest.mark.parametrize("version", range(MIN_VERSION, READ_MAX_VERSION + 1))
@settings(max_examples=40, deadline=None)
@given(
    tid=st.none() | st.text(max_size=10),
    acks=st.integers(-(2**15), 2**15 - 1),
    timeout=st.integers(0, 2**31 - 1),
    data=topics,
)
def test_reads_what_kio_reads(version: int, tid, acks: int, timeout: int, data) -> None:
    ours, kio = both_readers(request_bytes(version, tid, acks, timeout, data))
    assert ours.transactional_id == kio.transactional_id
    assert ours.acks == kio.acks
    assert ours.timeout == round(kio.timeout.total_seconds() * 1000)
    assert len(ours.topic_data) == len(kio.topic_data)
    for mine, theirs in zip(ours.topic_data, kio.topic_data, strict=True):
        if version >= FIRST_TOPIC_ID_VERSION:
            assert mine.topic_id == theirs.topic_id
        else:
            assert mine.name == theirs.name and mine.topic_id is None
        assert [(p.index, p.records) for p in mine.partition_data] == [
            (p.index, p.records) for p in theirs.partition_data
        ]


@pytest.mark.parametrize("version", [8, 12, 13])
def test_records_are_read_only_views_of_the_request(version: int) -> None:
    large = bytes(range(256)) * 4200  # over 1 MiB
    data = [("t", uuid.uuid4(), [(0, large), (1, b"small")])]
    payload = request_bytes(version, None, -1, 30_000, data)
    ours, _ = both_readers(payload)
    for part, expected in zip(ours.topic_data[0].partition_data, (large, b"small"), strict=True):
        assert isinstance(part.records, memoryview) and part.records.readonly
        assert part.records.obj is payload  # not a copy
        assert part.records == expected


@pytest.mark.parametrize("version", [3, 9, 13])
@settings(max_examples=20, deadline=None)
@given(tid=st.none() | st.text(max_size=10), data=topics)
def test_any_buffer_is_read_alike(version: int, tid, data) -> None:
    """bytes, a bytearray, a memoryview (of a larger buffer, as a connection's reused
    receive buffer would hand over): the same request."""
    payload = request_bytes(version, tid, 1, 1000, data)
    header, pos = parse_request_header(payload)
    expected = read_request(header, payload, pos)
    padded = bytearray(b"\xee" * 3 + payload + b"\xee" * 5)
    for other in (bytearray(payload), memoryview(padded)[3 : 3 + len(payload)]):
        assert parse_request_header(other) == (header, pos)
        assert read_request(header, other, pos) == expected


@pytest.mark.parametrize("version", [3, 9, 13])
def test_a_cut_request_is_a_decode_error(version: int) -> None:
    payload = request_bytes(
        version, "txn", 1, 1000, [("topic", uuid.uuid4(), [(0, b"records"), (1, None)])]
    )
    header, pos = parse_request_header(payload)
    for end in range(pos, len(payload)):
        with pytest.raises(DecodeError):
            read_request(header, payload[:end], pos)


def test_a_null_topic_array_is_a_decode_error() -> None:
    payload = request_bytes(8, None, 1, 1000, [])
    header, pos = parse_request_header(payload)
    broken = payload[: len(payload) - 4] + b"\xff\xff\xff\xff"  # topic_data: null
    with pytest.raises(DecodeError, match="null topic_data"):
        read_request(header, broken, pos)


@pytest.mark.parametrize("version", [3, 9, 13])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_corrupted_requests_fail_only_as_decode_errors(version: int, data) -> None:
    """Any byte changed, dropped or added: read, or refused with DecodeError (which
    closes only that connection), never another exception."""
    payload = bytearray(
        request_bytes(
            version, "txn", 1, 1000, [("topic", uuid.uuid4(), [(0, b"records"), (1, None)])]
        )
    )
    header, pos = parse_request_header(bytes(payload))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(pos, len(payload) - 1))
        change = data.draw(st.sampled_from(["set", "drop", "insert"]))
        if change == "set":
            payload[at] = data.draw(st.integers(0, 255))
        elif change == "drop":
            del payload[at]
        else:
            payload.insert(at, data.draw(st.integers(0, 255)))
    try:
        request = read_request(header, payload, pos)
    except DecodeError:
        return  # refused: the one allowed failure
    for topic in request.topic_data:  # read: every records field a view within the request
        for part in topic.partition_data:
            assert part.records is None or (
                isinstance(part.records, memoryview) and part.records.obj is payload
            )
