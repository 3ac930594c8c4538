"""DeleteRecords and DescribeLogDirs through confluent-kafka, kafka-python and Odradek's
own admin client; Fetch and ListOffsets honour the new log start offset."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as ConfluentTP
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.structs import TopicPartition as KafkaPythonTP
from kio.schema.errors import ErrorCode

from odradek.client import AdminClient as OdradekAdmin
from odradek.client import TopicPartition
from odradek.client.errors import (
    InvalidTopicError,
    OffsetOutOfRangeError,
    PolicyViolationError,
    UnknownTopicOrPartitionError,
)
from odradek.protocol.apikeys import ApiKey
from odradek.testing import Broker

from .wire import WireClient

pytestmark = pytest.mark.timeout(90)


def unique(prefix: str) -> str:
    return f"{prefix}-{time.monotonic_ns()}"


@pytest.fixture
def admin(odradek_session_broker: Broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": odradek_session_broker.bootstrap})


def topic_with_records(
    broker: Broker, admin: AdminClient, count: int, *, partitions: int = 1, **config: str
) -> str:
    topic = unique("records")
    admin.create_topics([NewTopic(topic, partitions, 1, config=dict(config))])[topic].result(10)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(count):
        producer.produce(topic, b"v%d" % i, partition=i % partitions)
        producer.poll(0)  # one batch per record: whole segments are not the point here
    assert producer.flush(10) == 0
    return topic


def earliest(broker: Broker, topic: str, partition: int = 0) -> int:
    body = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [
            {"name": topic, "partitions": [{"partition_index": partition, "timestamp": -2}]}
        ],
    }
    with WireClient(broker.bootstrap) as client:
        response = client.request(ApiKey.LIST_OFFSETS, 7, body)
    part = response.topics[0].partitions[0]
    assert part.error_code == ErrorCode.none
    return int(part.offset)


def fetch_error(broker: Broker, topic: str, offset: int) -> ErrorCode:
    body = {
        "replica_id": -1,
        "max_wait": 0,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 16}
                ],
            }
        ],
    }
    with WireClient(broker.bootstrap) as client:
        response = client.request(ApiKey.FETCH, 4, body)
    return response.responses[0].partitions[0].error_code


def test_confluent_delete_records_moves_the_log_start(
    odradek_session_broker: Broker, admin: AdminClient
) -> None:
    topic = topic_with_records(odradek_session_broker, admin, 10)
    futures = admin.delete_records([ConfluentTP(topic, 0, 4)])
    [(_, future)] = futures.items()
    assert future.result(timeout=10).low_watermark == 4

    assert earliest(odradek_session_broker, topic) == 4
    assert fetch_error(odradek_session_broker, topic, 0) == ErrorCode.offset_out_of_range
    assert fetch_error(odradek_session_broker, topic, 4) == ErrorCode.none

    consumer = Consumer(
        {
            "bootstrap.servers": odradek_session_broker.bootstrap,
            "group.id": unique("after-delete"),
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.subscribe([topic])
        seen: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(seen) < 6 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen.append(message.value())
    finally:
        consumer.close()
    assert seen == [b"v%d" % i for i in range(4, 10)]

    # Past the end: OFFSET_OUT_OF_RANGE; -1 deletes everything (the high watermark).
    with pytest.raises(Exception, match="OFFSET_OUT_OF_RANGE"):
        admin.delete_records([ConfluentTP(topic, 0, 11)])[ConfluentTP(topic, 0, 11)].result(10)
    everything = ConfluentTP(topic, 0, -1)
    assert admin.delete_records([everything])[everything].result(10).low_watermark == 10
    assert earliest(odradek_session_broker, topic) == 10


def test_kafka_python_delete_records_and_describe_log_dirs(
    odradek_session_broker: Broker, admin: AdminClient
) -> None:
    topic = topic_with_records(odradek_session_broker, admin, 6, partitions=2)
    client = KafkaAdminClient(bootstrap_servers=odradek_session_broker.bootstrap)
    try:
        deleted = client.delete_records({KafkaPythonTP(topic, 1): 2})
        assert deleted[KafkaPythonTP(topic, 1)]["low_watermark"] == 2
        [broker] = client.describe_log_dirs()
        [log_dir] = broker["log_dirs"]
    finally:
        client.close()
    assert log_dir["error_code"] == 0 and log_dir["log_dir"]
    assert log_dir["total_bytes"] >= log_dir["usable_bytes"] > 0
    [entry] = [t for t in log_dir["topics"] if t["name"] == topic]
    sizes = {p["partition_index"]: p["partition_size"] for p in entry["partitions"]}
    assert sizes.keys() == {0, 1} and all(size > 0 for size in sizes.values())


def test_odradek_admin_delete_records_and_log_dirs(
    odradek_session_broker: Broker, admin: AdminClient
) -> None:
    topic = topic_with_records(odradek_session_broker, admin, 5)
    compacted = topic_with_records(
        odradek_session_broker, admin, 1, **{"cleanup.policy": "compact"}
    )
    with OdradekAdmin(bootstrap_servers=odradek_session_broker.bootstrap) as client:
        results = client.delete_records(
            {
                TopicPartition(topic, 0): 3,
                TopicPartition(compacted, 0): 1,
                TopicPartition("__consumer_offsets", 0): 0,
                TopicPartition(topic, 7): 0,
            }
        )
        assert results[TopicPartition(topic, 0)].result() == 3
        with pytest.raises(PolicyViolationError):
            results[TopicPartition(compacted, 0)].result()
        with pytest.raises(InvalidTopicError):
            results[TopicPartition("__consumer_offsets", 0)].result()
        with pytest.raises(UnknownTopicOrPartitionError):
            results[TopicPartition(topic, 7)].result()
        with pytest.raises(OffsetOutOfRangeError):
            client.delete_records({TopicPartition(topic, 0): 99})[TopicPartition(topic, 0)].result()

        [(node, dirs)] = client.describe_log_dirs([topic]).items()
        [description] = dirs.values()
    assert node == 0
    assert set(description.replicas) == {TopicPartition(topic, 0)}
    info = description.replicas[TopicPartition(topic, 0)]
    assert info.size > 0 and info.offset_lag == 0 and not info.is_future
    assert description.total_bytes is not None and description.usable_bytes is not None
