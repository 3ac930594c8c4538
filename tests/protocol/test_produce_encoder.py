"""The hand-written Produce request encoder writes exactly what kio writes, every version."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol.apikeys import ApiKey
from odradek.protocol.codec import (
    RequestHeader,
    build,
    decode_request_body,
    encode_request,
    parse_request_header,
    request_type,
)
from odradek.protocol.produce import MAX_VERSION, MIN_VERSION, encode_produce_request

topics = st.lists(
    st.tuples(
        st.text(min_size=1, max_size=20),
        st.lists(st.tuples(st.integers(0, 2**31 - 1), st.binary(max_size=300)), max_size=4),
    ),
    max_size=4,
)


@pytest.mark.parametrize("version", range(MIN_VERSION, MAX_VERSION + 1))
@settings(max_examples=40, deadline=None)
@given(
    tid=st.none() | st.text(max_size=10),
    acks=st.sampled_from([-1, 0, 1]),
    timeout=st.integers(0, 2**31 - 1),
    data=topics,
)
def test_same_bytes_as_kio(version: int, tid, acks: int, timeout: int, data) -> None:
    header = RequestHeader(ApiKey.PRODUCE, version, 7, "client")
    ours = encode_request(header, encode_produce_request(version, tid, acks, timeout, data))
    entity = build(
        request_type(ApiKey.PRODUCE, version),
        {
            "transactional_id": tid,
            "acks": acks,
            "timeout": timeout,
            "topic_data": [
                {"name": name, "partition_data": [{"index": i, "records": r} for i, r in parts]}
                for name, parts in data
            ],
        },
    )
    assert ours == encode_request(header, entity)
    # And the broker's reader takes it back.
    parsed, pos = parse_request_header(ours[4:])
    assert decode_request_body(parsed, ours[4:], pos) == entity


def test_versions_outside_the_range_are_refused() -> None:
    with pytest.raises(ValueError, match="v13"):
        encode_produce_request(13, None, 1, 1000, [])
