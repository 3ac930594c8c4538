"""Consume a topic as a member of a consumer group, printing every rebalance.

Run it in two or three terminals with the same group to watch partitions move:

    python examples/consume.py orders demo-group
"""

from __future__ import annotations

import sys

from confluent_kafka import Consumer, TopicPartition


def main() -> None:
    topic = sys.argv[1] if len(sys.argv) > 1 else "orders"
    group = sys.argv[2] if len(sys.argv) > 2 else "demo-group"
    bootstrap = sys.argv[3] if len(sys.argv) > 3 else "127.0.0.1:9092"
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "cooperative-sticky",
        }
    )

    def assigned(c: Consumer, partitions: list[TopicPartition]) -> None:
        print(f"+ assigned {sorted(p.partition for p in partitions)}", flush=True)

    def revoked(c: Consumer, partitions: list[TopicPartition]) -> None:
        print(f"- revoked  {sorted(p.partition for p in partitions)}", flush=True)

    consumer.subscribe([topic], on_assign=assigned, on_revoke=revoked)
    try:
        while True:
            msg = consumer.poll(1.0)
            if msg is None or msg.error():
                continue
            key = msg.key().decode() if msg.key() else None
            value = msg.value().decode(errors="replace") if msg.value() else None
            print(f"{msg.topic()}[{msg.partition()}]@{msg.offset()} {key}: {value}", flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()  # leaves the group: the others get its partitions at once


if __name__ == "__main__":
    main()
