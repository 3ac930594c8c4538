"""The versions Kafka 4.1 serves: advertised, inferred by clients, and served on the wire
(topic ids in Fetch v13+ and Produce v13, the tiered-storage ListOffsets timestamps,
Metadata v13, batched FindCoordinator v6, DescribeCluster v2)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient
from kio.schema.errors import ErrorCode

from odradek.protocol.apikeys import ApiKey
from odradek.protocol.records import build_batch, decode_records
from odradek.testing import Broker

from .wire import WireClient

pytestmark = pytest.mark.timeout(60)

KAFKA_4_1_MAXIMA = {
    ApiKey.PRODUCE: 13,
    ApiKey.FETCH: 18,
    ApiKey.LIST_OFFSETS: 10,
    ApiKey.METADATA: 13,
    ApiKey.FIND_COORDINATOR: 6,
}


def unique(prefix: str) -> str:
    return f"{prefix}-{time.monotonic_ns()}"


@pytest.fixture
def topic(odradek_session_broker: Broker) -> str:
    name = unique("versions")
    admin = AdminClient({"bootstrap.servers": odradek_session_broker.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=10)
    return name


def topic_id(client: WireClient, name: str) -> uuid.UUID:
    response = client.request(
        ApiKey.METADATA,
        13,
        {
            "topics": [{"name": name, "topic_id": None}],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
    )
    assert response.error_code == ErrorCode.none  # v13's request-level error code
    [entry] = response.topics
    assert entry.error_code == ErrorCode.none
    return entry.topic_id


def produce_v13(client: WireClient, ident: uuid.UUID, values: list[bytes]) -> Any:
    batch = build_batch([(None, v, ()) for v in values], timestamp_ms=int(time.time() * 1000))
    response = client.request(
        ApiKey.PRODUCE,
        13,
        {
            "transactional_id": None,
            "acks": -1,
            "timeout": 10_000,
            "topic_data": [{"topic_id": ident, "partition_data": [{"index": 0, "records": batch}]}],
        },
    )
    [topic_response] = response.responses
    assert topic_response.topic_id == ident
    return topic_response.partition_responses[0]


def fetch_by_id(client: WireClient, version: int, ident: uuid.UUID) -> Any:
    response = client.request(
        ApiKey.FETCH,
        version,
        {
            "max_wait": 0,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic_id": ident,
                    "partitions": [
                        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        },
    )
    assert response.error_code == ErrorCode.none
    [topic_response] = response.responses
    assert topic_response.topic_id == ident
    return topic_response.partitions[0]


def test_advertised_maxima_are_kafka_4_1s(odradek_session_broker: Broker) -> None:
    with WireClient(odradek_session_broker.bootstrap) as client:
        response = client.request(
            ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}
        )
    maxima = {int(k.api_key): int(k.max_version) for k in response.api_keys}
    assert {key: maxima[key] for key in KAFKA_4_1_MAXIMA} == KAFKA_4_1_MAXIMA


def test_kafka_python_sees_a_kafka_4_1_broker(odradek_session_broker: Broker) -> None:
    client = KafkaAdminClient(bootstrap_servers=odradek_session_broker.bootstrap)
    try:
        assert client.get_broker_version_data(0).broker_version == (4, 1)
    finally:
        client.close()


@pytest.mark.parametrize("version", [13, 16, 18])
def test_fetch_by_topic_id(odradek_session_broker: Broker, topic: str, version: int) -> None:
    with WireClient(odradek_session_broker.bootstrap) as client:
        ident = topic_id(client, topic)
        assert produce_v13(client, ident, [b"a", b"b"]).error_code == ErrorCode.none
        partition = fetch_by_id(client, version, ident)
        assert partition.error_code == ErrorCode.none
        assert partition.high_watermark == 2
        assert [r.value for r in decode_records(bytes(partition.records))] == [b"a", b"b"]

        unknown = fetch_by_id(client, version, uuid.uuid4())
        assert unknown.error_code == ErrorCode.unknown_topic_id


def test_produce_v13_by_topic_id(odradek_session_broker: Broker, topic: str) -> None:
    with WireClient(odradek_session_broker.bootstrap) as client:
        ident = topic_id(client, topic)
        first = produce_v13(client, ident, [b"x"])
        second = produce_v13(client, ident, [b"y", b"z"])
        assert (first.error_code, first.base_offset) == (ErrorCode.none, 0)
        assert (second.error_code, second.base_offset) == (ErrorCode.none, 1)
        missing = produce_v13(client, uuid.uuid4(), [b"lost"])
        assert missing.error_code == ErrorCode.unknown_topic_id


def test_list_offsets_tiered_storage_timestamps(odradek_session_broker: Broker, topic: str) -> None:
    with WireClient(odradek_session_broker.bootstrap) as client:
        produce_v13(client, topic_id(client, topic), [b"1", b"2", b"3"])
        deleted = client.request(
            ApiKey.DELETE_RECORDS,
            2,
            {
                "topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": 2}]}],
                "timeout": 5000,
            },
        )
        assert deleted.topics[0].partitions[0].low_watermark == 2

        def offset(timestamp: int) -> tuple[int, int]:
            response = client.request(
                ApiKey.LIST_OFFSETS,
                10,
                {
                    "replica_id": -1,
                    "isolation_level": 0,
                    "timeout": 5000,
                    "topics": [
                        {
                            "name": topic,
                            "partitions": [{"partition_index": 0, "timestamp": timestamp}],
                        }
                    ],
                },
            )
            part = response.topics[0].partitions[0]
            assert part.error_code == ErrorCode.none
            return int(part.offset), int(part.leader_epoch)

        assert offset(-2)[0] == 2  # earliest
        assert offset(-4)[0] == 2  # earliest local: everything is local
        assert offset(-5) == (-1, -1)  # latest tiered: nothing is tiered
        assert offset(-1)[0] == 3


def test_find_coordinator_v6(odradek_session_broker: Broker) -> None:
    with WireClient(odradek_session_broker.bootstrap) as client:
        groups = client.request(
            ApiKey.FIND_COORDINATOR, 6, {"key_type": 0, "coordinator_keys": ["a", "b"]}
        )
        share = client.request(
            ApiKey.FIND_COORDINATOR, 6, {"key_type": 2, "coordinator_keys": ["s"]}
        )
    assert [(c.key, c.error_code, c.node_id) for c in groups.coordinators] == [
        ("a", ErrorCode.none, 0),
        ("b", ErrorCode.none, 0),
    ]
    assert share.coordinators[0].error_code == ErrorCode.invalid_request


def test_describe_cluster_v2(odradek_session_broker: Broker) -> None:
    with WireClient(odradek_session_broker.bootstrap) as client:
        response = client.request(
            ApiKey.DESCRIBE_CLUSTER,
            2,
            {
                "include_cluster_authorized_operations": False,
                "endpoint_type": 1,
                "include_fenced_brokers": True,
            },
        )
    [broker] = response.brokers
    assert response.error_code == ErrorCode.none
    assert (broker.broker_id, broker.port, broker.is_fenced) == (
        0,
        odradek_session_broker.port,
        False,
    )
