"""__consumer_offsets is compacted, so replay time stays bounded, and state survives it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.coordinator import partition_for
from odradek.testing import BrokerProcess

pytestmark = pytest.mark.embedded

GROUP = "compaction-group"
TOPIC = "compaction-topic"
PARTITIONS = 4
COMMITS = 300


def directory_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.glob("*.log"))


def committed(bootstrap: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
    try:
        wanted = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        return {tp.partition: tp.offset for tp in consumer.committed(wanted, timeout=10)}
    finally:
        consumer.close()


def test_offsets_topic_compacts_and_replays_latest_commits(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = BrokerProcess(
        data,
        settings={
            "offsets.topic.segment.bytes": "2048",  # many small segments to compact
            "log.cleaner.backoff.ms": "200",
            "log.cleaner.min.cleanable.ratio": "0.01",
        },
    ).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(timeout=10)
        consumer = Consumer(
            {"bootstrap.servers": broker.bootstrap, "group.id": GROUP, "enable.auto.commit": False}
        )
        for i in range(COMMITS):  # a simple group: commits without joining
            offsets = [TopicPartition(TOPIC, p, i * 10 + p) for p in range(PARTITIONS)]
            consumer.commit(offsets=offsets, asynchronous=False)
        consumer.close()
        expected = {p: (COMMITS - 1) * 10 + p for p in range(PARTITIONS)}
        assert committed(broker.bootstrap) == expected

        offsets_dir = data / f"__consumer_offsets-{partition_for(GROUP, 50)}"
        written = COMMITS * PARTITIONS
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            # Compacted: far fewer bytes than one record per commit would need.
            if directory_bytes(offsets_dir) < written * 20:
                break
            time.sleep(0.2)
        assert directory_bytes(offsets_dir) < written * 20, "the cleaner never compacted"

        broker.restart(kill=True)
        assert committed(broker.bootstrap) == expected
        broker.restart()
        assert committed(broker.bootstrap) == expected
    finally:
        broker.stop()
