"""Admin client against Odradek: topics, partitions, cluster, configs."""

from __future__ import annotations

import pytest

from odradek.client import (
    AdminClient,
    AlterConfigOp,
    AlterConfigOpType,
    ConfigResource,
    NewTopic,
    Producer,
)
from odradek.client.errors import (
    InvalidPartitionsError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def admin(bootstrap: str):
    with AdminClient(bootstrap_servers=bootstrap, default_api_timeout_ms=20_000) as client:
        yield client


def test_create_describe_delete_topics(admin: AdminClient, topic_name: str) -> None:
    other = topic_name + "-b"
    fs = admin.create_topics([NewTopic(topic_name, 3, 1), NewTopic(other, 1, 1)])
    assert fs[topic_name].result() is None and fs[other].result() is None
    again = admin.create_topics([NewTopic(topic_name, 3, 1)])
    with pytest.raises(TopicAlreadyExistsError):
        again[topic_name].result()
    assert {topic_name, other} <= set(admin.list_topics())
    desc = admin.describe_topics([topic_name])[topic_name]
    assert [p.partition for p in desc.partitions] == [0, 1, 2]
    assert all(p.leader >= 0 and p.replicas for p in desc.partitions)
    assert all((p.log_start_offset, p.log_end_offset) == (0, 0) for p in desc.partitions)
    deleted = admin.delete_topics([topic_name, other])
    assert deleted[topic_name].result() is None and deleted[other].result() is None
    assert topic_name not in admin.list_topics()
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.delete_topics([topic_name])[topic_name].result()
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.describe_topics([topic_name])


def test_validate_only(admin: AdminClient, topic_name: str) -> None:
    admin.create_topics([NewTopic(topic_name, 2, 1)], validate_only=True)[topic_name].result()
    assert topic_name not in admin.list_topics()


def test_describe_topics_reports_offsets(
    admin: AdminClient, bootstrap: str, topic_name: str
) -> None:
    admin.create_topics([NewTopic(topic_name, 2, 1)])[topic_name].result()
    with Producer(bootstrap_servers=bootstrap) as p:
        for i in range(7):
            p.send(topic_name, value=b"x", partition=i % 2)
        p.flush(10)
    desc = admin.describe_topics([topic_name])[topic_name]
    assert [(p.log_start_offset, p.log_end_offset) for p in desc.partitions] == [(0, 4), (0, 3)]


def test_create_partitions(admin: AdminClient, topic_name: str) -> None:
    admin.create_topics([NewTopic(topic_name, 2, 1)])[topic_name].result()
    assert admin.create_partitions({topic_name: 5})[topic_name].result() is None
    assert len(admin.describe_topics([topic_name])[topic_name].partitions) == 5
    with pytest.raises(InvalidPartitionsError):
        admin.create_partitions({topic_name: 3})[topic_name].result()


def test_describe_cluster(admin: AdminClient, bootstrap: str) -> None:
    cluster = admin.describe_cluster()
    assert cluster.cluster_id
    assert len(cluster.brokers) == 1
    broker = cluster.brokers[0]
    assert f"{broker.host}:{broker.port}" == bootstrap
    assert cluster.controller_id == broker.node_id


def test_describe_cluster_passes_over_a_dead_broker_still_in_the_metadata(
    admin: AdminClient,
) -> None:
    """A killed broker stays in a cluster's metadata until its registration's lease ends:
    a connection it refuses is retried on another broker, not the call's failure."""
    import dataclasses

    from odradek.client.structs import BrokerMetadata
    from odradek.testing import free_port

    (broker,) = admin.describe_cluster().brokers
    client = admin._client
    dead = BrokerMetadata(99, "127.0.0.1", free_port(), None)
    client.cluster = dataclasses.replace(
        client.cluster, brokers={**client.cluster.brokers, 99: dead}
    )
    picks = iter([99])
    live = client.least_loaded_node
    client.least_loaded_node = lambda: next(picks, None) or live()  # the dead one first
    described = admin.describe_cluster(timeout_ms=10_000)
    assert described.brokers == [broker]


def test_topic_and_broker_configs(admin: AdminClient, topic_name: str) -> None:
    admin.create_topics([NewTopic(topic_name, 1, 1, config={"retention.ms": "3600000"})])[
        topic_name
    ].result()
    res = ConfigResource.topic(topic_name)
    entries = admin.describe_configs([res])[res]
    assert entries["retention.ms"].value == "3600000"
    assert not entries["retention.ms"].is_default
    assert entries["cleanup.policy"].is_default
    fs = admin.incremental_alter_configs(
        {res: [AlterConfigOp("retention.ms", "60000"), AlterConfigOp("cleanup.policy", "compact")]}
    )
    assert fs[res].result() is None
    entries = admin.describe_configs([res])[res]
    assert entries["retention.ms"].value == "60000"
    assert entries["cleanup.policy"].value == "compact"
    admin.alter_configs({res: [AlterConfigOp("retention.ms", op=AlterConfigOpType.DELETE)]})[
        res
    ].result()
    assert admin.describe_configs([res])[res]["retention.ms"].is_default

    node = admin.describe_cluster().brokers[0].node_id
    broker_res = ConfigResource.broker(node)
    broker_entries = admin.describe_configs([broker_res])[broker_res]
    assert broker_entries
    assert all(e.name == name for name, e in broker_entries.items())
