"""Many partitions under a small descriptor limit (issue 10, item 8).

Before: every segment of every partition held an open file for the broker's
life, so a broker with more partitions than its RLIMIT_NOFILE could not create,
load or serve them. Now idle segments hold no file and at most
``log.max.open.files`` stay open, whatever the partition count.
"""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from odradek.testing import BrokerProcess

from ..broker.wire import WireClient
from .log_helpers import create_topic, open_files

DESCRIPTOR_LIMIT = 512
OPEN_FILE_BUDGET = 64
TOPICS = 12
PARTITIONS_PER_TOPIC = 100  # 1,200 partitions: far more than the descriptor limit


class LimitedBroker(BrokerProcess):
    """A broker whose process may hold at most DESCRIPTOR_LIMIT descriptors."""

    def command(self) -> list[str]:
        cmd = super().command()
        assert cmd[1:3] == ["-m", "odradek"]
        limit = f"({DESCRIPTOR_LIMIT}, {DESCRIPTOR_LIMIT})"
        prelude = (
            f"import resource, runpy; resource.setrlimit(resource.RLIMIT_NOFILE, {limit}); "
            "runpy.run_module('odradek', run_name='__main__')"
        )
        return [sys.executable, "-c", prelude, *cmd[3:]]


@pytest.mark.embedded
def test_more_partitions_than_descriptors_are_created_restarted_and_served(
    tmp_path: Path,
) -> None:
    settings = {"log.max.open.files": str(OPEN_FILE_BUDGET), "auto.create.topics.enable": "false"}
    broker = LimitedBroker(tmp_path / "data", settings=settings).start()
    try:
        topics = [f"many-{uuid.uuid4().hex[:6]}-{i}" for i in range(TOPICS)]
        with WireClient(broker.bootstrap, timeout_s=120) as client:
            for topic in topics:
                create_topic(client, topic, PARTITIONS_PER_TOPIC)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20})
        for topic in topics:
            for index in range(PARTITIONS_PER_TOPIC):
                producer.produce(topic, b"%s/%d" % (topic.encode(), index), partition=index)
        assert producer.flush(120) == 0
        assert broker.pid is not None
        assert open_files(broker.pid) < DESCRIPTOR_LIMIT // 2

        broker.stop()
        broker.start()

        consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": "unused",
                "enable.auto.commit": False,
            }
        )
        consumer.assign(
            [TopicPartition(t, i, 0) for t in topics for i in range(PARTITIONS_PER_TOPIC)]
        )
        want = {b"%s/%d" % (t.encode(), i) for t in topics for i in range(PARTITIONS_PER_TOPIC)}
        got: set[bytes] = set()
        deadline = time.monotonic() + 120
        try:
            while got != want and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is None:
                    continue
                assert message.error() is None, message.error()
                got.add(bytes(message.value() or b""))
        finally:
            consumer.close()
        assert got == want
        assert open_files(broker.pid) < DESCRIPTOR_LIMIT // 2
        assert "Too many open files" not in broker.log_path.read_text()
    finally:
        broker.kill()
