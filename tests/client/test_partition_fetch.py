"""The public fetch API (``PartitionFetcher``): one partition from its leader at chosen
offsets, pipelined, with the client's error handling (what the Spark source uses)."""

from __future__ import annotations

import pytest

from odradek.client import Producer
from odradek.client.cluster import KafkaClient
from odradek.client.config import ConsumerConfig
from odradek.client.errors import OffsetOutOfRangeError
from odradek.client.partition_fetch import PartitionFetcher
from odradek.client.structs import TopicPartition
from odradek.protocol.records import decode_records

from .conftest import create_topic

pytestmark = pytest.mark.timeout(60)


def test_partition_fetcher_reads_pipelined_and_raises_out_of_range(
    bootstrap: str, topic_name: str
) -> None:
    create_topic(bootstrap, topic_name, 1)
    with Producer(bootstrap_servers=bootstrap) as producer:
        for i in range(5):
            producer.send(topic_name, value=b"v%d" % i, partition=0)
        producer.flush()
    config = ConsumerConfig.from_settings(bootstrap_servers=bootstrap, retry_backoff_ms=10)
    client = KafkaClient(config)
    try:
        fetcher = PartitionFetcher(client, config, TopicPartition(topic_name, 0), max_wait_ms=10)
        answer = fetcher.receive(fetcher.send(0))
        assert answer is not None and answer.log_end == 5
        assert [r.value for r in decode_records(answer.records)] == [b"v%d" % i for i in range(5)]
        # Two fetches in flight at once; each answer is its own.
        first, second = fetcher.send(3), fetcher.send(5)
        later = fetcher.receive(second)
        earlier = fetcher.receive(first)
        assert later is not None and decode_records(later.records) == []
        assert earlier is not None
        assert [r.offset for r in decode_records(earlier.records)][-1] == 4
        with pytest.raises(OffsetOutOfRangeError):
            fetcher.receive(fetcher.send(99))
        # No leader (a partition the topic lacks): nothing sent; receive backs off.
        missing = PartitionFetcher(client, config, TopicPartition(topic_name, 7))
        assert missing.send(0) is None
        assert missing.receive(None) is None
    finally:
        client.close()
    assert client.closed
