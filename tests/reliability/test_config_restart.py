"""Config changes and admin operations across broker restarts: no config a client can send,
and no value found in the data directory, stops the next start; deleted records stay
deleted; internal topics keep the partition count group routing depends on."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as ConfluentTP
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)

from odradek.broker.topic_store import JOURNAL_FILE, LEGACY_FILE, SNAPSHOT_FILE, TopicStore
from odradek.testing import BrokerProcess

pytestmark = [pytest.mark.embedded, pytest.mark.timeout(120)]


def admin_for(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def set_config(admin: AdminClient, topic: str, key: str, value: str) -> None:
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)],
    )
    admin.incremental_alter_configs([resource])[resource].result(timeout=10)


def describe(admin: AdminClient, topic: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return admin.describe_configs([resource])[resource].result(timeout=10)


def produce(broker: BrokerProcess, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for value in values:
        producer.produce(topic, value)
        producer.poll(0)
    assert producer.flush(10) == 0


def read_all(broker: BrokerProcess, topic: str, expected: int, group: str) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
        }
    )
    seen: list[bytes] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(seen) < expected and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen.append(message.value())
    finally:
        consumer.close()
    return seen


@pytest.mark.parametrize(
    ("topic", "key", "value"),
    [
        ("orders", "segment.bytes", "0"),
        ("orders", "segment.ms", "0"),
        ("orders", "min.cleanable.dirty.ratio", "2"),
        ("__consumer_offsets", "min.cleanable.dirty.ratio", "2"),
        ("__consumer_offsets", "segment.ms", "0"),
    ],
)
def test_a_refused_config_change_leaves_the_next_start_alone(
    odradek_broker: BrokerProcess, topic: str, key: str, value: str
) -> None:
    admin = admin_for(odradek_broker)
    if topic == "orders":
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=10)
        produce(odradek_broker, topic, [b"kept"])
    with pytest.raises(Exception, match="INVALID_CONFIG"):
        set_config(admin, topic, key, value)

    odradek_broker.restart()
    admin = admin_for(odradek_broker)
    assert describe(admin, topic)[key].is_default
    if topic == "orders":
        assert read_all(odradek_broker, topic, 1, "after-restart") == [b"kept"]


def test_a_bad_stored_value_is_reported_and_its_default_used(
    odradek_broker: BrokerProcess,
) -> None:
    admin = admin_for(odradek_broker)
    admin.create_topics([NewTopic("orders", 1, 1, config={"retention.ms": "3600000"})])[
        "orders"
    ].result(timeout=10)
    produce(odradek_broker, "orders", [b"a", b"b"])
    odradek_broker.stop()

    # As an older Odradek could have left them: its topics.json (upgraded at start-up
    # into the metadata journal's snapshot) holding values today's checks refuse.
    data_dir = odradek_broker.data_dir
    store = TopicStore(data_dir)
    stored = {name: entry.to_json() for name, entry in store.topics.items()}
    store.close()
    stored["orders"]["configs"].update({"segment.bytes": "0", "no.such.config": "1"})
    stored["__consumer_offsets"]["configs"]["min.cleanable.dirty.ratio"] = "2"
    for current in (SNAPSHOT_FILE, JOURNAL_FILE):
        (data_dir / current).unlink(missing_ok=True)
    (data_dir / LEGACY_FILE).write_text(json.dumps(stored))

    odradek_broker.start()
    log = odradek_broker.log_tail(200)
    assert "topic 'orders': ignoring a stored config" in log and "segment.bytes" in log
    assert "no.such.config" in log
    assert "topic '__consumer_offsets'" in log and "min.cleanable.dirty.ratio" in log

    admin = admin_for(odradek_broker)
    configs = describe(admin, "orders")
    assert configs["segment.bytes"].is_default
    assert configs["retention.ms"].value == "3600000"  # the good value is kept
    assert describe(admin, "__consumer_offsets")["min.cleanable.dirty.ratio"].value == "0.5"
    assert read_all(odradek_broker, "orders", 2, "after-edit") == [b"a", b"b"]


@pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "sigkill"])
def test_deleted_records_stay_deleted_after_a_restart(
    odradek_broker: BrokerProcess, kill: bool
) -> None:
    admin = admin_for(odradek_broker)
    admin.create_topics([NewTopic("orders", 1, 1)])["orders"].result(timeout=10)
    produce(odradek_broker, "orders", [b"v%d" % i for i in range(8)])
    target = ConfluentTP("orders", 0, 5)
    assert admin.delete_records([target])[target].result(timeout=10).low_watermark == 5

    odradek_broker.restart(kill=kill)
    admin = admin_for(odradek_broker)
    earliest = ConfluentTP("orders", 0)
    offsets = admin.list_offsets({earliest: OffsetSpec.earliest()})
    assert offsets[earliest].result(timeout=10).offset == 5
    assert read_all(odradek_broker, "orders", 3, "after-delete") == [b"v5", b"v6", b"v7"]


def test_committed_offsets_survive_a_refused_partition_increase(
    odradek_broker: BrokerProcess,
) -> None:
    admin = admin_for(odradek_broker)
    admin.create_topics([NewTopic("orders", 1, 1)])["orders"].result(timeout=10)
    produce(odradek_broker, "orders", [b"v%d" % i for i in range(4)])
    groups = [f"group-{i}" for i in range(20)]  # spread over many offsets partitions
    for group in groups:
        consumer = Consumer({"bootstrap.servers": odradek_broker.bootstrap, "group.id": group})
        try:
            consumer.commit(offsets=[ConfluentTP("orders", 0, 3)], asynchronous=False)
        finally:
            consumer.close()

    with pytest.raises(Exception, match="POLICY_VIOLATION"):
        admin.create_partitions([NewPartitions("__consumer_offsets", 64)])[
            "__consumer_offsets"
        ].result(timeout=10)

    odradek_broker.restart()
    admin = admin_for(odradek_broker)
    assert len(admin.list_topics(timeout=10).topics["__consumer_offsets"].partitions) == 50
    for group in groups:
        consumer = Consumer({"bootstrap.servers": odradek_broker.bootstrap, "group.id": group})
        try:
            [committed] = consumer.committed([ConfluentTP("orders", 0)], timeout=20)
        finally:
            consumer.close()
        assert committed.offset == 3, group
