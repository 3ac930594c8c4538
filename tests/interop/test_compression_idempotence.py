"""Compressed batches (every codec, from confluent-kafka) and idempotent producers.

Compressed batches must come back exactly as sent, to librdkafka and to
kafka-python (which decompresses in Python, so a second decoder checks them).
Idempotent producers (kafka-python 3.x by default, confluent-kafka with
enable.idempotence) must leave each record exactly once, at its acknowledged offset.
"""

from __future__ import annotations

import time

import pytest
from interop_helpers import (
    Rec,
    assert_partitions_exact,
    by_partition,
    make_records,
    norm_headers,
    read_with_kafka_python,
    unique_topic,
)

PARTITIONS = 2
pytestmark = pytest.mark.timeout(120)


def _create_topic(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=15)[topic].result(30)


def _confluent_produce(bootstrap: str, topic: str, records: list[Rec], **config) -> list:
    from confluent_kafka import Producer

    acks: list = [None] * len(records)

    def on_delivery(index: int):
        def cb(err, msg):
            acks[index] = err if err is not None else (msg.partition(), msg.offset())

        return cb

    producer = Producer({"bootstrap.servers": bootstrap, **config})
    for i, rec in enumerate(records):
        for _ in range(1000):
            try:
                producer.produce(
                    topic,
                    key=rec.key,
                    value=rec.value,
                    headers=list(rec.headers),
                    partition=rec.partition,
                    on_delivery=on_delivery(i),
                )
                break
            except BufferError:
                producer.poll(0.05)
        else:
            raise AssertionError("producer queue stayed full")
    assert producer.flush(60) == 0, "undelivered records"
    return acks


def _confluent_read(bootstrap: str, topic: str, count: int) -> dict[int, list[tuple[int, Rec]]]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_topic("unused-group"),
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: dict[int, list[tuple[int, Rec]]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 45
    try:
        while sum(map(len, got.values())) < count and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                assert msg.error() is None, msg.error()
                p = msg.partition()
                got[p].append(
                    (msg.offset(), Rec(p, msg.key(), msg.value(), norm_headers(msg.headers())))
                )
        # Anything past the expected count is a duplicate: give it a moment to show up.
        for msg in consumer.consume(num_messages=1000, timeout=1.0):
            if msg.error() is None:
                p = msg.partition()
                got[p].append(
                    (msg.offset(), Rec(p, msg.key(), msg.value(), norm_headers(msg.headers())))
                )
    finally:
        consumer.close()
    return got


def _expected_acks(records: list[Rec]) -> list[tuple[int, int]]:
    next_offset: dict[int, int] = {}
    out = []
    for rec in records:
        offset = next_offset.get(rec.partition, 0)
        out.append((rec.partition, offset))
        next_offset[rec.partition] = offset + 1
    return out


def _compressible(records: list[Rec]) -> list[Rec]:
    """Values that shrink a lot (so batches really are compressed), nulls kept."""
    out = []
    for i, r in enumerate(records):
        value = r.value
        if value:
            value = value + b"the quick brown fox jumps over the lazy dog %d " % (i % 10) * 8
        out.append(Rec(r.partition, r.key, value, r.headers))
    return out


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_confluent_compression_roundtrip(bootstrap: str, codec: str) -> None:
    topic = unique_topic(f"ck-{codec}")
    _create_topic(bootstrap, topic)
    records = _compressible(make_records(3000, PARTITIONS, seed=7))
    acks = _confluent_produce(
        bootstrap, topic, records, **{"compression.type": codec, "linger.ms": 20, "acks": "all"}
    )
    assert acks == _expected_acks(records)
    expected = by_partition(records, PARTITIONS)
    assert_partitions_exact(expected, _confluent_read(bootstrap, topic, len(records)))
    assert_partitions_exact(
        expected, read_with_kafka_python(bootstrap, topic, PARTITIONS, len(records), timeout_s=45)
    )


def test_kafka_python_idempotent_producer(bootstrap: str) -> None:
    from kafka import KafkaProducer

    topic = unique_topic("kp3-idempotent")
    _create_topic(bootstrap, topic)
    records = make_records(3000, PARTITIONS, seed=11)
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)  # defaults otherwise
    try:
        assert producer.config["enable_idempotence"] is True, "kafka-python 3.x default changed"
        futures = [
            producer.send(
                topic,
                key=r.key,
                value=r.value,
                headers=list(r.headers),
                partition=r.partition,
            )
            for r in records
        ]
        producer.flush(timeout=60)
        acks = [(m.partition, m.offset) for m in (f.get(timeout=30) for f in futures)]
        # The producer really obtained a producer id (InitProducerId), so its batches
        # carried sequence numbers rather than silently falling back.
        manager = getattr(producer, "_transaction_manager", None)
        if manager is not None and hasattr(manager, "has_producer_id"):
            assert manager.has_producer_id(), "idempotent producer got no producer id"
    finally:
        producer.close(timeout=10)
    assert acks == _expected_acks(records)
    got = _confluent_read(bootstrap, topic, len(records))
    assert_partitions_exact(by_partition(records, PARTITIONS), got)


def test_confluent_idempotent_producer(bootstrap: str) -> None:
    topic = unique_topic("ck-idempotent")
    _create_topic(bootstrap, topic)
    records = make_records(3000, PARTITIONS, seed=13)
    acks = _confluent_produce(
        bootstrap,
        topic,
        records,
        **{
            "enable.idempotence": True,
            "linger.ms": 5,
            "max.in.flight.requests.per.connection": 5,
        },
    )
    assert acks == _expected_acks(records)
    got = _confluent_read(bootstrap, topic, len(records))
    assert_partitions_exact(by_partition(records, PARTITIONS), got)
