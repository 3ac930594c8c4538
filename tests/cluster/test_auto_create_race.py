"""A Metadata request that may auto-create a topic, answered while the broker is still
opening that topic (it is in etcd, the broker's watch has brought it, its partition
logs are being created): the answer must be retriable, as Kafka's
LEADER_NOT_AVAILABLE for a topic being created, never TOPIC_ALREADY_EXISTS, which
librdkafka takes as final and fails every queued record with (seen with
confluent-kafka producing right after CreateTopics returned from another broker).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_harness import running_cluster

from odradek.cluster.metadata import EtcdMetadataStore
from odradek.devcluster.launcher import LocalCluster, run_coroutine
from odradek.protocol.apikeys import ApiKey
from odradek.replication.model import TopicAssignment

from ..broker.wire import WireClient

# Many partitions make opening the topic take a while on each broker: the window
# in which the race is asked for (etcd allows 128 operations in one transaction;
# create_topic writes two keys besides one per partition).
PARTITIONS = 100
RETRIABLE = {0, 3, 5}  # none, UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE
ANSWERED_TIMEOUT_S = 30.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with running_cluster(tmp_path / "cluster") as local:
        yield local


def create_in_etcd(cluster: LocalCluster, name: str) -> None:
    brokers = cluster.broker_ids
    replicas = {
        p: tuple(brokers[(p + i) % len(brokers)] for i in range(len(brokers)))
        for p in range(PARTITIONS)
    }

    async def create() -> None:
        async with EtcdMetadataStore(
            *cluster.etcd_endpoint(), cluster_name=cluster.cluster_name
        ) as store:
            await store.create_topic(TopicAssignment(name, uuid.uuid4(), replicas))

    run_coroutine(create)


def test_metadata_auto_create_of_a_topic_being_opened_is_retriable(cluster: LocalCluster) -> None:
    name = f"opening-{uuid.uuid4().hex[:8]}"
    clients = [WireClient(cluster.broker_address(b)) for b in cluster.broker_ids]
    request = {
        "topics": [{"topic_id": uuid.UUID(int=0), "name": name}],
        "allow_auto_topic_creation": True,
        "include_topic_authorized_operations": False,
    }
    codes: dict[int, list[int]] = {b: [] for b in cluster.broker_ids}
    failures: list[BaseException] = []
    start = threading.Event()

    def ask(broker_id: int, client: WireClient) -> None:
        start.wait()
        deadline = time.monotonic() + ANSWERED_TIMEOUT_S
        try:
            while time.monotonic() < deadline:
                response = client.request(ApiKey.METADATA, 12, request)
                [topic] = response.topics
                codes[broker_id].append(topic.error_code)
                if topic.error_code == 0 and len(topic.partitions) == PARTITIONS:
                    return
        except BaseException as exc:
            failures.append(exc)

    threads = [
        threading.Thread(target=ask, args=(b, c), daemon=True)
        for b, c in zip(cluster.broker_ids, clients, strict=True)
    ]
    try:
        for thread in threads:
            thread.start()
        create_in_etcd(cluster, name)
        start.set()
        for thread in threads:
            thread.join(ANSWERED_TIMEOUT_S + 10)
    finally:
        for client in clients:
            client.close()
    assert not failures, f"a Metadata request failed: {failures[0]!r}"
    for broker_id, seen in codes.items():
        assert seen and seen[-1] == 0, f"broker {broker_id} never described {name}: {seen[-10:]}"
        assert set(seen) <= RETRIABLE, (
            f"broker {broker_id} answered error codes {sorted(set(seen))}"
        )
