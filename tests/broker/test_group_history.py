"""Coordinator events are records of the group's own ``__consumer_offsets`` partition,
readable with any Kafka consumer (here confluent-kafka) and Odradek's pure decoder; the
broker no longer creates ``__odradek_group_events``."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.broker.config import BrokerConfig
from odradek.broker.topics import LEGACY_GROUP_EVENTS_TOPIC, TopicManager
from odradek.coordinator.history import GroupHistoryReader, StoredEvent
from odradek.coordinator.routing import OFFSETS_TOPIC, partition_for
from odradek.protocol.records import build_batch
from odradek.testing import Broker, BrokerProcess


def read_history(bootstrap: str, group: str) -> list[StoredEvent]:
    """The group's events, read with confluent-kafka from its partition's start to its end."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    partitions = len(admin.list_topics(OFFSETS_TOPIC, timeout=10).topics[OFFSETS_TOPIC].partitions)
    tp = TopicPartition(OFFSETS_TOPIC, partition_for(group, partitions))
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": "history-reader"})
    try:
        low, high = reader.get_watermark_offsets(tp, timeout=10)
        reader.assign([TopicPartition(tp.topic, tp.partition, low)])
        history = GroupHistoryReader(group)
        deadline = time.monotonic() + 15
        seen = low
        while seen < high and time.monotonic() < deadline:
            for msg in reader.consume(500, timeout=0.5):
                if msg.error():
                    continue
                seen = msg.offset() + 1
                history.add(msg.key(), msg.value())
        assert seen >= high, f"read {seen} of {high}"
        return history.events()
    finally:
        reader.close()


def test_a_rebalance_is_recorded_in_the_groups_partition(odradek_session_broker: Broker) -> None:
    group = f"history-{time.monotonic_ns()}"
    topic = f"history-topic-{time.monotonic_ns()}"
    admin = AdminClient({"bootstrap.servers": odradek_session_broker.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(timeout=10)
    consumer = Consumer(
        {
            "bootstrap.servers": odradek_session_broker.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
        }
    )
    assigned: list[int] = []
    consumer.subscribe(
        [topic], on_assign=lambda c, parts: assigned.extend(p.partition for p in parts)
    )
    deadline = time.monotonic() + 30
    while not assigned and time.monotonic() < deadline:
        consumer.poll(0.2)
    consumer.close()
    assert assigned, "the consumer never got an assignment"

    events = read_history(odradek_session_broker.bootstrap, group)
    assert [e.sequence for e in events] == list(range(len(events)))
    transitions = [
        (e.fields["from_state"], e.fields["to_state"])
        for e in events
        if e.kind == "state_transition"
    ]
    assert ("Empty", "PreparingRebalance") in transitions
    assert ("CompletingRebalance", "Stable") in transitions
    assert transitions[-1][1] == "Empty"  # the consumer left on close
    completed = [e for e in events if e.kind == "rebalance_completed"]
    assert completed and completed[0].fields["generation"] == 1
    assert all(e.group_id == group and e.at_ms > 0 for e in events)
    topics = admin.list_topics(timeout=10).topics
    assert "__odradek_group_events" not in topics


def test_an_old_data_directorys_event_topic_is_left_alone(tmp_path: Path) -> None:
    """Older brokers wrote events to __odradek_group_events: a data directory that has it
    keeps it, readable and internal, and nothing is written to it any more."""
    data = tmp_path / "data"
    manager = TopicManager(data, BrokerConfig())
    legacy = manager.create_internal(
        LEGACY_GROUP_EVENTS_TOPIC, 1, {"retention.ms": "604800000", "cleanup.policy": "delete"}
    )
    old_event = b'{"kind":"state_transition","group":"old","at_ms":1}'
    legacy.partitions[0].append(
        build_batch([(b"old", old_event, ())], timestamp_ms=int(time.time() * 1000)),
        from_client=False,
    )
    manager.close()
    broker = BrokerProcess(data, settings={"group.initial.rebalance.delay.ms": "0"})
    broker.start()
    try:
        group = "after-upgrade"
        member = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
        member.subscribe(["__consumer_offsets"])  # any topic: only the rebalance matters
        deadline = time.monotonic() + 30
        while not member.assignment() and time.monotonic() < deadline:
            member.poll(0.2)
        member.close()
        assert [e.kind for e in read_history(broker.bootstrap, group)][:1] == ["state_transition"]
        reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "legacy-reader"})
        try:
            low, high = reader.get_watermark_offsets(
                TopicPartition(LEGACY_GROUP_EVENTS_TOPIC, 0), timeout=10
            )
        finally:
            reader.close()
        assert (low, high) == (0, 1)  # its one old record, and nothing new
    finally:
        broker.stop()
