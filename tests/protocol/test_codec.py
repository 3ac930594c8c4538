"""Every (API, version) Odradek advertises round-trips through the codec."""

import datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.static.primitive import Records, i64Timedelta

from odradek.broker import apis  # noqa: F401  (fills the registry)
from odradek.broker.registry import REGISTRY
from odradek.protocol.codec import (
    DecodeError,
    RequestHeader,
    decode_request_body,
    decode_response,
    encode_request,
    encode_response,
    parse_request_header,
    request_type,
    response_type,
)

# kio leaves record-batch bytes opaque; any bytes do for a codec round trip.
st.register_type_strategy(Records, st.binary(max_size=64).map(Records))
# Durations near timedelta.max survive kio's writer but not its reader; real clients send
# -1 or days-long retention values, so keep to a range any timedelta can hold.
st.register_type_strategy(
    i64Timedelta,
    st.integers(-(2**40), 2**40).map(lambda ms: datetime.timedelta(milliseconds=ms)),
)

SERVED = sorted(
    (int(spec.key), version)
    for spec in REGISTRY.values()
    for version in range(spec.parse_from, spec.max_version + 1)
)


@pytest.mark.parametrize(("api_key", "version"), SERVED)
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_request_round_trip(api_key: int, version: int, data: st.DataObject) -> None:
    cls = request_type(api_key, version)
    body = data.draw(st.from_type(cls))
    header = RequestHeader(api_key, version, data.draw(st.integers(0, 2**31 - 1)), "client-1")
    wire = encode_request(header, body)
    parsed, pos = parse_request_header(wire[4:])
    assert parsed == header
    assert decode_request_body(parsed, wire[4:], pos) == body


@pytest.mark.parametrize(("api_key", "version"), SERVED)
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_response_round_trip(api_key: int, version: int, data: st.DataObject) -> None:
    body = data.draw(st.from_type(response_type(api_key, version)))
    wire = encode_response(api_key, version, 42, body)
    correlation_id, decoded = decode_response(api_key, version, wire[4:])
    assert (correlation_id, decoded) == (42, body)


@given(st.binary(max_size=64))
def test_garbage_never_escapes_as_other_errors(garbage: bytes) -> None:
    try:
        header, pos = parse_request_header(garbage)
        spec = REGISTRY.get(header.api_key)
        if spec is None or not spec.serves(header.api_version):
            return
        decode_request_body(header, garbage, pos)
    except DecodeError:
        pass
