"""DescribeLogDirs' damage report (protocol/log_dirs.py): a tagged field each way, sent
only to a client that asks, so a client that does not know the tag never meets it."""

from __future__ import annotations

import io
from importlib import import_module

import pytest
from kio.serial import entity_reader, entity_writer

from odradek.protocol.apikeys import ApiKey
from odradek.protocol.codec import build, request_type, response_type

DAMAGE = {
    "segment": 0,
    "position": 5373,
    "end_position": 5614,
    "first_offset": 320,
    "end_offset": 325,
    "reason": "CRC32C mismatch",
}


def _response(damage: list[dict[str, object]] | tuple[()]) -> dict[str, object]:
    partition = {
        "partition_index": 0,
        "partition_size": 5775,
        "offset_lag": 0,
        "is_future_key": False,
        "damage": damage,
    }
    result = {
        "error_code": 0,
        "log_dir": "/data",
        "topics": [{"name": "orders", "partitions": [partition]}],
        "total_bytes": 10,
        "usable_bytes": 5,
    }
    return {"throttle_time": 0, "error_code": 0, "results": [result]}


def _encode(cls: type, values: dict[str, object]) -> bytes:
    out = io.BytesIO()
    entity_writer(cls)(out, build(cls, values))
    return out.getvalue()


@pytest.mark.parametrize("version", [2, 3, 4])
def test_the_damage_report_round_trips_and_is_absent_unless_present(version: int) -> None:
    cls = response_type(ApiKey.DESCRIBE_LOG_DIRS, version)
    data = _encode(cls, _response([DAMAGE]))
    decoded, size = entity_reader(cls)(data, 0)
    assert size == len(data)
    (damage,) = decoded.results[0].topics[0].partitions[0].damage
    assert (damage.first_offset, damage.end_offset, damage.reason) == (320, 325, "CRC32C mismatch")
    # Without damage (what a client that did not ask gets) the bytes are Kafka's own:
    # kio's plain schema, which refuses unknown tags, reads them.
    plain = import_module(f"kio.schema.describe_log_dirs.v{version}.response")
    clean = _encode(cls, _response(()))
    decoded, size = entity_reader(plain.DescribeLogDirsResponse)(clean, 0)
    assert size == len(clean)
    assert decoded.results[0].topics[0].partitions[0].partition_size == 5775


def test_the_request_asks_with_a_tag_and_v1_cannot_ask() -> None:
    cls = request_type(ApiKey.DESCRIBE_LOG_DIRS, 4)
    asked, _ = entity_reader(cls)(_encode(cls, {"topics": None, "include_damage": True}), 0)
    assert asked.include_damage is True
    plain = _encode(cls, {"topics": None})
    assert entity_reader(cls)(plain, 0)[0].include_damage is False
    kafka_request = import_module("kio.schema.describe_log_dirs.v4.request")
    assert entity_reader(kafka_request.DescribeLogDirsRequest)(plain, 0)[0].topics is None
    assert not hasattr(request_type(ApiKey.DESCRIBE_LOG_DIRS, 1), "include_damage")
