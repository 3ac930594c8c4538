"""Coordinator events reach __odradek_group_events, readable with any Kafka consumer."""

from __future__ import annotations

import json
import time

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.testing import Broker

EVENTS_TOPIC = "__odradek_group_events"


def read_events(bootstrap: str, group: str) -> list[dict[str, object]]:
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": "history-reader"})
    try:
        low, high = reader.get_watermark_offsets(TopicPartition(EVENTS_TOPIC, 0), timeout=10)
        reader.assign([TopicPartition(EVENTS_TOPIC, 0, low)])
        events = []
        deadline = time.monotonic() + 15
        seen = low
        while seen < high and time.monotonic() < deadline:
            for msg in reader.consume(500, timeout=0.5):
                if msg.error():
                    continue
                seen = msg.offset() + 1
                if msg.key() == group.encode():
                    events.append(json.loads(msg.value()))
        return events
    finally:
        reader.close()


def test_a_rebalance_is_recorded_as_events(odradek_session_broker: Broker) -> None:
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

    events = read_events(odradek_session_broker.bootstrap, group)
    transitions = [
        (e["from_state"], e["to_state"]) for e in events if e["kind"] == "state_transition"
    ]
    assert ("Empty", "PreparingRebalance") in transitions
    assert ("CompletingRebalance", "Stable") in transitions
    assert transitions[-1][1] == "Empty"  # the consumer left on close
    completed = [e for e in events if e["kind"] == "rebalance_completed"]
    assert completed and completed[0]["generation"] == 1
    assert all(isinstance(e["at_ms"], int) for e in events)
