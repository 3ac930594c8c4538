"""The sink's ``deliveryMode=transactional`` in real Spark queries: each micro-batch is one
Kafka transaction (read_committed readers see it whole or not at all), a failed batch is
never visible, and a restarted query (same checkpoint, so the same transactional id)
writes every input record exactly once. Read back with a read_committed confluent-kafka
consumer."""

from __future__ import annotations

import time
import uuid
from collections import Counter

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CTP

from .conftest import consume_all, create_topic, produce

pytestmark = pytest.mark.timeout(300)


def read_committed(bootstrap: str, topic: str, partitions: int) -> Counter:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([CTP(topic, p, 0) for p in range(partitions)])
    got: Counter = Counter()
    quiet = time.monotonic()
    deadline = quiet + 30
    try:
        while time.monotonic() < deadline and time.monotonic() - quiet < 2.0:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got[msg.value()] += 1
                quiet = time.monotonic()
    finally:
        consumer.close()
    return got


def test_stream_in_transactions_fails_mid_batch_then_restarts_exactly_once(
    spark, bootstrap, topic, tmp_path
):
    create_topic(bootstrap, topic, 3)
    out = create_topic(bootstrap, topic + "-out", 2)
    produce(bootstrap, topic, 900, partitions=3)
    ck = str(tmp_path / "ck")

    def start(fail: bool):
        df = (
            spark.readStream.format("odradek")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", 300)
            .load()
        )
        value = (
            "if(partition = 2 and offset = 250, raise_error('injected failure'), value)"
            if fail
            else "value"
        )
        return (
            df.selectExpr("key", f"{value} as value")
            .writeStream.format("odradek")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", out)
            .option("deliveryMode", "transactional")
            .option("checkpointLocation", ck)
            .trigger(availableNow=True)
            .start()
        )

    q = start(fail=True)
    with pytest.raises(Exception, match="injected failure"):
        q.awaitTermination(200)
    # Batches 0-1 committed; batch 2 failed in a task, so its rows were never published.
    assert sum(read_committed(bootstrap, out, 2).values()) == 600
    q = start(fail=False)
    assert q.awaitTermination(200)
    assert read_committed(bootstrap, out, 2) == Counter(f"value-{i}".encode() for i in range(900))
    # Every record in the topic is committed: no aborted transaction was left behind.
    assert len(consume_all(bootstrap, out)) == 900
